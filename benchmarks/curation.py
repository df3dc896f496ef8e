"""Curation throughput and memory: each stage's rows/s next to a bare pyarrow read+write of the same rows.

    python benchmarks/curation.py                 # real files (../shared/data) + 1M synthetic rows
    python benchmarks/curation.py --rows 200000   # a smaller synthetic input
    python benchmarks/curation.py --real-only
    python benchmarks/curation.py --rows 10000000 --synthetic-only --stages filter_no_gate,decontam,dedup
    python benchmarks/curation.py --rows 1000000 --synthetic-only --distinct --stages dedup   # no exact copies
    python benchmarks/curation.py --rows 1000000 --synthetic-only --repeat 3   # medians of three, in turn

For every stage the floor is measured in the same run: read the stage's input shards with pyarrow and
write the same rows, same schema, zstd, to a new file (no Python per row). "x floor" is the stage's
wall time divided by that floor's (with ``--repeat N``, the median of N stage runs over the median of N floors,
measured in turn). The target for every stage, the gold gate included, is <= 3x, and <= 5x for dedup on rows
without exact copies; the gate's own rows/s and the share of golds sent to math-verify are printed beside the
filter. Each stage runs in its own process so "peak MB" (max RSS) is that stage's own peak; "worker MB" is the
largest of its worker processes (dedup's disk engine computes signatures in one process per core).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

REAL = Path(os.environ.get("GRADUS_REAL_DATA", ROOT.parent / "shared" / "data"))
REAL_FILES = [
    "math_hendrycks/test/test.jsonl",
    "deepscaler/train/math.json",
    "orz/orz_math_72k_collection_extended.prefix.json",
    "omni_math_rule/omni_math_rule.jsonl",
    "deepmath_roll/math_deepmath_deal.jsonl",
]


def run_one(stage: str, src: str, out: str) -> dict:
    """Run one stage in this process (called in a child process) and report time and peak RSS."""
    from curate.clean.decontam import DecontamConfig
    from curate.clean.filters import FilterConfig
    from curate.pipeline import decontam_stage, dedup_stage, filter_stage, ingest

    # the gold gate's verdict cache: empty for "filter" (a first run), filled by an untimed run for "filter_warm"
    verdicts = tempfile.mkdtemp(prefix="gradus-verdicts-")
    if stage == "filter_warm":
        filter_stage([Path(src)], Path(out), FilterConfig(gold_cache=verdicts), force=True)
    t0 = time.perf_counter()
    if stage == "ingest":
        m = ingest(src, Path(out), force=True)
    elif stage in ("filter", "filter_no_gate", "filter_warm"):
        m = filter_stage([Path(src)], Path(out), FilterConfig(gold_gate=stage != "filter_no_gate", gold_cache=verdicts),
                         force=True)
    elif stage == "decontam":
        bench = tuple(b for b in ("aime24", "math500", "amc23") if (REAL / "math500").exists())
        m = decontam_stage([Path(src)], Path(out), DecontamConfig(benchmarks=bench or ("demo=" + str(
            ROOT / "curate/data/demo_benchmark.jsonl"),)), force=True)
    elif stage.startswith("dedup"):
        from curate.clean.dedup import DedupConfig

        m = dedup_stage([Path(src)], Path(out), DedupConfig(engine="memory" if stage == "dedup_memory" else "disk"),
                        force=True)
    else:
        raise ValueError(stage)
    secs = time.perf_counter() - t0
    import multiprocessing

    deadline = time.time() + 30
    while multiprocessing.active_children() and time.time() < deadline:  # a stage's workers wind down after it: their
        time.sleep(0.05)  # peak memory counts once they are reaped
    # dedup's workers are the fork server's children (``worker_pool(..., preload=MODULE)``): the server reaps them, and
    # their peak counts here once the server itself is stopped and reaped (``_stop``: 3.11's multiprocessing, private)
    from multiprocessing import forkserver

    time.sleep(0.2)
    forkserver._forkserver._stop()
    shutil.rmtree(verdicts, ignore_errors=True)
    gate = m.stats.get("gold_gate")
    if gate:
        gate = {k: gate.get(k, 0) for k in ("fast_path", "known", "worker_parsed")}
        gate["seconds"] = m.stats.get("timings", {}).get("gold_gate", 0.0)
    return {"seconds": secs, "rows_in": m.rows_in, "timings": m.stats.get("timings", {}), "gate": gate,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}


def floor(src_dir: Path, work: Path) -> dict:
    """Bare pyarrow: stream-read the shards and write the same rows (zstd, same schema)."""
    import pyarrow.parquet as pq

    from curate.core.shards import shard_paths

    t0 = time.perf_counter()
    out = work / "floor.parquet"
    writer = None
    rows = 0
    for p in shard_paths(src_dir):
        f = pq.ParquetFile(p)
        for rb in f.iter_batches(batch_size=16384):
            if writer is None:
                writer = pq.ParquetWriter(out, rb.schema, compression="zstd")
            writer.write_batch(rb, row_group_size=10_000)
            rows += rb.num_rows
    if writer:
        writer.close()
    secs = time.perf_counter() - t0
    out.unlink(missing_ok=True)
    return {"seconds": secs, "rows": rows}


def child(stage: str, src: str, out: str) -> dict:
    r = subprocess.run([sys.executable, __file__, "--one", stage, src, out], capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"{stage} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


STAGES = ("ingest", "filter_no_gate", "filter", "filter_warm", "decontam", "dedup_memory", "dedup")


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def timed_pairs(stage: str, src: Path, out: Path, work: Path, repeat: int) -> tuple[dict, float, list[float]]:
    """The stage and its floor, ``repeat`` times in turn (floor, stage, floor, stage, ...): the last run's report
    with the median of the stage's seconds, the median floor, and each pair's ratio. This machine's speed drifts
    by 10-40% between minutes; a pair measured back to back, and the median of several, drift less."""
    secs, floors, peaks, workers = [], [], [], []
    r: dict = {}
    for _ in range(repeat):
        floors.append(floor(src / "kept", work)["seconds"])
        r = child(stage, str(src), str(out))
        secs.append(r["seconds"])
        peaks.append(r["peak_mb"])
        workers.append(r["worker_mb"])
    r = {**r, "seconds": _median(secs), "peak_mb": max(peaks), "worker_mb": max(workers)}
    return r, _median(floors), [round(x / f, 2) for x, f in zip(secs, floors, strict=True)]


def bench_chain(label: str, source: str, work: Path, stages: tuple[str, ...] = STAGES, repeat: int = 1) -> list[dict]:
    rows = []
    ing = work / "ingest"
    runs = [child("ingest", source, str(ing)) for _ in range(repeat)]
    r = {**runs[-1], "seconds": _median([x["seconds"] for x in runs]), "peak_mb": max(x["peak_mb"] for x in runs),
         "worker_mb": max(x["worker_mb"] for x in runs)}
    rows.append({"input": label, "stage": "ingest", **r, "floor_s": None, "ratios": [x["seconds"] for x in runs]})
    gate = "filter" in stages
    flt = work / ("filter" if gate else "filter_ng")
    before_dedup = work / "decontam" if "decontam" in stages else flt if {"filter", "filter_no_gate"} & set(stages) else ing
    chain = [  # (stage, input folder, output folder): each reads what the stages run before it wrote
        ("filter_no_gate", ing, work / "filter_ng"),
        ("filter", ing, work / "filter"),
        ("filter_warm", ing, work / "filter_warm"),
        ("decontam", flt, work / "decontam"),
        ("dedup_memory", before_dedup, work / "dedup_memory"),
        ("dedup", before_dedup, work / "dedup"),
    ]
    for stage, src, out in chain:
        if stage not in stages and not (stage == "filter_no_gate" and not gate and "decontam" in stages):
            continue
        r, fl_s, ratios = timed_pairs(stage, src, out, work, repeat)
        rows.append({"input": label, "stage": stage, **r, "floor_s": fl_s, "ratios": ratios})
        gate_note = ""
        if r.get("gate"):
            g = r["gate"]
            distinct = g["fast_path"] + g["known"] + g["worker_parsed"]
            gate_note = (f"; gold gate {r['rows_in'] / max(g['seconds'], 1e-9):,.0f} rows/s over {g['seconds']:.2f}s, "
                         f"{distinct:,} distinct golds: {g['fast_path']:,} fast path, {g['known']:,} known from an "
                         f"earlier run, {g['worker_parsed']:,} parsed by math-verify "
                         f"({g['worker_parsed'] / max(distinct, 1):.1%})")
        print(f"{label} {stage}: {r['seconds']:.1f}s (floor {fl_s:.2f}s), peak {r['peak_mb']:.0f} MB, "
              f"workers {r['worker_mb']:.0f} MB{gate_note}" + (f"; x floor of each pair {ratios}" if repeat > 1 else ""),
              flush=True)
    # ingest's floor: read+write of what it produced (the record rows), the cheapest possible re-encode
    floors = [floor(ing / "kept", work)["seconds"] for _ in range(repeat)]
    rows[0]["floor_s"] = _median(floors)
    rows[0]["ratios"] = [round(x / f, 2) for x, f in zip(rows[0]["ratios"], floors, strict=True)]
    if repeat > 1:
        print(f"{label} ingest: {rows[0]['seconds']:.1f}s (floor {rows[0]['floor_s']:.2f}s); x floor of each run "
              f"{rows[0]['ratios']}", flush=True)
    return rows


CHUNK = 1_000_000


def _tag(i: int) -> str:
    """A word of letters only, one per number: a distinct text without another number in it."""
    out = ""
    while True:
        out = chr(97 + i % 26) + out
        i //= 26
        if not i:
            return out


def make_chunk(args: tuple[int, int, str, bool]) -> None:
    """``n`` rows of the synthetic generator with ``seed``, as one Parquet file; with ``distinct``, each statement
    ends in a word of its own, so no two rows are exact copies (near duplicates stay near)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from curate.sources.synthetic import generate

    n, seed, path, distinct = args
    cols: dict[str, list] = {k: [] for k in ("id", "problem", "answer", "subject", "level", "difficulty", "question_type")}
    writer = None
    for i, row in enumerate(generate(n, seed=seed), 1):
        if distinct:
            row["problem"] += f" (Set {_tag(seed * 10_000_000 + i)}.)"
        for k in cols:
            cols[k].append(row[k])
        if i % 200_000 == 0 or i == n:
            t = pa.table(cols)
            writer = writer or pq.ParquetWriter(path, t.schema, compression="zstd")
            writer.write_table(t)
            cols = {k: [] for k in cols}
    if writer:
        writer.close()


def make_synthetic(n: int, path: Path, distinct: bool = False) -> None:
    """n rows of the synthetic generator, as one Parquet source file: a million rows per seed (7, 8, ...; the first
    million are the same at every size), generated in one process per core."""
    from concurrent.futures import ProcessPoolExecutor

    import pyarrow.parquet as pq

    jobs = [(min(CHUNK, n - s), 7 + k, str(path) + f".{k}", distinct) for k, s in enumerate(range(0, n, CHUNK))]
    with ProcessPoolExecutor(min(len(jobs), len(os.sched_getaffinity(0)))) as ex:
        list(ex.map(make_chunk, jobs))
    writer = None
    for _, _, part, _ in jobs:
        f = pq.ParquetFile(part)
        for i in range(f.num_row_groups):
            t = f.read_row_group(i)
            writer = writer or pq.ParquetWriter(path, t.schema, compression="zstd")
            writer.write_table(t)
        Path(part).unlink()
    if writer:
        writer.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--real-only", action="store_true")
    ap.add_argument("--synthetic-only", action="store_true")
    ap.add_argument("--distinct", action="store_true", help="no two synthetic rows exact copies (a word of its own each)")
    ap.add_argument("--stages", default=",".join(STAGES), help="stages to time after ingest (comma-separated)")
    ap.add_argument("--repeat", type=int, default=1, help="each stage and its floor this many times in turn: medians")
    ap.add_argument("--one", nargs=3, metavar=("STAGE", "SRC", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(run_one(*a.one)))
        return
    stages = tuple(x for x in a.stages.split(",") if x)
    results = []
    work_root = Path(tempfile.mkdtemp(prefix="gradus-bench-"))
    try:
        if REAL.is_dir() and not a.synthetic_only:
            for rel in REAL_FILES:
                w = work_root / rel.replace("/", "_")
                results += bench_chain(rel.split("/")[0], str(REAL / rel), w, stages, a.repeat)
        if not a.real_only:
            src = work_root / "synthetic.parquet"
            t0 = time.perf_counter()
            make_synthetic(a.rows, src, a.distinct)
            print(f"generated {a.rows} synthetic rows in {time.perf_counter() - t0:.1f}s", flush=True)
            label = f"synthetic {a.rows // 1000}k" + (" distinct" if a.distinct else "")
            results += bench_chain(label, str(src), work_root / "syn", stages, a.repeat)
    finally:
        shutil.rmtree(work_root, ignore_errors=True)
    print("\n| input | stage | rows in | seconds | rows/s | floor rows/s | x floor | peak MB | worker MB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        fl = r["floor_s"] or float("nan")
        print(f"| {r['input']} | {r['stage']} | {r['rows_in']} | {r['seconds']:.2f} | {r['rows_in'] / r['seconds']:,.0f} | "
              f"{r['rows_in'] / fl:,.0f} | {r['seconds'] / fl:.1f} | {r['peak_mb']:.0f} | "
              f"{r['worker_mb']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
