"""Step 4, the LSH buckets: per band and key range, each entry whose band key an earlier entry holds is paired with the
first row of its key (a hash table per bucket in the compiled loop, a sort of the keys without it); a band's pairs
go to its file (``pairs_NNN.bin``), one band per worker process."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from curate.clean.dedup import DedupConfig
from curate.clean.dedup_disk.files import concat_rows, write
from curate.clean.dedup_disk.folder import Work
from curate.clean.dedup_disk.signatures import BAND_COLUMNS, SATURATED
from curate.clean.kernels import compiled as kernel_of
from curate.clean.kernels import pair_scratch
from curate.core.shards import atomic_path

PAIR_RANGES = 256  # row ranges of a band's pair file: a judge job takes some consecutive ones of every band


def _high_bit_order(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Along the last axis, an order of ``words`` (uint64) by their high bits, position within equal high bits, and
    those high bits in that order. The low bits give way to the position, so one plain sort of integers does it
    (no stable argsort)."""
    n = words.shape[-1]
    bits = np.uint64(max(n.bit_length(), 1))
    low = (np.uint64(1) << bits) - np.uint64(1)
    comp = (words & ~low) | np.arange(n, dtype=np.uint64)
    comp.sort(axis=-1)
    return (comp & low).astype(np.int64), comp >> bits


def _by_key(seg) -> np.ndarray:
    """Where in ``seg`` (band entries as columns, ``hi`` and ``lo`` read: the shards' runs, in shard order, so
    row order within a key) the entries are whose key another entry shares, grouped by key (the groups in no set
    order), a key's entries in row order.

    One plain sort of integers finds the candidates: a word of each entry's key (the first word, ``mix``ed, xor a
    multiple of the second) with its low bits given to its position. Among the entries whose high bits another entry
    shares, a run of equal high bits that holds more than one key (two keys may share high bits and differ below)
    is sorted on the whole key and position."""
    n = len(seg["hi"])
    if n == 0:
        return np.zeros(0, np.int64)
    with np.errstate(over="ignore"):  # both words: near duplicates often share a band's first word, not its second
        word = seg["hi"] ^ (seg["lo"] * np.uint64(0x9E3779B97F4A7C15))
    order, top = _high_bit_order(word)
    eq = top[1:] == top[:-1]
    near = np.zeros(n, bool)
    near[1:] |= eq
    near[:-1] |= eq
    cand, top = order[near], top[near]  # by high bits, then position
    if len(cand) == 0:
        return cand
    hi, lo = seg["hi"][cand], seg["lo"][cand]
    new = np.r_[True, top[1:] != top[:-1]]
    run = np.cumsum(new) - 1
    first = np.flatnonzero(new)[run]
    odd = (hi != hi[first]) | (lo != lo[first])
    if odd.any():  # runs of one high part and more than one key: those entries sorted by key within their run
        at = np.flatnonzero(np.isin(run, run[odd]))
        o = at[np.lexsort((cand[at], lo[at], hi[at], run[at]))]
        cand[at], hi[at], lo[at] = cand[o], hi[o], lo[o]
    same = (hi[1:] == hi[:-1]) & (lo[1:] == lo[:-1])
    keep = np.zeros(len(cand), bool)
    keep[1:] |= same
    keep[:-1] |= same
    return cand[keep]


def _key_pairs(seg: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The ``rn`` words of each entry of ``seg`` (band entries as columns, the shards' runs in shard order) whose key
    an earlier entry holds, and of the first entry of its key: ``kernels.pair_loop``, or ``_by_key`` and ``_groups``
    where it is not compiled (the same pairs, in another order)."""
    kernel = kernel_of("pair_loop")
    n = len(seg["hi"])
    if kernel is None:
        at = _by_key(seg)
        later, first = _groups([seg["hi"][at], seg["lo"][at]])
        return seg["rn"][at[later]], seg["rn"][at[first]]
    global _SCRATCH
    if len(_SCRATCH[0]) < n:  # held from band to band in a worker: new pages cost more than the loop
        _SCRATCH = pair_scratch(max(n, 2 * len(_SCRATCH[0])))
    later, first = _SCRATCH[0], _SCRATCH[1]
    # at most 256 buckets: the counting sort's copies go to as many places at once (more thrash the TLB)
    m = kernel(seg["hi"], seg["lo"], min(8, max(1, n.bit_length() - 10)), *_SCRATCH)
    return seg["rn"][later[:m]], seg["rn"][first[:m]]


_SCRATCH = pair_scratch(0)  # ``_key_pairs``' scratch, kept in the process


def _groups(sorted_keys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """For rows sorted by keys (then row): which are not the first of their key, and the position of that first."""
    n = len(sorted_keys[0])
    new = np.zeros(n, bool)
    if n:
        new[0] = True
        for k in sorted_keys:
            new[1:] |= k[1:] != k[:-1]
    start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    later = np.flatnonzero(~new)
    return later, start[later]


def band_pairs(w: Work, band: int) -> tuple[np.ndarray, np.ndarray]:
    """The band's collisions, each row with the first row of its key, that may be near pairs: with
    ``require_same_numbers``, those whose numbers may be the same or not as many (one may hold the other's), as
    far as ``_num_word`` tells. A group of ``exact_groups`` takes part by its first row only: the band files
    hold no row it stands for."""
    us, vs = [], []
    cuts = w.cuts("bands", band)
    low = np.uint64(0xFFFFFFFF)
    for p in range(w.parts):
        seg = dict(zip(BAND_COLUMNS, w.slices("bands", band, p, np.dtype("<u8"), cuts, len(BAND_COLUMNS)),
                       strict=True))
        ra, rb = _key_pairs(seg)
        if w.cfg.require_same_numbers:
            na, nb = ra & low, rb & low
            ca, cb = na & np.uint64(0xFF), nb & np.uint64(0xFF)
            keep = (na == nb) | (ca != cb) | (ca == SATURATED)
            ra, rb = ra[keep], rb[keep]
        us.append(ra >> np.uint64(32))
        vs.append(rb >> np.uint64(32))
    u, v = concat_rows(us), concat_rows(vs)
    o = np.argsort(u, kind="stable")  # row order (a row is the later row of at most one pair a band)
    return u[o].astype(np.int32), v[o].astype(np.int32)  # rows < 2^31: half the bytes to send and to hold


def pair_path(folder: Path, band: int) -> Path:
    return folder / f"pairs_{band:03d}.bin"


def range_starts(n: int) -> np.ndarray:
    """The first row of each of ``PAIR_RANGES`` ranges of ``n`` rows, and ``n``."""
    return (np.arange(PAIR_RANGES + 1, dtype=np.int64) * n) // PAIR_RANGES


def band_job(args: tuple[str, DedupConfig, list[int], list[int], int, int]) -> np.ndarray:
    """``buckets.band_pairs`` of one band, in a worker process, written to the band's pair file (``u`` then ``v``, int32,
    in row order); returns where each of ``PAIR_RANGES`` ranges of rows starts in it (and its end)."""
    from curate.core.parallel import trim_memory

    folder, cfg, rows, entries, parts, band = args
    w = Work(Path(folder), cfg, rows)
    w.entries, w.parts = entries, parts
    u, v = band_pairs(w, band)
    with atomic_path(pair_path(w.folder, band), sync=False) as tmp, open(tmp, "wb") as f:
        write(f, u)
        write(f, v)
    cuts = np.searchsorted(u, range_starts(w.n)).astype(np.int64)
    trim_memory()  # a band's key ranges in, its pairs out: what is left of it goes back
    return cuts
