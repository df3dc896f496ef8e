"""Configs defined once: frozen dataclasses, one loader for JSON/TOML files, CLI options derived from the fields.

A config class is a frozen dataclass whose ``__post_init__`` validates values (``check_choice`` names the
field and the allowed values). Each field's help is its trailing comment in the class source (or the
comment lines just above it), so the default, its source and its help are written once, next to each other.

    cfg = from_dict(FilterConfig, {"max_problem_chars": 4000}, where="filters")   # types and names checked
    add_options(parser, FilterConfig)                                             # --max-problem-chars ...
    cfg = from_args(FilterConfig, args)                                           # given flags over defaults
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import inspect
import json
import re
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any

from curate.core.errors import GradusError


class ConfigError(GradusError, ValueError):
    """A config value or key that is not allowed; the message names the field and what is allowed."""


def check_choice(field: str, value: Any, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{field}: {value!r} is not one of {', '.join(map(str, allowed))}")


def load_file(path: str | Path) -> dict:
    """A JSON or TOML config file as a dict (a clear error for a missing or malformed file)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such config file")
    text = p.read_text()
    try:
        if p.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        else:
            data = json.loads(text)
    except (ValueError, json.JSONDecodeError) as e:
        raise ConfigError(f"{p}: not valid {'TOML' if p.suffix == '.toml' else 'JSON'}: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a table/object of settings")
    return data


def suggest(name: str, known) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_keys(data: dict, known, where: str) -> None:
    for k in data:
        if k not in known:
            raise ConfigError(f"{where}: unknown setting {k!r}{suggest(k, known)}; known: {', '.join(sorted(known))}")


@cache
def type_hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def coerce(value: Any, tp: Any, where: str) -> Any:
    """``value`` checked against annotation ``tp`` (lists become tuples where a tuple is declared)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        opts = typing.get_args(tp)
        if value is None and type(None) in opts:
            return None
        errors = []
        for o in opts:
            if o is type(None):
                continue
            try:
                return coerce(value, o, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: {value!r} fits none of {tp}")
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table of settings, got {value!r}")
        return from_dict(tp, value, where)
    if origin in (tuple, list):
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        args = typing.get_args(tp)
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return tuple(coerce(v, args[0], where) for v in value)
        if origin is tuple and args:
            if len(args) != len(value):
                raise ConfigError(f"{where}: expected {len(args)} values, got {len(value)}")
            return tuple(coerce(v, a, where) for v, a in zip(value, args, strict=True))
        return [coerce(v, args[0], where) for v in value] if args else list(value)
    if origin is dict:
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):  # KEY=VALUE options
            return dict(_key_value(v, where) for v in value)
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {value!r}")
        return dict(value)
    if tp in _SCALARS:
        accepts, what = _SCALARS[tp]
        if not accepts(value):
            raise ConfigError(f"{where}: expected {what}, got {value!r}")
        return float(value) if tp is float else value
    return value


def _key_value(text: str, where: str) -> tuple[str, Any]:
    """``KEY=VALUE`` from the command line: the value read as JSON where it is JSON (numbers, true, lists), else text."""
    import json

    key, eq, raw = text.partition("=")
    if not eq or not key.strip():
        raise ConfigError(f"{where}: expected KEY=VALUE, got {text!r}")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


# scalar annotation -> (does a value fit, what to call it); bools are never numbers here
_SCALARS: dict[Any, tuple[Any, str]] = {
    bool: (lambda v: isinstance(v, bool), "true or false"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    float: (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
    str: (lambda v: isinstance(v, str), "a string"),
}


def from_dict(cls, data: dict, where: str = "config", base_dir: Path | None = None):
    """An instance of dataclass ``cls`` from ``data``: unknown keys (with a suggestion) and wrong types refused.

    Fields whose metadata says ``path`` are resolved against ``base_dir`` (the config file's folder).
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table of settings, got {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    check_keys(data, fields, where)
    hints = type_hints(cls)
    values = {}
    for k, v in data.items():
        v = coerce(v, hints[k], f"{where}.{k}")
        if base_dir is not None and fields[k].metadata.get("path") and isinstance(v, str) and v:
            v = _rebase(v, base_dir)
        elif base_dir is not None and fields[k].metadata.get("path") and isinstance(v, tuple | list):
            v = type(v)(_rebase(x, base_dir) for x in v)
        values[k] = v
    try:
        return cls(**values)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from e


def _rebase(v: str, base: Path) -> str:
    """A relative local path in a config file means relative to that file. Only what names a file there (or
    starts with ./ or ../) is rebased: hub ids (``owner/name``, ``gsm8k``), known benchmark names (``aime24``)
    and generator specs (``synthetic:...``, ``reasoning_gym:...``) are names, not paths. ``NAME=PATH`` rebases its PATH."""
    if v == "synthetic" or v.startswith(("synthetic:", "hf:", "reasoning_gym:")):
        return v
    name, eq, rest = v.partition("=")
    if eq and "/" not in name:
        return f"{name}={_rebase(rest, base)}"
    p = Path(v).expanduser()
    if p.is_absolute():
        return str(p)
    cand = base / p
    return str(cand) if cand.exists() or v.startswith(("./", "../")) else str(p)


@cache
def field_help(cls) -> dict[str, str]:
    """Each field's help: its trailing ``# comment`` in the class source, else the comment lines above it."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not (isinstance(klass, type) and dataclasses.is_dataclass(klass)):
            continue
        try:
            lines = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            continue
        above: list[str] = []
        for ln in lines:
            s = ln.strip()
            if s.startswith("#"):
                above.append(s.lstrip("# ").strip())
                continue
            m = re.match(r"(\w+)\s*:\s*[^#]+?(?:#\s*(.*))?$", s)
            if m and not s.startswith(("def ", "return", "@", "class ")):
                text = m.group(2) or " ".join(above)
                if text:
                    out[m.group(1)] = text
            above = []
    return out


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_options(parser: argparse.ArgumentParser, cls, skip=(), aliases: dict[str, list[str]] | None = None,
                required=()) -> None:
    """One option per field of ``cls`` (nested dataclasses flattened): type, help and default from the field.

    Options that are not given leave the field at its default (``from_args`` reads only what was given).
    """
    aliases = aliases or {}
    helps = field_help(cls)
    hints = type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.init:
            continue
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            add_options(parser, tp, skip, aliases, required)
            continue
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        h = helps.get(f.name, "")
        names = [_flag(f.name), *aliases.get(f.name, [])]
        kw: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS}
        base = _base_type(tp)
        if base is bool:
            kw["action"] = argparse.BooleanOptionalAction
            kw["help"] = f"{h} (default: {'see above' if default is None else 'on' if default else 'off'})".strip()
        elif typing.get_origin(base) is dict:
            kw.update(action="append", type=str, metavar="KEY=VALUE")
            kw["help"] = f"{h} (KEY=VALUE, repeatable)".strip()
        elif typing.get_origin(base) in (tuple, list):
            item = typing.get_args(base)[0] if typing.get_args(base) else str
            kw.update(action="append", type=item if item in (int, float) else str, metavar=f.name.upper())
            kw["help"] = f"{h} (repeatable)".strip()
        else:
            kw["type"] = base if base in (int, float) else str
            kw["help"] = f"{h} (default: {default})".strip() if default is not None else h
            if f.name in required:
                kw["required"] = True
        parser.add_argument(*names, **kw)


def _base_type(tp):
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        opts = [o for o in typing.get_args(tp) if o is not type(None)]
        return opts[0] if len(opts) == 1 else str
    return tp


def given(cls, args: argparse.Namespace) -> dict:
    """The fields of ``cls`` (nested ones as nested dicts) that were given on the command line."""
    out: dict[str, Any] = {}
    hints = type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            sub = given(tp, args)
            if sub:
                out[f.name] = sub
        elif hasattr(args, f.name):
            out[f.name] = getattr(args, f.name)
    return out


def from_args(cls, args: argparse.Namespace, **fixed):
    """``cls`` from the options that were given (see ``add_options``), plus ``fixed`` values."""
    data = given(cls, args)
    data.update(fixed)
    return from_dict(cls, data, where="options")
