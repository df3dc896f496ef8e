"""The grading pool against pebble's ProcessPool, on the same math-verify work: why the pool stays hand-written.

Items: every MATH-500 gold answer with three responses (its own boxed answer, a wrong boxed one, an unboxed sentence),
extracted as the grader does; both pools run ``_worker_verify`` on 2 workers that have imported math-verify, and
give the same verdict on every item. pebble's ``map`` applies its timeout per chunk: with ``chunksize=1`` each item
has its own deadline, as in ``GradingPool`` (a stuck expression costs one verdict, the worker is replaced); with
larger chunks a stuck item fails its whole chunk.

    pip install pebble && python dev/pebble_pool.py ../shared/data/math500/test.jsonl
"""

from __future__ import annotations

import json
import multiprocessing as mp
import sys
import time

from curate.difficulty.extraction import extract_prediction
from curate.difficulty.grading import GradingPool, _quiet_worker, _worker_verify


def verify_one(item: tuple) -> object:
    return _worker_verify(item, 5)


def main() -> None:
    from pebble import ProcessPool

    golds = [str(json.loads(line)["answer"]) for line in open(sys.argv[1])]
    items = []
    for g in golds:
        for resp in (f"so the answer is $\\boxed{{{g}}}$", f"thus \\boxed{{{g}+1}}", f"The final answer is {g}."):
            pred, how = extract_prediction(resp)
            items.append((g, pred, how))
    with GradingPool(2) as pool:
        pool._ensure()  # workers started outside the timed part, as in a run
        t = time.perf_counter()
        ours = pool._run("verify", items)
        res: dict = {"items": len(items), "pool_per_s": round(len(items) / (time.perf_counter() - t))}
    for chunk in (1, 16):
        with ProcessPool(max_workers=2, initializer=_quiet_worker, context=mp.get_context("spawn")) as pp:
            list(pp.map(verify_one, items[:20], timeout=30).result())  # warm: the workers import math-verify
            t = time.perf_counter()
            theirs = list(pp.map(verify_one, items, chunksize=chunk, timeout=30).result())
            res[f"pebble_chunk{chunk}_per_s"] = round(len(items) / (time.perf_counter() - t))
        res[f"pebble_chunk{chunk}_same_verdicts"] = f"{sum(a == b for a, b in zip(ours, theirs, strict=True))}/{len(items)}"
    print(json.dumps(res))


if __name__ == "__main__":
    main()
