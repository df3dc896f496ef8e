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
import os
from pathlib import Path

from curate.clean.checks import rewrites_caught

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--misses", action="store_true")
    args = ap.parse_args()
    data = Path(os.environ.get("GRADUS_REAL_DATA", ROOT.parent / "shared" / "data"))
    for name, (caught, n) in rewrites_caught(data / "math500" / "test.jsonl", args.misses).items():
        print(f"{name:<12} caught {caught}/{n}")


if __name__ == "__main__":
    main()
