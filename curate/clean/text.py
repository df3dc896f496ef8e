"""Text normalization and hashing, vectorized over arrow arrays.

Two normal forms:
- ``exact_key``: for ids and exact dedup. NFKC, lowercase, math delimiters and LaTeX spacing/sizing
  macros removed, ``\\dfrac``/``\\tfrac`` folded to ``\\frac``, all whitespace removed. Digits are kept:
  "2+3" and "2+4" are different problems.
- ``tokens``: for n-gram shingles (near dup, decontamination), of the ``canonical`` form: typesetting
  removed, command names (``\\sin``, ``\\div``) and operator and bracket tokens kept, since in math they
  are the problem (``\\cos 45^\\circ`` is not ``\\sin 45^\\circ``; datatrove and Open-R1 keep them too).

Token n-grams are hashed without a Python loop per row: each distinct token of a batch gets a stable
64-bit hash (blake2b), and n-grams are combined with a polynomial over uint64 (wrapping arithmetic),
so the same text gives the same hashes in every run and on every machine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.clean.kernels import byte_view
from curate.clean.kernels import compiled as kernel_of

# LaTeX spacing/sizing commands that change the look, not the problem.
# Applied after lowercasing. \\left\b keeps \\leftarrow intact.
_LATEX_NOISE = (
    r"\\(?:displaystyle|textstyle|left|right|bigl|bigr|big|mathrm|text|textbf|mbox|quad|qquad)\b"
    r"|\\[,;:! ]|\$|~"
)
_DFRAC = r"\\[dt]frac"
_RE2_SPACE = ("\t", "\n", "\f", "\r", " ")  # RE2's \s (not \v, not Unicode spaces): what exact_key drops
_NON_WORD = r"[^\p{L}\p{N}]+"
_NGRAM_BASE = np.uint64(1099511628211)  # FNV-1a 64-bit prime, used as the polynomial base


def exact_key(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Exact-dedup normal form of a string column (nulls stay null)."""
    s = pc.utf8_normalize(col, "NFKC")
    s = pc.utf8_lower(s)
    s = pc.replace_substring_regex(s, _DFRAC, r"\\frac")
    # every noise pattern begins with a backslash, "$" or "~": without the others, only each "$" goes
    s = s.combine_chunks() if isinstance(s, pa.ChunkedArray) else s
    s = apply_on(s, pc.fill_null(pc.match_substring_regex(s, r"[\\~]"), False).to_numpy(zero_copy_only=False),
                  lambda x: pc.replace_substring_regex(x, _LATEX_NOISE, ""), lambda x: pc.replace_substring(x, "$", ""))
    for c in _RE2_SPACE:  # what RE2's \s is; removing one never joins two of another
        s = pc.replace_substring(s, c, "")
    return s


def content_ids(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Stable 16-hex-char id of each string's exact key (sha1; nulls hash as empty), hashed once per distinct key."""
    enc = pc.dictionary_encode(pc.fill_null(exact_key(col), ""))
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    ids = pa.array([content_id(k) for k in enc.dictionary.to_pylist()], pa.string())
    return ids.take(enc.indices)


def content_id(key: str) -> str:
    """The content id of one ``exact_key``."""
    return hashlib.sha1(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


# Typesetting that changes the look, not the problem: environments, spacing, sizing, fonts, delimiters.
# (\\left\b keeps \\leftarrow; \\mathbb{R} keeps its R.) Applied after lowercasing.
_TYPESETTING = (
    r"\\(?:begin|end)\{[^}]*\}|\\(?:hspace|vspace)\*?\{[^}]*\}"
    r"|\\(?:displaystyle|textstyle|scriptstyle|left|right|bigl|bigr|biggl|biggr|bigg|big|middle|mathrm|mathbf|mathit"
    r"|mathsf|mathbb|mathcal|mathscr|boldsymbol|bm|bf|it|rm|text|textbf|textit|textrm|texttt|emph|mbox|hbox|operatorname"
    r"|quad|qquad|limits|nolimits|noindent|newline|medskip|smallskip|bigskip|hfill|cr|label|tag|nonumber|phantom)\b"
    r"|\\[,;:! ]|\\\\|\\[()\[\]]|\$|~|&"
)
# One spelling for commands and characters that say the same thing (after lowercasing; \\b keeps \\left, \\neg).
_SYNONYMS = [
    (r"\\(?:ldots|cdots|dotsc|dotsb|dots)\b|\.\.\.|…", r" \\dots "),
    (r"\\(?:leq|leqslant|le)\b|≤", r" \\le "),
    (r"\\(?:geq|geqslant|ge)\b|≥", r" \\ge "),
    (r"\\(?:neq|ne)\b|≠", r" \\ne "),
    (r"\\times\b|×", r" \\times "),
    (r"\\div\b|÷", r" \\div "),
    (r"\\cdot\b|·|⋅", r" \\cdot "),
    (r"−|–", "-"),
    (r"([0-9])\.([0-9])", r"\1 point \2"),  # 3.14 is not 314
]
# Not the statement: drawing code (one copy of an AIME problem carries the AoPS diagram's [asy] source, another
# does not) and a trailing wiki credit ("~MRENTHUSIASM", "~ pi_is_3.14").
_NOT_STATEMENT = r"(?s)\[asy\].*?\[/asy\]|\s~\s?[a-z][\w.]*(?:\s*,\s*[a-z][\w.]*)*\s*$"
# What a row must hold for any of ``_rare_rewrites`` to change it (drawing code, wiki credit, fraction, binomial, root,
# degree, synonym): a row that holds none of these goes through none of them unchanged, so they are skipped for it.
_RARE = (r"\[asy\]|~|frac|binom|\\sqrt|\\circ|°|dots|\.\.\.|…|\\le|≤|\\ge|≥|\\ne|≠|\\times|×|\\div|÷|\\cdot|·|⋅|−|–"
         r"|[0-9]\.[0-9]")
# Question words dropped from the word-sequence key: rewording "Compute" as "Find" or "What is" does not
# make another problem.
_ASK_WORDS = frozenset("find compute calculate evaluate determine simplify what whats is are the value of work out "
                       "give obtain get express".split())
ASK_ARRAY = pa.array(sorted(_ASK_WORDS))


def canonical(col: pa.Array | pa.ChunkedArray, compiled: bool = False) -> pa.Array:
    """One normal form for shingles and benchmark matching, applied the same way to both sides.

    NFKC, lowercase, drawing code (``[asy]...[/asy]``) and trailing wiki credits dropped; ``\\dfrac``/``\\tfrac``
    folded to ``\\frac`` and the brace-less shorthands spelled out (``\\frac12`` -> ``\\frac{1}{2}``, ``\\sqrt2`` ->
    ``\\sqrt{2}``); degrees (``^\\circ``, ``^{\\circ}``, U+00B0 -> `` deg ``), dots, inequality signs, times,
    division and minus signs each written one way (``_SYNONYMS``); then typesetting removed: math delimiters
    (``$``, ``\\(``, ``\\[``), spacing, sizing and font commands, environments; last, thousands separators folded
    (``1{,}000`` is ``1000``). Command names that carry meaning (``\\sin``, ``\\cos``, ``\\frac``, ``\\div``,
    ``\\le``) stay.

    ``compiled``: which rows each rare rewrite may change read in one compiled pass over the bytes
    (``kernels.rare_loop``, where there is one: dedup's workers), instead of a regex match per rewrite over every
    row that holds any of them (the same text: each rewrite still runs on every row it could change).
    """
    # NFKC leaves ASCII as it is, and lowercasing it is ASCII's own
    s = _by_ascii(pc.fill_null(col, ""), pc.ascii_lower, lambda x: pc.utf8_lower(pc.utf8_normalize(x, "NFKC")))
    s = s.combine_chunks() if isinstance(s, pa.ChunkedArray) else s
    kernel = kernel_of("rare_loop") if compiled and len(s) and pa.types.is_string(s.type) else None
    if kernel is None:
        s = _where(s, _RARE, _rare_rewrites)
    else:
        bits = _rare_bits(s, kernel)
        s = apply_on(s, bits != 0, lambda x: _rare_rewrites(x, bits[bits != 0]))
    # every pattern of the typesetting begins with a backslash, "$", "~" or "&": without the others, only each "$" goes
    s = apply_on(s, pc.match_substring_regex(s, r"[\\~&]").to_numpy(zero_copy_only=False),
                  lambda x: pc.replace_substring_regex(x, _TYPESETTING, " "), lambda x: pc.replace_substring(x, "$", " "))
    return _where(s, r"[0-9](?:\{,\}|,)[0-9]", _thousands)


def _rare_rewrites(s: pa.Array | pa.ChunkedArray, bits: np.ndarray | None = None) -> pa.Array | pa.ChunkedArray:
    """The rewrites of ``canonical`` before the typesetting is removed, in order (see ``_RARE``), each on the rows its
    pattern matches only (matching costs a fraction of replacing, and a row it does not match it leaves as is).
    ``bits``: each row's ``kernels.rare_loop`` bits; a rewrite then matches its pattern on the rows of its bit only."""
    for j, (pattern, repl) in enumerate(_RARE_REWRITES):
        def rewrite(x, p=pattern, r=repl):
            return _where(x, p, lambda y: pc.replace_substring_regex(y, p, r))
        s = rewrite(s) if bits is None else apply_on(s, (bits & (1 << j)) != 0, rewrite)
    return s


def _rare_bits(s: pa.Array, kernel: Callable) -> np.ndarray:
    """``kernels.rare_loop``'s bits of each row of ``s`` (a string array without nulls' text: ``fill_null``'s)."""
    _, off_buf, data_buf = s.buffers()
    n = len(s)
    offs = np.frombuffer(off_buf, np.int32, n + 1, s.offset * 4).astype(np.int64)
    bits = np.zeros(n, np.uint32)
    kernel(byte_view(data_buf), offs, bits)
    return bits


_RARE_REWRITES = [
    (_NOT_STATEMENT, " "),
    (r"\\[dt]frac", r"\\frac"),
    (r"\\[dt]binom", r"\\binom"),
    (r"\\frac\s*([0-9a-z])\s*([0-9a-z])", r"\\frac{\1}{\2}"),
    (r"\\frac\s*([0-9a-z])\s*\{", r"\\frac{\1}{"),
    (r"\\frac\s*(\{[^{}]*\})\s*([0-9a-z])", r"\\frac\1{\2}"),
    (r"\\sqrt\s*([0-9a-z])", r"\\sqrt{\1}"),
    (r"\^\s*\{?\s*\\circ\s*\}?|°", " deg "),
    *_SYNONYMS,
]


def _thousands(s: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    for _ in range(2):  # 1,000 and 1{,}000 are 1000; twice for 12,345,678
        s = pc.replace_substring_regex(s, r"([0-9])(?:\{,\}|,)([0-9]{3})\b", r"\1\2")
    return s


def _where(s: pa.Array | pa.ChunkedArray, need: str, rewrite: Callable) -> pa.Array:
    """``rewrite(s)`` computed only for the rows that match ``need``, a pattern every row the rewrite would change
    must match; the other rows are returned as they are. Each regex pass costs about as much per row whether it
    matches or not, and most rows need none of the rare rewrites."""
    s = s.combine_chunks() if isinstance(s, pa.ChunkedArray) else s
    return apply_on(s, pc.match_substring_regex(s, need).to_numpy(zero_copy_only=False), rewrite)


def apply_on(s: pa.Array, mask: np.ndarray, fn: Callable, other: Callable | None = None) -> pa.Array:
    """``fn`` on the rows of ``s`` that ``mask`` marks and ``other`` on the rest (None: the rest as they are), each
    row back in its place."""
    at = np.flatnonzero(mask)
    if len(at) == len(s):
        return fn(s)
    if len(at) == 0:
        return s if other is None else other(s)
    if other is None:  # each row's index into (s, fn of the marked rows)
        rest_part, index = s, np.arange(len(s), dtype=np.int64)
    else:  # each row's index into (other of the rest, fn of the marked rows)
        rest = np.flatnonzero(~mask)
        rest_part, index = other(s.take(pa.array(rest))), np.empty(len(s), np.int64)
        index[rest] = np.arange(len(rest))
    index[at] = len(rest_part) + np.arange(len(at))
    return pa.concat_arrays([rest_part, fn(s.take(pa.array(at)))]).take(pa.array(index))


def tokens(col: pa.Array | pa.ChunkedArray, canon: pa.Array | None = None, compiled: bool = False) -> pa.ListArray:
    """Tokens per row (list<string>) of the ``canonical`` text (``canon``: that text, when the caller has it).

    Words, numbers, command names (``\\sin`` -> ``sin``) and one token per operator, bracket or prime
    (``+ - * / = < > ^ ! | ( ) [ ] '``): ``88\\div(4\\div2)`` and ``88\\div4\\div2`` differ, and so do
    ``\\tan 180^\\circ`` and ``\\sin 180^\\circ``. Letters and digits are split apart (``a^2b`` and ``a^2 b`` both give
    ``a ^ 2 b``); every other run of characters (braces, punctuation) is a separator. A row without a token is null.

    ASCII rows (most math text: LaTeX) are cut in numpy from the bytes (``_ascii_tokens``); the others by the regex
    passes of ``_regex_tokens``, which give the same tokens on ASCII text (a test holds them equal on real files).
    ``compiled``: the ASCII rows cut by the compiled loop where there is one (``kernels.token_loop``, in dedup's
    worker processes; the same tokens).
    """
    s = canonical(col) if canon is None else canon
    s = s.combine_chunks() if isinstance(s, pa.ChunkedArray) else s
    if not pa.types.is_string(s.type):  # large_string: the regex passes, which keep its type
        return _regex_tokens(s)
    # canonical text is lowercase; a row with a capital (a caller's own text) takes the regex passes, which do not
    # split "2A" as they split "2a"
    fast = pc.and_(pc.string_is_ascii(s), pc.invert(pc.match_substring_regex(s, "[A-Z]")))
    fast = pc.fill_null(fast, True).to_numpy(zero_copy_only=False)
    cut = (lambda x: _ascii_tokens(x, compiled=True)) if compiled else _ascii_tokens
    if fast.all():
        return cut(s)
    return apply_on(s, fast, cut, _regex_tokens)


def _regex_tokens(s: pa.Array) -> pa.ListArray:
    """``tokens`` of canonical text by regex passes (any text)."""
    s = _where(s, r"\\[a-z]", lambda x: pc.replace_substring_regex(x, r"\\([a-z]+)", r" \1 "))
    s = pc.replace_substring_regex(s, r"([+\-*/=<>^!|()\[\]'])", r" \1 ")
    s = _where(s, r"[0-9][a-z]|[a-z][0-9]", _split_letters_digits)
    s = pc.utf8_trim_whitespace(_by_ascii(s, lambda x: pc.replace_substring_regex(x, _NON_TOKEN_ASCII, " "),
                                          lambda x: pc.replace_substring_regex(x, _NON_TOKEN, " ")))
    s = pc.if_else(pc.equal(s, ""), pa.scalar(None, pa.string()), s)  # "" would split into [""]
    out = pc.utf8_split_whitespace(s)
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


# Byte classes of lowercase ASCII text: 0 separates, 1 letter, 2 digit, 3 an operator (a token of its own)
_BYTE_CLASS = np.zeros(256, np.int8)
_BYTE_CLASS[np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", np.uint8)] = 1
_BYTE_CLASS[np.frombuffer(b"0123456789", np.uint8)] = 2
_BYTE_CLASS[np.frombuffer(b"+-*/=<>^!|()[]'", np.uint8)] = 3


def _ascii_tokens(s: pa.Array, compiled: bool = False) -> pa.ListArray:
    """``tokens`` of lowercase ASCII text, from its bytes: a token is a run of letters, a run of digits or one
    operator. A backslash separates like any other byte, which is what dropping the backslash of a command name
    (``\\sin`` -> `` sin ``) does in the regex passes. ``compiled``: by ``kernels.token_loop`` where there is one."""
    n = len(s)
    kernel = kernel_of("token_loop") if compiled and n else None
    if kernel is not None:
        return _compiled_tokens(s, kernel)
    _, off_buf, data_buf = s.buffers()
    offs = np.frombuffer(off_buf, np.int32, n + 1, s.offset * 4).astype(np.int64) if n else np.zeros(1, np.int64)
    base = int(offs[0])
    offs = offs - base
    size = int(offs[-1])
    data = np.frombuffer(data_buf, np.uint8, size, base) if size else np.zeros(0, np.uint8)
    if s.null_count:  # a null row's bytes (normally none) are not text
        lens = np.diff(offs)
        nulls = pc.is_null(s).to_numpy(zero_copy_only=False)
        keep = ~np.repeat(nulls, lens)
    else:
        keep = None
    cls = _BYTE_CLASS[data]
    if keep is not None:
        cls = np.where(keep, cls, 0).astype(np.int8)
    # a row's first byte has no byte before it, and its last no byte after: a separator stands there
    prev = np.empty_like(cls)
    nxt = np.empty_like(cls)
    if size:
        prev[0], prev[1:] = 0, cls[:-1]
        nxt[-1], nxt[:-1] = 0, cls[1:]
        row_first = offs[:-1][np.diff(offs) > 0]
        prev[row_first] = 0
        nxt[row_first[1:] - 1] = 0
    tok = cls > 0
    op = cls == 3
    first = np.flatnonzero(tok & (op | (prev != cls)))
    last = np.flatnonzero(tok & (op | (nxt != cls)))
    lengths = last - first + 1
    values = pa.StringArray.from_buffers(
        len(first), pa.py_buffer(np.r_[0, np.cumsum(lengths)].astype(np.int32)), pa.py_buffer(data[tok].tobytes()))
    per_row = np.bincount(np.searchsorted(offs, first, "right") - 1, minlength=n)[:n] if len(first) else np.zeros(n, np.int64)
    list_offsets = pa.array(np.r_[0, np.cumsum(per_row)].astype(np.int32))
    return pa.ListArray.from_arrays(list_offsets, values, mask=pa.array(per_row == 0))


def _compiled_tokens(s: pa.Array, kernel: Callable) -> pa.ListArray:
    """``_ascii_tokens`` by the compiled loop: counted in one pass over the bytes, written in a second."""
    n = len(s)
    _, off_buf, data_buf = s.buffers()
    offs = np.frombuffer(off_buf, np.int32, n + 1, s.offset * 4).astype(np.int64)
    data = byte_view(data_buf)
    skip = pc.is_null(s).to_numpy(zero_copy_only=False) if s.null_count else np.zeros(n, np.bool_)
    count, size = kernel(data, offs, skip, _NO_OUT, np.zeros(1, np.int32), np.zeros(1, np.int64))
    out, starts, per_row = np.empty(size, np.uint8), np.empty(count + 1, np.int32), np.empty(n, np.int64)
    kernel(data, offs, skip, out if size else np.zeros(1, np.uint8), starts, per_row)
    values = pa.StringArray.from_buffers(count, pa.py_buffer(starts), pa.py_buffer(out))
    list_offsets = pa.array(np.r_[0, np.cumsum(per_row)].astype(np.int32))
    return pa.ListArray.from_arrays(list_offsets, values, mask=pa.array(per_row == 0))


_NO_OUT = np.zeros(0, np.uint8)  # ``token_loop``: count only


_NON_TOKEN = r"[^\p{L}\p{N}+\-*/=<>^!|()\[\]']+"  # what separates tokens
_NON_TOKEN_ASCII = r"[^a-zA-Z0-9+\-*/=<>^!|()\[\]']+"  # the same on ASCII text, without Unicode classes


def _by_ascii(s: pa.Array | pa.ChunkedArray, ascii_fn: Callable, other_fn: Callable) -> pa.Array:
    """``ascii_fn`` on the rows that are ASCII (most math text: LaTeX) and ``other_fn`` on the others, in place.
    RE2 runs a pattern with Unicode classes (``\\p{L}``) about 1.6x slower than its ASCII equivalent."""
    s = s.combine_chunks() if isinstance(s, pa.ChunkedArray) else s
    return apply_on(s, pc.fill_null(pc.string_is_ascii(s), True).to_numpy(zero_copy_only=False), ascii_fn, other_fn)


def _split_letters_digits(s: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    s = pc.replace_substring_regex(s, r"([0-9])([a-z])", r"\1 \2")
    return pc.replace_substring_regex(s, r"([a-z])([0-9])", r"\1 \2")


def sequence_keys(col: pa.Array | pa.ChunkedArray, toks: pa.ListArray | None = None) -> list[str]:
    """The word-sequence key of each row: its tokens (``toks``, when the caller has them) without question
    words, joined by spaces.

    Equal keys mean the same statement up to formatting and the wording of the ask, which protects short
    items that have too few words for an n-gram rule.
    """
    return sequence_array(col, toks).to_pylist()


def sequence_array(col: pa.Array | pa.ChunkedArray, toks: pa.ListArray | None = None) -> pa.Array:
    """``sequence_keys`` as an arrow string array."""
    toks = tokens(col) if toks is None else toks
    flat = toks.flatten()
    keep = pc.invert(pc.is_in(flat, value_set=ASK_ARRAY))
    counts = pc.list_value_length(toks).fill_null(0).to_numpy(zero_copy_only=False)
    starts = np.r_[0, np.cumsum(counts)]
    kept_before = np.r_[0, np.cumsum(keep.to_numpy(zero_copy_only=False).astype(np.int64))]
    offsets = pa.array(kept_before[starts].astype(np.int32))
    return pc.binary_join(pa.ListArray.from_arrays(offsets, flat.filter(keep)), " ")


def asy_keys(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The drawing code of each statement (its ``[asy]`` blocks, lowercased, whitespace and math delimiters
    removed), "" when it has none: two
    MATH problems can share every word and differ only in the figure's numbers."""
    col = pc.fill_null(col, "")
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col

    def code(x: pa.Array) -> pa.Array:  # run on the rows that hold a drawing only
        x = pc.replace_substring_regex(x, r"(?s)^.*?\[asy\]|\[/asy\].*?\[asy\]|\[/asy\].*$", "")
        return pc.replace_substring_regex(pc.utf8_lower(x), r"\s+|\$|\\[()\[\]]", "")  # labels' $..$ or \(..\)

    has = pc.match_substring(col, "[asy]").to_numpy(zero_copy_only=False)
    return apply_on(col, has, code, lambda x: pc.utf8_slice_codeunits(x, 0, 0))


def word_hashes(flat: pa.Array, compiled: bool = False) -> np.ndarray:
    """uint64 hash of each word (its 8-byte blake2b digest, little-endian), hashing each distinct word once: one
    ``hashlib`` object per word, or with ``compiled``, where numba is installed, one compiled loop
    (``kernels.blake2b_8``; the same values). Only dedup's signature workers ask for the loop: they load numba
    while the main process finds the exact groups, and its import (0.6 s, about 110 MB) costs a cheap stage such
    as decontamination more than it saves."""
    if len(flat) == 0:
        return np.zeros(0, dtype=np.uint64)
    enc = pc.dictionary_encode(flat)
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    vocab = enc.dictionary
    kernel = kernel_of("blake2b_8") if compiled and pa.types.is_string(vocab.type) else None
    if kernel is not None:  # the words' UTF-8 bytes straight from the arrow buffers
        _, off_buf, data_buf = vocab.buffers()
        offs = np.frombuffer(off_buf, np.int32, len(vocab) + 1, vocab.offset * 4).astype(np.int64)
        data = byte_view(data_buf)
        table = np.empty(len(vocab), np.uint64)
        kernel(data, offs, table)
    else:
        table = np.fromiter(
            (int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little") for w in vocab.to_pylist()),
            dtype=np.uint64,
            count=len(vocab),
        )
    return table[enc.indices.to_numpy(zero_copy_only=False)]


def ngram_hashes(col: pa.Array | pa.ChunkedArray, n: int, short_docs: bool = True,
                 toks: pa.ListArray | None = None, compiled: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every word n-gram of every row.

    Returns ``(hashes, row)`` as two aligned 1-D arrays: ``hashes[j]`` (uint64) belongs to row ``row[j]``.
    A row with fewer than ``n`` words yields one hash of all its words when ``short_docs`` is true
    (so short problems still get a shingle for near-dup), and nothing otherwise. ``toks``: the rows' ``tokens``,
    when the caller has them. ``compiled``: the words' hashes in the compiled loop where there is one
    (``word_hashes``).
    """
    toks = tokens(col) if toks is None else toks
    offsets = toks.offsets.to_numpy()
    offsets = offsets - offsets[0]
    flat = toks.flatten()
    wh = word_hashes(flat, compiled)
    lengths = np.diff(offsets)
    nrows = len(lengths)
    total = len(wh)
    # polynomial hash of the window starting at each flat position (wrapping uint64 arithmetic)
    with np.errstate(over="ignore"):
        acc = np.zeros(total, dtype=np.uint64)
        for j in range(n):
            shifted = np.zeros(total, dtype=np.uint64)
            if j < total:
                shifted[: total - j] = wh[j:]
            acc = acc * _NGRAM_BASE + shifted
    row_of_pos = np.repeat(np.arange(nrows, dtype=np.int64), lengths)
    pos_in_row = np.arange(total, dtype=np.int64) - np.repeat(offsets[:-1].astype(np.int64), lengths)
    valid = pos_in_row + n <= lengths[row_of_pos]
    hashes, rows = acc[valid], row_of_pos[valid]
    if short_docs:
        short = np.nonzero((lengths > 0) & (lengths < n))[0]
        if len(short):
            sh = np.zeros(len(short), dtype=np.uint64)
            with np.errstate(over="ignore"):
                for k in range(int(lengths[short].max())):
                    has = lengths[short] > k
                    vals = np.where(has, wh[np.minimum(offsets[short] + k, max(total - 1, 0))], 0).astype(np.uint64)
                    sh = np.where(has, sh * _NGRAM_BASE + vals, sh)
            hashes = np.concatenate([hashes, sh])
            rows = np.concatenate([rows, short])
            order = np.argsort(rows, kind="stable")
            hashes, rows = hashes[order], rows[order]
    return hashes, rows


# JSON escapes that swallowed a LaTeX command's backslash: "\frac" written unescaped in JSON is a form
# feed followed by "rac" (seen in Omni-MATH rule data). Each control character is put back to
# "\" + its escape letter, but only where a LaTeX command name follows.
_ESCAPE_DAMAGE = [
    ("\x0c", "f", r"\x0c(rac|orall|box)"),
    ("\x08", "b", r"\x08(eta|inom|oxed|ig|ar|egin|f\{|mod|ot)"),
    ("\t", "t", r"\t(imes|heta|ext|an|frac|o\b|riangle|ilde|au)"),
    ("\x0b", "v", r"\x0b(ec|arepsilon|arphi|dots)"),
    ("\r", "r", r"\r(ight|ho|m\{|angle)"),
    ("\x07", "a", r"\x07(lpha|pprox|ngle)"),
]
# "\neq" read as a newline + "eq": a command name after a space or an opening delimiter and before what follows a
# command (space, brace, backslash, dollar, digit), never a line of drawing code ("mid[i] = ...")
_NEWLINE_DAMAGE = r"([ $({])\n(eq|abla|otin|ot|eg|leq|geq|exists|mid|parallel|subseteq|cong|sim|prec|succ)([\s{}\\$0-9])"


def repair_escapes(col: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    """Undo JSON-escape damage to LaTeX commands; returns (repaired column, was-repaired mask). Only rows holding a
    control character of the damage (U+0007 to U+000D) can change, so only they go through the patterns."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col

    def repair(x: pa.Array) -> pa.Array:
        for _, letter, pattern in _ESCAPE_DAMAGE:
            x = pc.replace_substring_regex(x, pattern, "\\\\" + letter + r"\1")
        return pc.replace_substring_regex(x, _NEWLINE_DAMAGE, r"\1\\n\2\3")

    out = apply_on(col, pc.fill_null(pc.match_substring_regex(col, r"[\x07-\x0d]"), False).to_numpy(zero_copy_only=False),
                    repair)
    changed = pc.fill_null(pc.not_equal(out, col), False)
    return out, changed
