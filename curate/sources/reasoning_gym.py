"""Procedural tasks of the ``reasoning-gym`` package as a source (``pip install 'gradus[tasks]'``).

    reasoning_gym:task=chain_sum,n=200,seed=1000,min_terms=2,max_terms=3,min_digits=1,max_digits=2,level=2

``task`` names one of the package's data sets (``reasoning_gym.factory.DATASETS``), ``n`` the rows and ``seed``
its seed (entry i is made from seed + i alone, so two sources of one task overlap unless their seeds lie n or
more apart); ``level`` is a label stored as each row's level; every other option is the task's own setting
(integers, numbers, true/false, and tuples written with ``|``: ``operators=+|-``). Rows carry the task's
question and gold answer, the task as subject and ``level`` as the level and declared difficulty. Grading is gradus's
own (math-verify), not the package's ``score_answer``, whose partial credit for a gold answer inside a longer
one (``"10"`` against ``"1"``) is a reward a policy can exploit; keep to tasks whose answers math-verify reads
(plain numbers: chain_sum, products, basic_arithmetic, simple_equations, leg_counting, lcm).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from curate.core.errors import SourceError
from curate.sources.rows import batched_tables

PREFIX = "reasoning_gym:"


def _value(v: str) -> Any:
    if "|" in v:
        return tuple(_value(x) for x in v.split("|"))
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return v


def parse_spec(spec: str) -> tuple[dict, dict]:
    """(gradus's options: task, n, seed, level; the task's own settings) of a ``reasoning_gym:`` spec."""
    ours: dict[str, Any] = {"task": None, "n": 100, "seed": 0, "level": None}
    theirs: dict[str, Any] = {}
    for part in filter(None, spec[len(PREFIX):].split(",")):
        k, eq, v = part.partition("=")
        if not eq or not k:
            raise SourceError(f"{spec}: write options as key=value (got {part!r})")
        if k in ours:
            ours[k] = v
        else:
            theirs[k] = _value(v)
    if not ours["task"]:
        raise SourceError(f"{spec}: name the task, e.g. reasoning_gym:task=chain_sum,n=100")
    try:
        ours["n"], ours["seed"] = int(ours["n"]), int(ours["seed"])
    except ValueError as e:
        raise SourceError(f"{spec}: n and seed must be integers ({e})") from e
    if ours["n"] < 1:
        raise SourceError(f"{spec}: n must be >= 1, got {ours['n']}")
    return ours, theirs


def reasoning_gym_batches(spec: str) -> Iterator[pa.Table]:
    ours, theirs = parse_spec(spec)
    try:
        import reasoning_gym
        from reasoning_gym.factory import DATASETS
    except ImportError as e:
        raise SourceError(f"{spec}: the reasoning-gym package is not installed (pip install 'gradus[tasks]')") from e
    task = ours["task"]
    if task not in DATASETS:
        from difflib import get_close_matches

        near = get_close_matches(task, list(DATASETS), n=1)
        raise SourceError(f"{spec}: reasoning-gym has no task {task!r}" + (f"; did you mean {near[0]!r}?" if near else ""))
    try:
        ds = reasoning_gym.create_dataset(task, size=ours["n"], seed=ours["seed"], **theirs)
    except (TypeError, ValueError, AssertionError) as e:
        raise SourceError(f"{spec}: reasoning-gym refused the settings of {task!r}: {e}") from e

    def rows():
        for i in range(ours["n"]):
            entry = ds[i]
            yield i, {"id": f"rg-{task}-{ours['seed'] + i}", "problem": entry["question"], "answer": str(entry["answer"]),
                      "subject": task, "level": ours["level"], "difficulty": ours["level"], "question_type": task}, None

    yield from batched_tables(rows())
