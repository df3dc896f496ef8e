"""Recall of near duplicates on real rows: every pair whose shingle sets overlap at Jaccard >= 0.5, found
exhaustively, against the pairs dedup's MinHash LSH makes candidates and the pairs the stage merges.

    python benchmarks/dedup_recall.py runs/real/3_decontam runs/real/4_dedup [--min-jaccard 0.5]

- Ground truth: the exact Jaccard similarity of two rows' sets of distinct token 3-gram shingles (the shingles
  dedup hashes: the same tokens, the same n, a short row's one shingle of all its tokens). Every pair at
  J >= ``--min-jaccard`` is found by prefix filtering: with each row's shingles ordered rarest first, two sets at
  J >= t share one of their first |x| - ceil(t |x|) + 1 shingles, so only pairs that do are measured. Pairs of
  one content id are exact duplicates (dedup's first step) and are left out.
- For each Jaccard bin: the pairs; the share that agree on at least one LSH band of their signatures (the
  candidates 24 bands x 4 rows make), next to the S-curve's 1 - (1 - J^4)^24; and the share the stage put in one
  cluster. A pair kept apart is counted by its first reason: other numbers in the statements ("gcd of 76 and 36"
  and "gcd of 76 and 8"), other drawings, or other gold strings (the same words asking another question: "the
  maximum value of y" and "the minimum value of y"; dedup compares golds with math-verify, so "073" and "73" are
  one gold there but two strings here).

The first folder is dedup's input (its ``kept`` rows), the second dedup's output; rows are matched by (origin,
source id).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from curate.clean.checks import near_pair_recall


def main() -> None:
    from curate.clean.dedup import DedupConfig

    ap = argparse.ArgumentParser()
    ap.add_argument("input", type=Path, help="dedup's input folder (a stage output: its kept rows)")
    ap.add_argument("output", type=Path, help="dedup's output folder")
    ap.add_argument("--more-input", type=Path, nargs="*", default=[], help="dedup's other input folders, if any")
    ap.add_argument("--min-jaccard", type=float, default=0.5)
    a = ap.parse_args()
    cfg = DedupConfig()
    got = near_pair_recall([a.input, *a.more_input], a.output, a.min_jaccard)
    jac, candidate, merged = got["jac"], got["candidate"], got["merged"]
    other_numbers, other_drawing, other_gold = got["other_numbers"], got["other_drawing"], got["other_gold"]
    edges = [x for x in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0) if x >= a.min_jaccard] + [1.0 + 1e-9]
    print(f"{int(got['rows'])} rows; {len(jac)} pairs of different content ids at Jaccard >= {a.min_jaccard} "
          f"(exhaustive, prefix filtering)\n")
    print("| Jaccard | pairs | LSH candidates | S-curve | merged | apart: other numbers | apart: other drawing | "
          "apart: other gold | apart: other |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        m = (jac >= lo) & (jac < hi)
        k = int(m.sum())
        if not k:
            continue
        curve = float(np.mean(1 - (1 - jac[m] ** cfg.rows) ** cfg.bands))
        apart = m & ~merged
        rest = apart & ~other_numbers & ~other_drawing & ~other_gold
        label = f"[{lo:.1f}, {min(hi, 1.0):.1f}{']' if hi > 1 else ')'}"
        print(f"| {label} | {k} | {candidate[m].mean():.1%} | {curve:.1%} | {merged[m].mean():.1%} | "
              f"{int((apart & other_numbers).sum())} | {int((apart & other_drawing).sum())} | "
              f"{int((apart & other_gold).sum())} | {int(rest.sum())} |")
    m = jac >= 0.8
    same = m & ~other_numbers & ~other_drawing & ~other_gold
    print(f"\nat J >= 0.8: {int(m.sum())} pairs, LSH candidates {candidate[m].mean():.2%}, merged {merged[m].mean():.1%}; "
          f"of the {int(same.sum())} with the same numbers, drawing and gold string: merged {merged[same].mean():.1%}")


if __name__ == "__main__":
    main()
