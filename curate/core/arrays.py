"""Set operations on integer arrays by sorting.

NumPy 2.3's ``np.unique`` (and so ``union1d``) hashes integer input before sorting its result: on millions of
64-bit values that is 30-50x slower than one sort (3.8 s against 0.07 s for 5M values, measured here). Dedup's
pair keys and row numbers run to millions, so its hot paths use these instead.
"""

from __future__ import annotations

import numpy as np


def unique(x: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``x`` (``np.unique(x)``)."""
    s = np.sort(np.asarray(x).ravel())
    if len(s) == 0:
        return s
    keep = np.empty(len(s), bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def union(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The sorted distinct values of both (``np.union1d``)."""
    return unique(np.concatenate([np.asarray(a).ravel(), np.asarray(b).ravel()]))


def in_sorted(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    """For each value of ``x``, whether sorted ``s`` holds it (``np.isin(x, s)``). ``x`` is sorted first, so the
    search walks ``s`` in order."""
    x = np.asarray(x)
    out = np.zeros(len(x), bool)
    if len(x) == 0 or len(s) == 0:
        return out
    order = np.argsort(x)
    xs = x[order]
    pos = np.searchsorted(s, xs)
    np.minimum(pos, len(s) - 1, out=pos)
    out[order] = s[pos] == xs
    return out
