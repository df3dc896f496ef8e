"""The disk dedup's pairs step alone (band jobs, then judge jobs), timed again and again on one work folder.

    python dev/dedup_pairs.py --input INGESTED_DIR --work SCRATCH_DIR [--rounds 3]

The first call builds the per-shard files into ``--work`` (steps 1, 2 and 3 of ``curate.clean.dedup_disk``: at
10M rows without copies about 30 s and 12 GB); later calls on the same folder find them and go straight to the
pairs. Each round runs ``dedup_disk.pairs`` in a fresh pool of worker processes, as the stage does, and prints its
seconds, the CPU seconds and minor page faults of this process and of its workers, and a hash of the pairs
it returns: two checkouts (``cd`` into each and run this file from it) give the same hash or differ in which pairs
they find. The folder is left for the next call; delete it when done.

The stage's own timing (``benchmarks/curation.py``, ``dev/dedup_ab.py``) holds this step with 70 s of others
around it, and this machine's speed drifts by 10-40% from one minute to the next: a change to the band jobs or the
judge shows here first.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())  # the checkout this is run from


def _usage(pool=None) -> tuple[float, int]:
    """CPU seconds and minor page faults so far of this process, or of ``pool``'s worker processes (read from
    ``/proc`` while they live: they are the fork server's children, not this process's)."""
    if pool is None:
        me = resource.getrusage(resource.RUSAGE_SELF)
        return me.ru_utime + me.ru_stime, me.ru_minflt
    cpu, faults, tick = 0.0, 0, os.sysconf("SC_CLK_TCK")
    for pid in list(getattr(pool, "_processes", {}) or {}):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        faults += int(fields[7])
        cpu += (int(fields[11]) + int(fields[12])) / tick
    return cpu, faults


def main() -> None:
    from curate.clean import dedup_disk
    from curate.clean.dedup import DedupConfig
    from curate.core.parallel import worker_pool
    from curate.core.shards import shard_paths, stage_dir

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", type=Path, required=True, help="an ingested stage folder (its kept shards are read)")
    ap.add_argument("--work", type=Path, required=True, help="the per-shard files' folder (built on the first call)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    cfg = DedupConfig()
    shards = shard_paths(stage_dir(args.input))
    size = dedup_disk.pool_size(len(shards), cfg.workers)
    prio = {s: i for i, s in enumerate(cfg.source_priority)}
    t0 = time.perf_counter()
    with worker_pool(size, preload=True) as pool:
        w = dedup_disk.build(shards, args.work, cfg, prio, pool)
    print(f"per-shard files: {time.perf_counter() - t0:.1f} s ({w.n:,} rows, {len(shards)} shards)", flush=True)
    for r in range(args.rounds):
        cpu0, faults0 = _usage()
        t0 = time.perf_counter()
        with worker_pool(size, preload=True) as pool:
            u, v, agree, strict, _, _ = dedup_disk.pairs(w, pool)
            secs = time.perf_counter() - t0
            cpu1, faults1 = (a + b for a, b in zip(_usage(), _usage(pool), strict=True))  # the workers' whole lives
        digest = hashlib.sha256(b"".join(x.tobytes() for x in (u, v, agree, strict))).hexdigest()[:16]
        print(f"round {r + 1}: pairs {secs:.1f} s, {cpu1 - cpu0:.1f} CPU-s, {faults1 - faults0:,} minor faults; "
              f"{len(u):,} pairs, sha256 {digest}", flush=True)
    w.close()


if __name__ == "__main__":
    main()
