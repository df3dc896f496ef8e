"""The filter stage: the heuristics of ``curate.clean.filters`` on every batch, then the gold gate (math-verify must
parse the gold answer, in worker processes, plain golds decided in arrow).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.clean.filters import BATCH_COLUMNS, FilterConfig, filter_batch
from curate.core.manifest import Manifest
from curate.core.parallel import ordered_map, workers_for
from curate.core.runner import (
    StageRun,
    input_entries,
    reject_table,
    run_stage,
)
from curate.core.shards import count_rows, iter_batches, keep_rows, kept_dirs

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------- filter


def filter_stage(inputs: list[Path], out: Path, cfg: FilterConfig | None = None, force: bool = False) -> Manifest:
    """Heuristic filters, then the gold gate (math-verify must parse the gold answer)."""
    cfg = cfg or FilterConfig()
    from curate.difficulty.grading import GRADER_VERSION, GradingPool
    from curate.difficulty.models import cache_dir
    from curate.difficulty.verdicts import GoldVerdicts

    def body(run: StageRun) -> None:
        dirs = kept_dirs(inputs)
        workers = workers_for(sum(count_rows(d) for d in dirs), cfg.workers)
        run.extra["workers"] = workers
        read: deque = deque()  # the batches sent and not yet written, in order

        def batches():
            for d in dirs:
                for t in iter_batches(d):
                    read.append(t)
                    yield t.select(list(BATCH_COLUMNS)), cfg

        pool = GradingPool(timeout_s=cfg.gold_timeout_s).spawn() if cfg.gold_gate else None  # ready by the first batch
        known = (GoldVerdicts(cache_dir(cfg.gold_cache, "gold_verdicts"), cfg.gold_timeout_s)
                 if pool is not None and cfg.gold_cache else None)
        if pool is not None and known is not None:
            pool.remember(known.load())
        results = ordered_map(filter_batch, batches(), workers)
        try:
            while True:
                with run.timed("heuristics"):
                    got = next(results, None)
                if got is None:
                    break
                filled, reason = got
                t = read.popleft()
                for name, col in filled.items():
                    t = t.set_column(t.schema.get_field_index(name), name, col)
                if pool is not None:
                    with run.timed("gold_gate"):
                        t, reason = _gold_gate(t, reason, pool)
                passed = pc.is_null(reason)
                rejected = pc.invert(passed)
                rej = t.filter(rejected)
                run.emit(keep_rows(t, passed, rej),
                         reject_table(rej, "filter", reason.filter(rejected)) if rej.num_rows else None)
        finally:
            results.close()  # its worker processes and read-ahead thread stop now, also after an error
            if pool is not None:
                pool.count_plain()
                run.extra["gold_gate"] = {**pool.stats, "grader_version": GRADER_VERSION,
                                          "verdict_cache": str(known.dir) if known is not None else None}
                if known is not None:
                    known.append(pool.new_gold_verdicts())
                pool.close()

    # the grader decides which golds pass: a new math-verify is a new filter; processes change nothing in the output
    config = {**{k: v for k, v in asdict(cfg).items() if k not in ("workers", "gold_cache")},
              "grader_version": GRADER_VERSION if cfg.gold_gate else None}
    return run_stage("filter", out, input_entries(inputs), config, body, force=force, input_folders=inputs)


def _gold_gate(t: pa.Table, reason: pa.Array, pool) -> tuple[pa.Table, pa.Array]:
    """``gold_parseable`` and the rejection reason of each row the heuristics passed: each distinct gold of the batch
    asked once (golds repeat: a million synthetic rows hold 110k distinct), the verdicts put back in arrow."""
    open_ = pc.is_null(reason)
    if isinstance(open_, pa.ChunkedArray):
        open_ = open_.combine_chunks()
    ans = pc.fill_null(pc.filter(t["answer"], open_), "")
    enc = pc.dictionary_encode(ans)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    plain = pool.plain_golds(enc.dictionary).to_numpy(zero_copy_only=False)  # integers, decimals, a/b: no worker
    rest = enc.dictionary.filter(pa.array(~plain)).to_pylist()
    res = pool.parse_gold(rest)
    pool.stats["calls"] += len(ans) - len(rest)  # ``calls`` counts rows asked, as when each row was asked
    pool.stats["memo_hits"] += len(ans) - len(rest)
    ok_np = np.full(len(plain), True, dtype=object)
    why_np = np.full(len(plain), None, dtype=object)
    ok_np[~plain] = [r.ok for r in res]
    why_np[~plain] = [None if r.ok else "answer_unparseable" if r.ok is False else
                      "answer_parse_timeout" if r.reason == "timeout" else "answer_parse_crash" for r in res]
    ok, why = pa.array(ok_np, pa.bool_()), pa.array(why_np, pa.string())
    idx = enc.indices
    parseable = pc.replace_with_mask(pa.nulls(t.num_rows, pa.bool_()), open_, pc.take(ok, idx))
    reasons = pc.replace_with_mask(reason.combine_chunks() if isinstance(reason, pa.ChunkedArray) else reason,
                                   open_, pc.take(why, idx))
    t = t.set_column(t.schema.get_field_index("gold_parseable"), "gold_parseable", parseable)
    return t, reasons
