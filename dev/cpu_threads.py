"""vLLM-CPU with one torch thread (what vLLM does when OMP_NUM_THREADS is unset) against the usable cores (what
gradus sets when the user has not): the same problems, seeds and engine settings, in two fresh processes.

    python dev/cpu_threads.py --problems 24 --k 10 --max-tokens 96
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one(a) -> None:
    """Child: sample the problems once and print tokens/s as JSON."""
    from curate.difficulty import templates
    from curate.difficulty.engines import SamplingConfig, VLLMEngine
    from curate.difficulty.models import resolve_model
    from curate.sources.synthetic import generate

    path, name = resolve_model(None)
    s = VLLMEngine(path, SamplingConfig(k=a.k, temperature=0.7, max_tokens=a.max_tokens, seed=0), model_name=name)
    rows = list(generate(a.problems, seed=7, mix="ladder"))
    reqs = [s.prepare(f"p{i}", templates.render("chat", r["problem"], s.tokenizer), False) for i, r in enumerate(rows)]
    t0 = time.perf_counter()
    tokens = sum(c.n_tokens for _, comps in s.stream(reqs) for c in comps)
    dt = time.perf_counter() - t0
    import torch

    print(json.dumps({"tokens": tokens, "seconds": round(dt, 2), "tokens_per_s": round(tokens / dt, 1),
                      "torch_threads": torch.get_num_threads(), "cpu_threads": s.info().get("cpu_threads")}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=24)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--child", action="store_true")
    a = ap.parse_args()
    if a.child:
        one(a)
        return
    args = [sys.executable, __file__, "--child", "--problems", str(a.problems), "--k", str(a.k), "--max-tokens",
            str(a.max_tokens)]
    res = {}
    for label, omp in (("one thread (OMP_NUM_THREADS=1, vLLM's default)", "1"), ("usable cores (gradus's default)", None)):
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        if omp:
            env["OMP_NUM_THREADS"] = omp
        out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
        res[label] = json.loads(out.strip().splitlines()[-1])
        print(f"{label}: {res[label]}")
    a1, a2 = (v["tokens_per_s"] for v in res.values())
    print(f"speed-up: {a2 / a1:.2f}x (same tokens: {len({v['tokens'] for v in res.values()}) == 1})")


if __name__ == "__main__":
    main()
