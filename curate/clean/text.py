"""Text normalization and hashing, vectorized over arrow arrays.

Two normal forms:
- ``exact_key``: for ids and exact dedup. NFKC, lowercase, math delimiters and LaTeX spacing/sizing
  macros removed, ``\\dfrac``/``\\tfrac`` folded to ``\\frac``, all whitespace removed. Digits are kept:
  "2+3" and "2+4" are different problems.
- ``words``: for n-gram shingles (near dup, decontamination). NFKC, lowercase, LaTeX environment
  markers and command names dropped (``\\begin{equation*}``, ``\\overline``: typesetting, not wording),
  letters and digits split apart (``a^2b`` and ``a^2 b`` both give ``a 2 b``), every other run of
  non-alphanumeric characters becomes a space, then split.

Word n-grams are hashed without a Python loop per row: each distinct word of a batch gets a stable
64-bit hash (blake2b), and n-grams are combined with a polynomial over uint64 (wrapping arithmetic),
so the same text gives the same hashes in every run and on every machine.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# LaTeX spacing/sizing commands that change the look, not the problem.
# Applied after lowercasing. \\left\b keeps \\leftarrow intact.
_LATEX_NOISE = (
    r"\\(?:displaystyle|textstyle|left|right|bigl|bigr|big|mathrm|text|textbf|mbox|quad|qquad)\b"
    r"|\\[,;:! ]|\$|~"
)
_DFRAC = r"\\[dt]frac"
_NON_WORD = r"[^\p{L}\p{N}]+"
_NGRAM_BASE = np.uint64(1099511628211)  # FNV-1a 64-bit prime, used as the polynomial base


def exact_key(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Exact-dedup normal form of a string column (nulls stay null)."""
    s = pc.utf8_normalize(col, "NFKC")
    s = pc.utf8_lower(s)
    s = pc.replace_substring_regex(s, _DFRAC, r"\\frac")
    s = pc.replace_substring_regex(s, _LATEX_NOISE, "")
    s = pc.replace_substring_regex(s, r"\s+", "")
    return s


def content_ids(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Stable 16-hex-char id of each string's exact key (sha1; nulls hash as empty)."""
    keys = exact_key(col).to_pylist()
    return pa.array([hashlib.sha1((k or "").encode("utf-8", "surrogatepass")).hexdigest()[:16] for k in keys])


def words(col: pa.Array | pa.ChunkedArray) -> pa.ListArray:
    """Word tokens per row (list<string>)."""
    s = pc.utf8_lower(pc.utf8_normalize(pc.fill_null(col, ""), "NFKC"))
    s = pc.replace_substring_regex(s, r"\\(?:begin|end)\{[^}]*\}|\\[a-z]+", " ")
    s = pc.replace_substring_regex(s, r"([0-9])([a-z])", r"\1 \2")
    s = pc.replace_substring_regex(s, r"([a-z])([0-9])", r"\1 \2")
    s = pc.utf8_trim_whitespace(pc.replace_substring_regex(s, _NON_WORD, " "))
    s = pc.if_else(pc.equal(s, ""), pa.scalar(None, pa.string()), s)  # "" would split into [""]
    out = pc.utf8_split_whitespace(s)
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def _word_hashes(flat: pa.Array) -> np.ndarray:
    """uint64 hash of each word; hashing each distinct word once."""
    if len(flat) == 0:
        return np.zeros(0, dtype=np.uint64)
    enc = pc.dictionary_encode(flat)
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    vocab = enc.dictionary.to_pylist()
    table = np.fromiter(
        (int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little") for w in vocab),
        dtype=np.uint64,
        count=len(vocab),
    )
    return table[enc.indices.to_numpy(zero_copy_only=False)]


def ngram_hashes(col: pa.Array | pa.ChunkedArray, n: int, short_docs: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every word n-gram of every row.

    Returns ``(hashes, row)`` as two aligned 1-D arrays: ``hashes[j]`` (uint64) belongs to row ``row[j]``.
    A row with fewer than ``n`` words yields one hash of all its words when ``short_docs`` is true
    (so short problems still get a shingle for near-dup), and nothing otherwise.
    """
    toks = words(col)
    offsets = toks.offsets.to_numpy()
    offsets = offsets - offsets[0]
    flat = toks.flatten()
    wh = _word_hashes(flat)
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


def repair_escapes(col: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    """Undo JSON-escape damage to LaTeX commands; returns (repaired column, was-repaired mask)."""
    out = col
    for _, letter, pattern in _ESCAPE_DAMAGE:
        out = pc.replace_substring_regex(out, pattern, "\\\\" + letter + r"\1")
    changed = pc.fill_null(pc.not_equal(out, col), False)
    return out, changed
