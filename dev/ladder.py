"""Calibration of the bundled sample's difficulty ladder against a model (default: the bundled SmolLM2-135M).

Generates ``--per-level`` distinct problems of each rung of ``synthetic:mix=ladder``, scores them through the
library (ingest, then ``estimate`` with the chosen template, k samples each) and prints the mean pass rate of
every rung and of every problem kind, with Spearman's rho between pass rate and level. The rungs are meant to
run from "solved most of the time" (level 1) to "almost never" (level 5) for the demo's model and template.

    python dev/ladder.py --per-level 8 --k 10 --template fewshot
    python dev/ladder.py --template chat          # the same problems under the boxed instruction
"""

from __future__ import annotations

import argparse
import atexit
import json
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-level", type=int, default=8)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--template", default="fewshot")
    ap.add_argument("--backend", default="vllm")
    ap.add_argument("--model", default=None)
    ap.add_argument("--seed", type=int, default=0, help="generator seed")
    a = ap.parse_args()

    from curate.difficulty.engines import SamplingConfig
    from curate.difficulty.estimate import EstimateConfig, estimate
    from curate.pipeline import ingest
    from curate.sources.synthetic import generate
    from data_cards.card import spearman

    picked, seen, per = [], set(), defaultdict(int)
    for r in generate(50 * a.per_level, a.seed, mix="ladder"):
        if r["problem"] not in seen and per[r["level"]] < a.per_level:
            seen.add(r["problem"])
            per[r["level"]] += 1
            picked.append(r)
    tmp = Path(tempfile.mkdtemp(prefix="gradus-ladder-"))
    atexit.register(shutil.rmtree, tmp, True)  # scratch: the figures are printed, not kept here
    src = tmp / "ladder.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in picked))
    ingest(str(src), tmp / "in", adapter="generic")
    cfg = EstimateConfig(model=a.model, backend=a.backend, template=a.template, store=None, chunk_rows=16,
                         sampling=SamplingConfig(k=a.k, temperature=a.temperature, max_tokens=a.max_tokens, seed=0))
    m = estimate([tmp / "in"], tmp / "est", cfg)
    from curate.core.shards import read_table

    rows = read_table(tmp / "est" / "kept", columns=["level", "problem", "pass_rate"]).to_pylist()
    kind = {r["problem"]: r["question_type"] for r in picked}  # the generator's kind of each problem
    by_level: dict[str, list[float]] = defaultdict(list)
    by_kind: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        by_level[r["level"]].append(r["pass_rate"])
        by_kind[(r["level"], kind[r["problem"]])].append(r["pass_rate"])
    print(f"{m.stats['model']}, template {a.template}, k={a.k}, T={a.temperature}, {len(rows)} problems "
          f"({m.stats['this_run']['tokens_per_s']} tokens/s)")
    print("level  problems  mean pass rate  pass rates")
    for lv in sorted(by_level):
        v = by_level[lv]
        print(f"{lv:>5}  {len(v):>8}  {sum(v) / len(v):>14.2f}  {[round(x, 1) for x in v]}")
    print("by kind: " + ", ".join(f"{lv}/{kind} {sum(v) / len(v):.2f} (n={len(v)})" for (lv, kind), v in sorted(by_kind.items())))
    rho = spearman([r["pass_rate"] for r in rows], [float(r["level"]) for r in rows])
    print(f"Spearman rho(pass rate, level) = {rho:.3f}" if rho is not None else "rho: undefined")


if __name__ == "__main__":
    main()
