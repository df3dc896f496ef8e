"""Decontamination against formatting-only and lightly reworded copies of MATH-500.

Each rewrite is applied to every MATH-500 problem it changes; the rewritten set is then decontaminated
against MATH-500 itself, and a copy that is not flagged is a miss. A rewrite that changes nothing about the
problem must never get through.

    python benchmarks/decontam_rewrites.py          # caught / rewritten per rewrite
    python benchmarks/decontam_rewrites.py --misses # and the problems missed

Rewrites: ``\\frac{1}{2}`` -> ``\\frac12`` (single-character arguments), ``$...$`` -> ``\\(...\\)``, the first
instruction verb reworded (Find -> Determine, Compute -> Calculate, What is -> Find, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_VERBS = [("What is", "Find"), ("Find", "Determine"), ("Compute", "Calculate"), ("Evaluate", "Compute"),
          ("Calculate", "Compute"), ("Determine", "Find"), ("Simplify", "Compute")]


def frac_short(p: str) -> str:
    return re.sub(r"\\([dt]?frac)\{(\w)\}\{(\w)\}", r"\\\1\2\3", p)


def paren_math(p: str) -> str:
    return re.sub(r"(?<![\\$])\$([^$]+)\$(?!\$)", lambda m: "\\(" + m.group(1) + "\\)", p)


def first_verb(p: str) -> str:
    hits = [(m.start(), a, b) for a, b in _VERBS for m in [re.search(rf"\b{a}\b", p)] if m]
    if not hits:
        return p
    pos, a, b = min(hits)
    return p[:pos] + b + p[pos + len(a):]


REWRITES = {"frac_short": frac_short, "paren_math": paren_math, "first_verb": first_verb}


def run(math500: Path, misses: bool = False) -> dict[str, tuple[int, int]]:
    import pyarrow as pa

    from curate.clean.decontam import BenchmarkIndex, DecontamConfig
    from curate.clean.text import repair_escapes

    problems = [json.loads(line)["problem"] for line in math500.read_text().splitlines() if line.strip()]
    cfg = DecontamConfig(benchmarks=(f"math500={math500}",))
    index = BenchmarkIndex.build(cfg.benchmarks, cfg.ngram)
    out = {}
    for name, fn in REWRITES.items():
        changed = [q for q in (fn(p) for p in problems) if q not in problems]
        col, _ = repair_escapes(pa.array(changed, pa.string()))  # as ingest reads a row
        _, _, kind = index.match(col, cfg)
        out[name] = (sum(k is not None for k in kind), len(changed))
        if misses:
            for q, k in zip(changed, kind, strict=True):
                if k is None:
                    print(f"[{name}] missed: {q[:200]!r}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--misses", action="store_true")
    args = ap.parse_args()
    data = Path(os.environ.get("GRADUS_REAL_DATA", ROOT.parent / "shared" / "data"))
    for name, (caught, n) in run(data / "math500" / "test.jsonl", args.misses).items():
        print(f"{name:<12} caught {caught}/{n}")


if __name__ == "__main__":
    main()
