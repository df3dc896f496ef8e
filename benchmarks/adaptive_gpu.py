"""Adaptive estimation held to a k=64 reference on a real engine: the non-inferiority check that
``benchmarks/adaptive.py`` simulates, run on real problems with the estimator's own code path (no store).

Three runs over the same problems:
- R: fixed k=64, seed 1. This is the reference: its observed bucket stands in for the truth.
- F: fixed k=10, seed 0 (Kimi k1.5's recipe).
- A: adaptive (delta 0.4, 4 samples first, then 2 at a time, up to 32), seed 0. On vLLM per-sample seeds depend only
  on the problem and the sample index, so A's first samples are F's: the pair differs only by the stopping rule, and
  both are independent of R (transformers seeds a whole generate call, so there the pair shares the seed, not the
  draws).

Prints, for each run, its samples per problem and seconds; each rule's bucket agreement with R (Wilson 95%); and
the paired difference A - F with its 95% interval (per-problem differences, normal approximation), against the
margin -0.005. About 2,500 problems are needed for that interval to be about +-0.01.

    python benchmarks/adaptive_gpu.py --problems 2500 --json $OUT/adaptive_gpu.json            # one GPU
    python benchmarks/adaptive_gpu.py --problems 24 --k-ref 12 --max-tokens 96 --backend vllm  # CPU smoke run

Problems are a random sample of MATH test, stratified by level (about ``--problems``: each level's share is
rounded), from ``--data`` (default ``$GRADUS_REAL_DATA`` or ``../shared/data``; on a lent GPU machine copy
``math_hendrycks/test/test.jsonl`` into an ignored folder of the checkout and carry it). The backend is vLLM when it imports, else
transformers ``generate`` (``--backend hf``).
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import math
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

MARGIN = -0.005  # the issue's non-inferiority margin on bucket accuracy


def sample_math(data: Path, n: int, seed: int, out: Path) -> Path:
    """``n`` MATH test problems, the same share of each level, as a JSONL file in MATH's own schema."""
    src = data / "math_hendrycks" / "test" / "test.jsonl"
    if not src.exists():
        src = data / "test.jsonl"  # a folder holding the file itself
    rows = [json.loads(line) for line in src.read_text().splitlines()]
    rng = random.Random(seed)
    by_level: dict[str, list] = {}
    for r in rows:
        by_level.setdefault(r["level"], []).append(r)
    picked = []
    for level in sorted(by_level):
        group = by_level[level]
        rng.shuffle(group)
        picked += group[: round(n * len(group) / len(rows))]
    rng.shuffle(picked)
    out.write_text("".join(json.dumps(r) + "\n" for r in picked[:n]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.environ.get("GRADUS_REAL_DATA")
                    or str(Path(__file__).resolve().parent.parent.parent / "shared" / "data"))
    ap.add_argument("--problems", type=int, default=2500)
    ap.add_argument("--model", default=None, help="model folder or hub id (default: the bundled SmolLM2)")
    ap.add_argument("--backend", default="auto", help="vllm | hf | auto (vllm when it imports)")
    ap.add_argument("--template", default="fewshot")
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--k-ref", type=int, default=64)
    ap.add_argument("--delta", type=float, default=0.4)
    ap.add_argument("--batch-prompts", type=int, default=64, help="hf: problems per generate call")
    ap.add_argument("--seed", type=int, default=0, help="which problems are drawn")
    ap.add_argument("--json")
    a = ap.parse_args()

    from curate.clean.filters import FilterConfig
    from curate.core.shards import read_table
    from curate.difficulty.adaptive import BUCKETS, AdaptiveConfig, observed_bucket
    from curate.difficulty.engines import SamplingConfig, make_engine
    from curate.difficulty.estimate import EstimateConfig, estimate, wilson
    from curate.pipeline import filter_stage, ingest

    backend = a.backend
    if backend == "auto":
        try:
            import vllm  # noqa: F401

            backend = "vllm"
        except ImportError:
            backend = "hf"
    tmp = Path(tempfile.mkdtemp(prefix="gradus-adaptive-gpu-"))
    atexit.register(shutil.rmtree, tmp, True)  # scratch: the figures are printed, not kept here
    src = sample_math(Path(a.data), a.problems, a.seed, tmp / "math.jsonl")
    ingest(str(src), tmp / "in")
    filter_stage([tmp / "in"], tmp / "flt", FilterConfig(gold_cache=""))
    base = SamplingConfig(k=a.k, temperature=a.temperature, max_tokens=a.max_tokens, seed=0)
    kwargs = {"batch_prompts": a.batch_prompts} if backend == "hf" else {}
    t0 = time.perf_counter()
    sampler = make_engine(backend, a.model, base, **kwargs)
    fig: dict = {"backend": backend, "model": sampler.model_name, "template": a.template, "temperature": a.temperature,
                 "max_tokens": a.max_tokens, "k": a.k, "k_ref": a.k_ref, "delta": a.delta,
                 "engine_start_s": round(time.perf_counter() - t0, 1)}
    try:
        import torch

        fig["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception:  # noqa: BLE001 - a figure, not a requirement
        fig["device"] = "unknown"
    runs = {"R": (1, a.k_ref, AdaptiveConfig()), "F": (0, a.k, AdaptiveConfig()),
            "A": (0, a.k, AdaptiveConfig(adaptive=True, delta=a.delta))}
    tables = {}
    for name, (seed, k, seq) in runs.items():
        cfg = EstimateConfig(model=a.model, backend=backend, template=a.template, store=None, chunk_rows=256,
                             sampling=dataclasses.replace(base, k=k, seed=seed), sequential=seq)
        sampler.cfg = cfg.sampling  # one engine for the three runs; each run's k and seed
        t0 = time.perf_counter()
        m = estimate([tmp / "flt"], tmp / name, cfg, engine=sampler, progress=False)
        rows = read_table(tmp / name / "kept", columns=["id", "level", "n_correct", "k", "bucket_masses"]).to_pylist()
        tables[name] = {r["id"]: r for r in rows}
        samples = sum(r["k"] for r in rows)
        fig[name] = {"samples_per_problem": round(samples / max(len(rows), 1), 3),
                     "seconds": round(time.perf_counter() - t0, 1), "tokens_per_s": m.stats["this_run"]["tokens_per_s"],
                     "pass_count_histogram": m.stats["pass_count_histogram"] if name != "A" else None}
        print(f"{name}: seed {seed}, {'adaptive' if seq.adaptive else f'k={k}'}: {fig[name]}", flush=True)
    sampler.close()

    ids = sorted(set(tables["R"]) & set(tables["F"]) & set(tables["A"]))
    n = len(ids)
    if not n:
        raise SystemExit("no problem was scored by all three runs")

    def chosen(r: dict) -> str:
        p = r["bucket_masses"]
        return BUCKETS[max(range(len(p)), key=p.__getitem__)]

    ref = {i: observed_bucket(tables["R"][i]["n_correct"], tables["R"][i]["k"]) for i in ids}
    f_ok = [observed_bucket(tables["F"][i]["n_correct"], tables["F"][i]["k"]) == ref[i] for i in ids]
    a_ok = [chosen(tables["A"][i]) == ref[i] for i in ids]
    d = [int(x) - int(y) for x, y in zip(a_ok, f_ok, strict=True)]
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / max(n - 1, 1))
    half = 1.959964 * sd / math.sqrt(n)
    fig.update({
        "problems": n,
        "reference_buckets": {b: sum(v == b for v in ref.values()) for b in BUCKETS},
        "accuracy_fixed_vs_ref": round(sum(f_ok) / n, 4), "ci_fixed": [round(x, 4) for x in wilson(sum(f_ok), n)],
        "accuracy_adaptive_vs_ref": round(sum(a_ok) / n, 4), "ci_adaptive": [round(x, 4) for x in wilson(sum(a_ok), n)],
        "paired_difference": round(mean, 4), "paired_ci": [round(mean - half, 4), round(mean + half, 4)],
        "margin": MARGIN, "non_inferior": mean - half > MARGIN,
        "sample_saving": round(1 - fig["A"]["samples_per_problem"] / a.k, 3),
    })
    print(f"{n} problems; reference buckets (k={a.k_ref}) {fig['reference_buckets']}")
    print(f"bucket agreement with the reference: fixed k={a.k} {fig['accuracy_fixed_vs_ref']} {fig['ci_fixed']}, "
          f"adaptive {fig['accuracy_adaptive_vs_ref']} {fig['ci_adaptive']} at {fig['A']['samples_per_problem']} "
          f"samples per problem ({fig['sample_saving']:.1%} fewer)")
    print(f"paired difference adaptive - fixed: {mean:+.4f}, 95% [{mean - half:+.4f}, {mean + half:+.4f}]; "
          f"non-inferior at margin {MARGIN}: {fig['non_inferior']}")
    if a.json:
        Path(a.json).write_text(json.dumps(fig, indent=2) + "\n")


if __name__ == "__main__":
    main()
