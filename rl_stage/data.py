"""Prompts for the GRPO stage: the rows of curated Parquet shards (``gradus export`` folders, with or without
``--curriculum``, or scored shard folders), their curriculum stages, and the held-out prompts of an evaluation.
The prompt samplers that draw from them are in ``rl_stage.samplers``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from curate.core.errors import GradusError
from curate.core.manifest import Manifest

COLUMNS = ["id", "problem", "answer", "pass_rate", "n_correct", "n_graded", "k", "bucket", "bucket_masses"]


class DataError(GradusError):
    pass


@dataclass
class Prompt:
    id: str
    problem: str
    answer: str
    index: int = -1  # the row's place in its sampler's pool (-1: not drawn from a pool)
    bucket: str | None = None  # the row's offline difficulty bucket (None: not scored)
    prior: float | None = None  # the offline pass rate (None: not scored)
    expected: float | None = None  # the sampler's expected pass rate when it drew the prompt


def find_stages(paths: Sequence[str | Path]) -> list[tuple[str, list[Path]]]:
    """[(stage name, parquet files)] in curriculum order, from export folders or shard folders."""
    stages: list[tuple[str, list[Path]]] = []
    for p in map(Path, paths):
        if not p.exists():
            raise DataError(f"{p}: no such folder")
        man = Manifest.find(p)
        if man is not None and man.stage == "export":
            fmt = man.stats["format"]
            if fmt != "parquet":
                raise DataError(f"{p}: a {fmt} export; the trainer reads parquet exports (gradus export --format parquet)")
            for part in man.stats["parts"]:
                files = sorted((p / part["folder"] / "data").glob("*.parquet"))
                stages.append((part.get("bucket") or p.name, files))
        else:
            folder = p / "kept" if (p / "kept").is_dir() else p
            files = sorted(folder.glob("*.parquet"))
            stages.append((p.name, files))
    stages = [(n, f) for n, f in stages if f]
    if not stages:
        raise DataError(f"no parquet shards under {[str(p) for p in paths]}")
    return stages


def load_rows(files: list[Path]) -> dict:
    """Columns of the prompts in ``files``: id, problem, answer, the offline counts ``n_correct`` of ``k`` (0 of 0
    for rows without an estimate; ``k`` falls back to ``n_graded``: every sample counts, timeouts fail) and the
    offline ``bucket`` (the export's, else from the counts; None without an estimate)."""
    from curate.select.curriculum import bucket_of, decided_bucket

    rows: dict[str, list] = {"id": [], "problem": [], "answer": [], "n_correct": [], "k": [], "bucket": []}
    for f in files:
        pf = pq.ParquetFile(f)
        names = pf.schema_arrow.names
        for c in ("id", "problem", "answer"):
            if c not in names:
                raise DataError(f"{f}: missing column {c!r}")
        cols = [c for c in COLUMNS if c in names]
        for rb in pf.iter_batches(columns=cols, batch_size=8192):
            d = rb.to_pydict()
            none = [None] * rb.num_rows
            for i in range(rb.num_rows):
                ans = d["answer"][i]
                if ans is None or not str(ans).strip():
                    raise DataError(f"{f}: row {d['id'][i]} has no gold answer; curate and export the data first")
                rows["id"].append(d["id"][i])
                rows["problem"].append(d["problem"][i])
                rows["answer"].append(str(ans))
                nc, ng, k = d.get("n_correct", none)[i], d.get("n_graded", none)[i], d.get("k", none)[i]
                total = (k if k is not None else ng) or 0
                rows["n_correct"].append(int(nc or 0) if total else 0)
                rows["k"].append(int(total))
                bucket = d.get("bucket", none)[i] or decided_bucket(d.get("bucket_masses", none)[i])
                if bucket is None and nc is not None and ng is not None:
                    bucket = bucket_of(int(nc), int(ng), k=k)
                rows["bucket"].append(bucket)
    if not rows["id"]:
        raise DataError(f"{[str(f) for f in files]}: no rows")
    return rows


def load_pool(files: list[Path]) -> dict:
    rows = load_rows(files)
    rows["s_correct"] = [float(x) for x in rows["n_correct"]]
    rows["s_total"] = [float(x) for x in rows["k"]]
    return rows


def held_out_prompts(paths: Sequence[str | Path], n: int) -> list[Prompt]:
    """Up to ``n`` evaluation prompts from *every* stage of every folder in ``paths``, chosen by id alone.

    The subset is the ``n`` rows whose (id, row) hash lowest: it does not depend on the run's seed or on the
    order of the files, so runs with different seeds are evaluated on the same prompts and compare pair by
    pair. Returned in that hash order."""
    import hashlib

    files = [f for _, fs in find_stages(paths) for f in fs]
    rows = load_pool(files)
    seen: dict[str, int] = {}
    keys = []
    for i, pid in enumerate(rows["id"]):
        j = seen.get(pid, 0)  # the same id twice (one text in two sources): both rows, told apart by count
        seen[pid] = j + 1
        keys.append((hashlib.sha1(f"{pid}\x1f{j}".encode()).hexdigest(), i))
    pick = [i for _, i in sorted(keys)[:n]]
    return [Prompt(rows["id"][i], rows["problem"][i], rows["answer"][i]) for i in pick]


def scored_template(paths: Sequence[str | Path]) -> str | None:
    """The prompt template the rows of ``paths`` were scored with: the export's ``difficulty_template`` column, or a
    scored shard's ``template``; the most common one where they differ (logged); None when nothing records one."""
    import logging
    from collections import Counter

    import pyarrow.compute as pc

    seen: Counter = Counter()
    for _, files in find_stages(paths):
        for f in files:
            names = pq.ParquetFile(f).schema_arrow.names
            col = "difficulty_template" if "difficulty_template" in names else None
            if col is None and "template" in names and "messages" not in names:  # a scored shard, not an export
                col = "template"
            if col is None:
                continue
            counts = pc.value_counts(pq.read_table(f, columns=[col])[col].combine_chunks())
            for v in counts.to_pylist():
                if v["values"] is not None:
                    seen[v["values"]] += v["counts"]
    if not seen:
        return None
    if len(seen) > 1:
        logging.getLogger(__name__).warning("the rows were scored with several templates (%s): training with %s",
                                            dict(seen), seen.most_common(1)[0][0])
    return seen.most_common(1)[0][0]
