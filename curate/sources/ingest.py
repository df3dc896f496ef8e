"""The ingest stage: a source (file, folder, glob, hub id, generator) read into record shards through its adapter.

Every raw row ends kept or rejected with a reason (``ingest_*``); large sources are adapted in worker processes.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from curate.clean.text import content_ids, repair_escapes
from curate.core.errors import SourceError
from curate.core.manifest import Manifest
from curate.core.parallel import PARALLEL_MIN_ROWS, ordered_map, workers_for
from curate.core.runner import (
    StageRun,
    reject_table,
    run_stage,
)
from curate.core.schema import SCHEMA, conform
from curate.sources.adapters import (
    ADAPTERS,
    apply_adapter,
    detect_adapter,
    mapped_adapter,
    parse_mapping,
    row_id_prefix,
)
from curate.sources.answers import answer_types
from curate.sources.readers import FastPathFailed, detect_format, file_fingerprint, read_source

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------- ingest
# 2: row-number ids qualified by the file name, \[..\] answer wrappers, newline-damaged commands repaired,
#    solutions whose boxes disagree rejected as answer_ambiguous
INGEST_RULES = 2


def _ambiguous_boxes(boxes: list, reject: list, detail: list, pool) -> int:
    """Reject (``answer_ambiguous``) the rows whose solution boxes answers that math-verify finds different: a
    "find all solutions" boxed as ``-2`` and ``1``, a solution that boxes 6 then 12. Boxes that are one answer
    written two ways (``x+11`` and ``11+x``) pass. Returns the number rejected."""
    pairs, owners = [], []
    for i, bx in enumerate(boxes):
        if bx and reject[i] is None:
            for b in bx[:-1]:
                pairs.append((b, bx[-1]))
                owners.append(i)
    same = pool.same_answer(pairs) if pairs else []
    bad = sorted({i for i, ok in zip(owners, same, strict=True) if ok is False})  # a timeout decides nothing
    for i in bad:
        reject[i] = "answer_ambiguous"
        detail[i] = "boxes: " + " | ".join(boxes[i])[:300]
    return len(bad)

def to_records(cols: dict, n: int, source: str, origin: str) -> tuple[pa.Table, list, list, int]:
    problems = pa.array(cols["problem"], pa.string())
    problems, repaired = repair_escapes(problems)
    stripped = pc.utf8_trim_whitespace(problems)
    cols = dict(cols)
    if cols.get("answer") is not None:
        cols["answer"], rep_a = repair_escapes(pa.array(cols["answer"], pa.string()))
        repaired = pc.or_(repaired, rep_a)
    reject, detail = cols.pop("_reject"), cols.pop("_reject_detail")
    cols.pop("_boxes", None)
    cols["problem"] = pc.fill_null(stripped, "")
    cols["id"] = content_ids(stripped)
    cols["source"] = pa.array([source] * n, pa.string())
    cols["origin"] = pa.array([origin] * n, pa.string())
    if "answer" in cols:
        cols["answer_type"] = answer_types(cols["answer"])
    null_problem = pc.is_null(problems).to_pylist()
    reject = [r or ("ingest_missing_problem" if np_ else None) for r, np_ in zip(reject, null_problem, strict=False)]
    n_repaired = int(pc.sum(repaired.cast(pa.int64())).as_py() or 0)
    return conform({k: v for k, v in cols.items() if k in SCHEMA.names}, n), reject, detail, n_repaired


def _adapt_batch(job: tuple) -> tuple:
    """One raw batch through its adapter into record rows (in a worker process for large sources)."""
    which, raw, prefix, source_name, spec = job
    chosen = ADAPTERS[which] if which in ADAPTERS else mapped_adapter(parse_mapping(which))
    cols = apply_adapter(chosen, raw, prefix)
    boxes = cols.get("_boxes")
    table, reject, detail, n_repaired = to_records(cols, raw.num_rows, source_name or chosen.name, spec)
    return table, reject, detail, n_repaired, boxes


def _ingest_workers(spec: str, fmt: str) -> int:
    """Worker processes for a source: the usable cores when it holds 200k rows or more (a Parquet file's
    metadata, a synthetic spec's ``n``; other files from their size, 64 MB or more), else this process."""
    try:
        if fmt == "synthetic":
            from curate.sources.synthetic import parse_spec

            return workers_for(int(parse_spec(spec)["n"]))
        from curate.sources.readers import source_files

        files = source_files(spec)  # the file, or every file of a folder or a glob
        if not files:
            return 1
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return workers_for(sum(pq.ParquetFile(f).metadata.num_rows for f in files))
        return workers_for(PARALLEL_MIN_ROWS if sum(f.stat().st_size for f in files) >= 64 << 20 else 0)
    except Exception:  # noqa: BLE001 - a guess at the size: the reader reports what is wrong with the source
        return 1


def ingest(
    spec: str,
    out: Path,
    fmt: str | None = None,
    adapter: str | None = None,
    mapping: str | None = None,
    source_name: str | None = None,
    force: bool = False,
    revision: str | None = None,
) -> Manifest:
    """Read a source (file, hub id, ``synthetic:...``) into record shards; unreadable rows are rejects."""
    fmt = fmt or detect_format(spec)
    if adapter and adapter not in ADAPTERS:
        raise SourceError(f"unknown adapter {adapter!r}; choose one of {', '.join(ADAPTERS)}")
    mapped = mapped_adapter(parse_mapping(mapping)) if mapping else None
    from curate.difficulty.grading import GRADER_VERSION

    config = {"format": fmt, "adapter": adapter, "mapping": mapping, "source_name": source_name,
              "rules": INGEST_RULES, "grader_version": GRADER_VERSION}  # math-verify judges a solution's boxes
    pinned = None
    inputs: list[dict]
    if fmt == "hf":  # the commit this run reads: its fingerprint, recorded in the manifest (and the card)
        from curate.sources.hub import resolve

        pinned = resolve(spec, revision)
        inputs = [{"source": spec, "revision": pinned.commit, "fingerprint": pinned.commit[:16]}]
    else:
        if revision:
            raise SourceError(f"{spec}: a revision is for hub sources only")
        inputs = [{"source": spec, "fingerprint": file_fingerprint(spec)}]
    from curate.sources.readers import source_root

    skipped: dict[str, str] = {}
    if source_root(spec) is not None:  # a folder or a glob: how many files the fingerprint covers, and what it skips
        from curate.sources.readers import skipped_files, source_files

        inputs[0]["files"] = len(source_files(spec))
        skipped = skipped_files(spec)
        for name, why in list(skipped.items())[:5]:
            log.warning("%s: not read: %s (%s)", spec, name, why)
    local = Path(spec)

    def body(run: StageRun) -> None:
        from curate.difficulty.grading import GradingPool

        if skipped:
            run.extra["files_not_read"] = skipped

        pool = GradingPool(timeout_s=5)  # started only if a solution boxes several different answers
        try:
            try:
                if pinned is not None:
                    run.extra["revision"] = {"commit": pinned.commit, "resolved_by": pinned.how, "asked": revision}
                _ingest_batches(run, read_source(spec, fmt, pinned=pinned), pool)
            except FastPathFailed as e:
                log.warning("%s: arrow reader failed (%s); reading line by line", spec, str(e)[:120])
                run.reset()
                run.extra["read_path"] = "python"
                _ingest_batches(run, read_source(spec, fmt, slow=True, pinned=pinned), pool)
        finally:
            pool.close()

    def _ingest_batches(run: StageRun, batches, pool) -> None:
        chosen = None
        prefix = row_id_prefix(spec) if fmt not in ("synthetic", "reasoning_gym") else None

        def jobs():
            nonlocal chosen
            for raw in batches:
                if chosen is None:
                    dup = sorted({c for c in raw.column_names if raw.column_names.count(c) > 1})
                    if dup:  # which one would be the answer? neither is taken silently
                        raise SourceError(f"{spec}: the column {dup[0]!r} appears {raw.column_names.count(dup[0])} times; "
                                          "rename all but one in the file")
                    chosen = mapped or (ADAPTERS[adapter] if adapter else None)
                    if chosen is None:
                        generated = fmt in ("synthetic", "reasoning_gym")  # the generators' own columns
                        chosen = ADAPTERS[fmt] if generated else detect_adapter(raw)
                    run.extra["adapter"] = chosen.name
                yield (mapping if mapped else chosen.name, raw, prefix, source_name, spec)

        workers = _ingest_workers(spec, fmt)
        run.extra["workers"] = workers
        with run.timed("adapt"):
            for table, reject, detail, n_repaired, boxes in ordered_map(_adapt_batch, jobs(), workers):
                run.extra["repaired_latex_escapes"] = run.extra.get("repaired_latex_escapes", 0) + n_repaired
                if boxes and any(boxes):
                    with run.timed("boxes"):
                        n_amb = _ambiguous_boxes(boxes, reject, detail, pool)
                    run.extra["answer_ambiguous"] = run.extra.get("answer_ambiguous", 0) + n_amb
                if not any(reject):  # reasons are non-empty strings: the usual batch, nothing rejected
                    run.emit(table, None)
                    continue
                bad = pa.array([r is not None for r in reject])
                kept = table.filter(pc.invert(bad))
                rej = table.filter(bad)
                rej_reasons = [r for r in reject if r is not None]
                rej_detail = [d for r, d in zip(reject, detail, strict=False) if r is not None]
                run.emit(kept, reject_table(rej, "ingest", rej_reasons, rej_detail) if rej.num_rows else None)

    return run_stage("ingest", out, inputs, config, body, force=force,
                     input_folders=[local] if local.exists() else [r for r in [source_root(spec)] if r is not None])
