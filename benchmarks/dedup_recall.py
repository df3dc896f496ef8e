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
import re
from pathlib import Path

import numpy as np


def true_pairs(shingles: list[np.ndarray], t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair (a < b) of rows whose distinct shingle sets (sorted uint64 arrays) have Jaccard >= t, with it."""
    n = len(shingles)
    sizes = np.array([len(s) for s in shingles], np.int64)
    flat = np.concatenate(shingles) if n else np.zeros(0, np.uint64)
    row = np.repeat(np.arange(n), sizes)
    vocab, dense, freq = np.unique(flat, return_inverse=True, return_counts=True)
    # each row's shingles rarest first; its prefix: the first |x| - ceil(t |x|) + 1
    order = np.lexsort((dense, freq[dense], row))
    pos = np.arange(len(flat)) - np.repeat(np.r_[0, np.cumsum(sizes)[:-1]], sizes)
    prefix = sizes - np.ceil(t * sizes - 1e-9).astype(np.int64) + 1
    keep = pos < prefix[row[order]]
    tok, who = dense[order][keep], row[order][keep]
    o = np.lexsort((who, tok))
    tok, who = tok[o], who[o]
    starts = np.flatnonzero(np.r_[True, tok[1:] != tok[:-1]])
    ends = np.r_[starts[1:], len(tok)]
    cand = []
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        if e - s > 1:
            i, j = np.triu_indices(e - s, 1)
            cand.append(who[s:e][i] * n + who[s:e][j])
    keys = np.unique(np.concatenate(cand)) if cand else np.zeros(0, np.int64)
    a, b = keys // n, keys % n
    ok = (np.minimum(sizes[a], sizes[b]) >= t * np.maximum(sizes[a], sizes[b]))  # sizes alone can rule J >= t out
    a, b = a[ok], b[ok]
    # exact intersections, a chunk of pairs at a time: (pair, shingle) keys that occur twice
    offs = np.r_[0, np.cumsum(sizes)]
    dense_rows = dense  # shingles of row r: dense_rows[offs[r]:offs[r + 1]] (flat is in row order)
    v = np.int64(len(vocab))
    inter = np.zeros(len(a), np.int64)
    for c in range(0, len(a), 20_000):
        ca, cb = a[c : c + 20_000], b[c : c + 20_000]
        parts = []
        for side in (ca, cb):
            ln = sizes[side]
            idx = np.repeat(offs[side], ln) + (np.arange(ln.sum()) - np.repeat(np.r_[0, np.cumsum(ln)[:-1]], ln))
            parts.append(np.repeat(np.arange(len(side), dtype=np.int64), ln) * v + dense_rows[idx])
        k = np.sort(np.concatenate(parts))
        dup = k[1:] == k[:-1]
        inter[c : c + 20_000] = np.bincount((k[1:][dup] // v).astype(np.int64), minlength=len(ca))
    jac = inter / (sizes[a] + sizes[b] - inter)
    good = jac >= t
    return a[good], b[good], jac[good]


def measure(inputs: list[Path], output_dir: Path, t: float = 0.5) -> dict[str, np.ndarray]:
    """Per true pair (different content ids, Jaccard >= ``t``) of dedup's input rows (``inputs``: its input
    folders): ``jac``, ``candidate`` (agrees on an LSH band), ``merged`` (one cluster in dedup's output),
    ``other_numbers``, ``other_drawing``."""
    import pyarrow as pa

    from curate.clean.dedup import DedupConfig, minhash, number_strings
    from curate.clean.text import asy_keys, canonical, ngram_hashes, tokens
    from curate.core.shards import read_table

    cfg = DedupConfig()
    cols = ["id", "origin", "source_id", "problem", "answer"]
    rows = pa.concat_tables([read_table(d / "kept", columns=cols) for d in inputs], promote_options="permissive")
    problems = rows["problem"].combine_chunks()
    canon = canonical(problems)
    toks = tokens(problems, canon)
    h, r = ngram_hashes(problems, cfg.ngram, short_docs=True, toks=toks)
    hr = np.unique(np.stack([r.astype(np.uint64), h]), axis=1)  # distinct shingles per row, sorted
    bounds = np.searchsorted(hr[0], np.arange(len(problems) + 1, dtype=np.uint64))
    shingles = [hr[1][bounds[i] : bounds[i + 1]] for i in range(len(problems))]
    ua, ub, jac = true_pairs(shingles, t)
    ids = np.array(rows["id"].to_pylist(), object)
    other = ids[ua] != ids[ub]  # one content id: exact duplicates
    ua, ub, jac = ua[other], ub[other], jac[other]

    sig = minhash(problems, cfg, toks).reshape(len(problems), cfg.bands, cfg.rows)
    cluster = {}
    for sub in ("kept", "rejected"):
        if (output_dir / sub).is_dir():
            out = read_table(output_dir / sub, columns=["origin", "source_id", "dedup_cluster"])
            cluster.update(zip(zip(out["origin"].to_pylist(), out["source_id"].to_pylist(), strict=True),
                               out["dedup_cluster"].to_pylist(), strict=True))
    keys = list(zip(rows["origin"].to_pylist(), rows["source_id"].to_pylist(), strict=True))
    nums = np.array(number_strings(problems, canon).to_pylist(), object)
    draw = np.array(asy_keys(problems).to_pylist(), object)
    other_numbers = nums[ua] != nums[ub]
    other_drawing = (draw[ua] != draw[ub]) & ~other_numbers
    gold = np.array([re.sub(r"\s+", "", g or "") for g in rows["answer"].to_pylist()], object)
    return {"rows": np.array(len(problems)), "jac": jac,
            "candidate": (sig[ua] == sig[ub]).all(axis=2).any(axis=1),
            "merged": np.array([cluster.get(keys[x]) == cluster.get(keys[y])
                                for x, y in zip(ua.tolist(), ub.tolist(), strict=True)], bool),
            "other_numbers": other_numbers, "other_drawing": other_drawing,
            "other_gold": (gold[ua] != gold[ub]) & ~other_numbers & ~other_drawing}


def main() -> None:
    from curate.clean.dedup import DedupConfig

    ap = argparse.ArgumentParser()
    ap.add_argument("input", type=Path, help="dedup's input folder (a stage output: its kept rows)")
    ap.add_argument("output", type=Path, help="dedup's output folder")
    ap.add_argument("--more-input", type=Path, nargs="*", default=[], help="dedup's other input folders, if any")
    ap.add_argument("--min-jaccard", type=float, default=0.5)
    a = ap.parse_args()
    cfg = DedupConfig()
    got = measure([a.input, *a.more_input], a.output, a.min_jaccard)
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
