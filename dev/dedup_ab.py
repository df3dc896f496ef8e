"""Interleaved A/B of the dedup stage (or decontam, the filter): two checkouts of gradus, the same ingested input,
runs alternating.

    python dev/dedup_ab.py --base /path/to/old/checkout --new . --input INGESTED_DIR [--rounds 4]
        [--stage dedup|decontam|filter|filter_no_gate]

This machine's speed drifts by 10-40% from one minute to the next, so two versions are compared run for run, in
turn (base, new, then new, base, ...: the second run of a pair can be the faster one), each run a fresh process
that imports gradus from its checkout (a ``git worktree`` of the older commit). Prints each run's seconds and
stage timings, the medians and their ratio, the same for the CPU seconds of all the run's processes (steadier than
the wall clock here), and whether both wrote the same kept and rejected shards (sha256 of every shard).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

RUN = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from curate.pipeline import decontam_stage, dedup_stage, filter_stage
src, out, stage = [Path(sys.argv[2])], Path(sys.argv[3]), sys.argv[4]
t0 = time.perf_counter()
if stage == "dedup":
    m = dedup_stage(src, out, force=True)
elif stage == "decontam":  # the benchmark's three sets (``benchmarks/curation.py``)
    from curate.clean.decontam import DecontamConfig
    m = decontam_stage(src, out, DecontamConfig(benchmarks=("aime24", "math500", "amc23")), force=True)
else:  # filter (the gold gate, no verdict cache: a first run) or filter_no_gate
    from curate.clean.filters import FilterConfig
    m = filter_stage(src, out, FilterConfig(gold_gate=stage == "filter", gold_cache=""), force=True)
secs = time.perf_counter() - t0
import resource
from multiprocessing import forkserver
forkserver._forkserver._stop()  # dedup's workers are the fork server's children: reaped with it, counted below
cpu = sum(getattr(resource.getrusage(w), k) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
          for k in ("ru_utime", "ru_stime"))
print(json.dumps({"seconds": secs, "cpu": cpu, "timings": m.stats["timings"],
                  "shards": [s["sha256"] for s in m.kept_shards + m.rejected_shards]}))
"""


def run(root: Path, src: Path, out: Path, stage: str = "dedup") -> dict:
    r = subprocess.run([sys.executable, "-c", RUN, str(root), str(src), str(out), stage], capture_output=True,
                       text=True, cwd=root)
    if r.returncode != 0:
        raise RuntimeError(f"{stage} under {root} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True, help="the older checkout (its repository root)")
    ap.add_argument("--new", type=Path, required=True, help="the newer checkout")
    ap.add_argument("--input", type=Path, required=True, help="an ingested stage output (or shard folder)")
    ap.add_argument("--rounds", type=int, default=4, help="even: each side runs first as often")
    ap.add_argument("--stage", default="dedup", choices=("dedup", "decontam", "filter", "filter_no_gate"))
    a = ap.parse_args()
    secs: dict[str, list[float]] = {"base": [], "new": []}
    cpu: dict[str, list[float]] = {"base": [], "new": []}
    shards: dict[str, set] = {"base": set(), "new": set()}
    with tempfile.TemporaryDirectory(prefix="gradus-ab-") as tmp:
        for i in range(a.rounds):
            # the order turns every round (base, new, new, base, ...): a run right after another of the same input
            # can be faster (page cache, CPU frequency), and a fixed order would credit that to one side
            pair = (("base", a.base), ("new", a.new))
            for name, root in pair if i % 2 == 0 else pair[::-1]:
                r = run(root.resolve(), a.input.resolve(), Path(tmp) / name, a.stage)
                secs[name].append(r["seconds"])
                cpu[name].append(r["cpu"])
                shards[name].add(tuple(r["shards"]))
                print(f"{name} {r['seconds']:.2f} s, {r['cpu']:.1f} CPU-s {r['timings']}", flush=True)
    b, n = median(secs["base"]), median(secs["new"])
    print(f"base {', '.join(f'{x:.2f}' for x in secs['base'])} (median {b:.2f})  "
          f"new {', '.join(f'{x:.2f}' for x in secs['new'])} (median {n:.2f})  {b / n:.2f}x")
    cb, cn = median(cpu["base"]), median(cpu["new"])
    print(f"CPU seconds (every process of the run): base median {cb:.1f}, new median {cn:.1f}  {cb / cn:.2f}x")
    same = len(shards["base"] | shards["new"]) == 1
    print("the same shards" if same else "THE SHARDS DIFFER")


if __name__ == "__main__":
    main()
