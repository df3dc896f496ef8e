"""Deduplication: exact (same normalized text) and near (MinHash LSH on word n-grams), one kept per cluster.

Two passes over the shards. Pass 1 reads only ``id``, ``source``, ``answer`` and ``problem`` batch by
batch and keeps, per row, a few integers and a MinHash signature (``num_perm`` uint32); memory grows
with rows (about 400 bytes a row at the defaults), never with text. Candidate pairs come from exact
``id`` matches and from LSH band collisions; a near pair is confirmed only when the signatures agree on
at least ``threshold`` of their hashes (estimated Jaccard) and, by default, both the sequence of numbers
in the statements and the gold answers match: in math, two statements one number apart are different
problems ("gcd of 76 and 36" vs "gcd of 76 and 8" share most shingles and even the answer 4).
Clusters are connected components; the representative is the row of the best-ranked source
(``source_priority``), then the earliest row. Pass 2 streams the rows again and writes them out.

MinHash here is vectorized with numpy over a whole batch of shingles (universal hashing
``(a*x + b) >> 32`` with odd 64-bit ``a``), the scheme datasketch and datatrove implement per document.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.clean.text import ngram_hashes


@dataclass(frozen=True)
class DedupConfig:
    near: bool = True  # near-duplicate detection on top of exact
    ngram: int = 3  # word shingle size: short problems need short shingles
    bands: int = 16  # LSH bands x rows = num_perm; 16x6 puts the S-curve midpoint near Jaccard 0.63
    rows: int = 6
    threshold: float = 0.8  # estimated Jaccard needed to confirm a near pair
    require_same_answer: bool = True  # a near pair with different gold answers is not a duplicate
    require_same_numbers: bool = True  # nor one whose statements hold different numbers
    seed: int = 42  # MinHash permutation seed
    # Preferred sources first (competition originals over re-collections); unlisted ones rank after, in order seen.
    source_priority: tuple[str, ...] = ("aime", "aime_csv", "math500", "math", "omni_math", "deepscaler", "numina_1.5",
                                        "numina_cot", "deepmath", "orz")

    def __post_init__(self) -> None:
        if self.ngram < 1 or self.bands < 1 or self.rows < 1:
            raise ValueError("ngram, bands and rows must be >= 1")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows


def _perm_params(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 2**63 - 1, size=num_perm, dtype=np.int64).astype(np.uint64) | np.uint64(1)
    b = rng.integers(0, 2**63 - 1, size=num_perm, dtype=np.int64).astype(np.uint64)
    return a, b


def minhash(col: pa.Array | pa.ChunkedArray, cfg: DedupConfig) -> np.ndarray:
    """(rows, num_perm) uint32 MinHash signatures; a row without words gets all 0xFFFFFFFF."""
    n = len(col)
    hashes, row = ngram_hashes(col, cfg.ngram, short_docs=True)
    sig = np.full((n, cfg.num_perm), np.iinfo(np.uint32).max, dtype=np.uint32)
    if len(hashes) == 0:
        return sig
    a, b = _perm_params(cfg.num_perm, cfg.seed)
    starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
    rows_with = row[starts]
    step = max(1, (1 << 22) // max(len(hashes), 1))  # bound the (perms x shingles) block to ~32 MB
    with np.errstate(over="ignore"):
        for p0 in range(0, cfg.num_perm, step):
            blk = (a[p0 : p0 + step, None] * hashes[None, :] + b[p0 : p0 + step, None]) >> np.uint64(32)
            sig[rows_with, p0 : p0 + step] = np.minimum.reduceat(blk, starts, axis=1).T.astype(np.uint32)
    return sig


def _components(n: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Connected-component label (the smallest member index) of each of n nodes given edges u-v."""
    labels = np.arange(n, dtype=np.int64)
    if len(u) == 0:
        return labels
    while True:
        m = np.minimum(labels[u], labels[v])
        new = labels.copy()
        np.minimum.at(new, u, m)
        np.minimum.at(new, v, m)
        new = new[new]  # pointer jumping
        if np.array_equal(new, labels):
            return labels
        labels = new


def _first_of_groups(keys: np.ndarray) -> np.ndarray:
    """For each position, the first position holding the same key."""
    _, first_idx, inv = np.unique(keys, return_index=True, return_inverse=True)
    return first_idx[inv]


def plan(
    ids: np.ndarray,
    ranks: np.ndarray,
    answers: np.ndarray,
    numbers: np.ndarray,
    sigs: np.ndarray | None,
    cfg: DedupConfig,
):
    """Decide every row: returns (rep index per row, kind per row: 0 kept, 1 exact dup, 2 near dup).

    ``ids``: uint64 exact-content hashes; ``ranks``: source priority (lower is better); ``answers``:
    uint64 hashes of the normalized gold answer; ``numbers``: uint64 hashes of the statement's number
    sequence (``number_keys``); ``sigs``: (n, num_perm) signatures or None.
    """
    n = len(ids)
    idx = np.arange(n)
    first = _first_of_groups(ids)
    us, vs = [idx[first != idx]], [first[first != idx]]
    if sigs is not None and n:
        for band in range(cfg.bands):
            chunk = np.ascontiguousarray(sigs[:, band * cfg.rows : (band + 1) * cfg.rows])
            keys = chunk.view(np.dtype((np.void, chunk.dtype.itemsize * cfg.rows))).ravel()
            f = _first_of_groups(keys)
            cand = np.flatnonzero((f != idx) & (ids != ids[f]))
            if len(cand) == 0:
                continue
            agree = (sigs[cand] == sigs[f[cand]]).mean(axis=1)
            ok = agree >= cfg.threshold
            if cfg.require_same_answer:
                ok &= answers[cand] == answers[f[cand]]
            if cfg.require_same_numbers:
                ok &= numbers[cand] == numbers[f[cand]]
            us.append(cand[ok])
            vs.append(f[cand[ok]])
    comp = _components(n, np.concatenate(us), np.concatenate(vs))
    order = np.lexsort((idx, ranks, comp))
    comp_sorted = comp[order]
    is_first = np.r_[True, comp_sorted[1:] != comp_sorted[:-1]]
    rep_of_comp = np.empty(n, dtype=np.int64)
    rep_of_comp[comp_sorted[is_first]] = order[is_first]
    rep = rep_of_comp[comp]
    kind = np.where(rep == idx, 0, np.where(ids == ids[rep], 1, 2)).astype(np.int8)
    return rep, kind


def hash_strings(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """uint64 hash of each string (nulls hash alike), via pandas' vectorized SipHash."""
    import pandas as pd

    vals = pc.fill_null(col, "\x00null").to_numpy(zero_copy_only=False)
    return pd.util.hash_array(vals.astype(object), categorize=True)


def number_keys(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """uint64 hash of the sequence of numbers in each statement ("gcd of 76 and 36" -> "76 36")."""
    digits = pc.utf8_trim_whitespace(pc.replace_substring_regex(pc.fill_null(col, ""), r"[^0-9]+", " "))
    return hash_strings(digits)
