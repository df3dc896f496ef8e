"""The decontamination stage: rows matching a benchmark item (``curate.clean.decontam``) rejected, before dedup so
that every copy of a benchmark item is reported.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from curate.clean.decontam import (
    BenchmarkIndex,
    DecontamConfig,
    Verdicts,
    init_matcher,
    match_batch,
    resolve_benchmark,
)
from curate.clean.text import content_ids
from curate.core.manifest import Manifest
from curate.core.parallel import ordered_map, workers_for
from curate.core.runner import (
    StageError,
    StageRun,
    input_entries,
    reject_table,
    run_stage,
    value_counts,
)
from curate.core.shards import count_rows, iter_batches, keep_rows, kept_dirs
from curate.sources.readers import file_fingerprint

log = logging.getLogger(__name__)


# -------------------------------------------------------------------------------------------- decontam
def decontam_stage(inputs: list[Path], out: Path, cfg: DecontamConfig, force: bool = False) -> Manifest:
    """Reject rows matching a benchmark item (exact normalized text or n-gram overlap)."""
    if not cfg.benchmarks:
        raise ValueError("decontam: name at least one benchmark (--against NAME=PATH or aime24/math500/amc23/aime25)")
    resolved = [resolve_benchmark(b) for b in cfg.benchmarks]
    ins = input_entries(inputs) + [{"benchmark": n, "fingerprint": file_fingerprint(p)} for n, p in resolved]

    def body(run: StageRun) -> None:
        with run.timed("index"):
            index = BenchmarkIndex.build(tuple(f"{n}={p}" for n, p in resolved), cfg.ngram)
        run.extra["benchmark_items"] = {n: index.names.count(n) for n, _ in resolved}
        by_bench: dict[str, int] = {}
        dirs = kept_dirs(inputs)
        workers = workers_for(sum(count_rows(d) for d in dirs), cfg.workers)
        run.extra["workers"] = workers
        read: deque = deque()  # the batches sent and not yet written, in order, with their rows' references
        verdicts = Verdicts()  # each distinct text is matched once

        def problems():
            for d in dirs:
                for i, t in enumerate(iter_batches(d)):
                    if i == 0 and t.num_rows:  # exact matches compare ids: they must be the problems' content ids
                        sample = t.slice(0, 1000)
                        if not pc.all(pc.equal(sample["id"], content_ids(sample["problem"]))).as_py():
                            raise StageError(f"decontam: {d}: the rows' ids are not the content ids of their problems "
                                             "(shards not written by gradus ingest?): ingest the source again")
                    refs, send, base = verdicts.plan(t["problem"], t["id"])
                    read.append((t, refs, base))
                    rows = pa.array(send, pa.int64())
                    yield t["problem"].take(rows), t["id"].take(rows)

        with run.timed("match"):
            matches = ordered_map(match_batch, problems(), workers, init_matcher, (index, cfg))
            for found in matches:
                t, refs, base = read.popleft()
                bench, bid, kind = verdicts.resolve(refs, base, found)
                hit = pc.is_valid(kind)
                t = t.set_column(t.schema.get_field_index("contam_benchmark"), "contam_benchmark", bench)
                t = t.set_column(t.schema.get_field_index("contam_id"), "contam_id", bid)
                rej = t.filter(hit)
                reasons = pc.binary_join_element_wise("contaminated_", kind.filter(hit), "")
                details = pc.binary_join_element_wise(bench.filter(hit), pc.fill_null(bid.filter(hit), "None"), ":")
                for b, c in value_counts(rej["contam_benchmark"]).items():
                    by_bench[b] = by_bench.get(b, 0) + c
                run.emit(keep_rows(t, pc.invert(hit), rej),
                         reject_table(rej, "decontam", reasons, details) if rej.num_rows else None)
        run.extra["contaminated_by_benchmark"] = by_bench
        run.extra["texts_matched"] = verdicts.matched  # distinct texts: every other row took its text's verdict

    config = {k: v for k, v in asdict(cfg).items() if k != "workers"}  # processes change nothing in the output
    return run_stage("decontam", out, ins, config, body, force=force, input_folders=inputs)
