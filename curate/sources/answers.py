"""Gold-answer extraction and light normalization.

``last_boxed`` finds the final ``\\boxed{...}`` / ``\\boxed 5`` / ``\\fbox{...}`` of a solution with brace
matching (nested braces are common in MATH: ``\\boxed{\\frac{1}{2}}``); ``distinct_boxes`` lists the boxes
that differ after normalization (a solution whose boxes disagree gives no single gold). ``clean_answer`` strips what is
presentation, not content (surrounding ``$``, ``\\[...\\]``, ``\\(...\\)``, ``\\boxed``, trailing periods,
``\\text{}`` around a bare number). ``answer_type`` classifies an answer for the record's ``answer_type``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*")


def _match_brace(s: str, open_idx: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_idx`` (escaped braces skipped), or None."""
    depth = 0
    i = open_idx
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def _boxes(text: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, content)`` of every complete box in ``text``, in order: ``\\boxed{...}`` with brace
    matching (``end`` is past its ``}``), and ``\\boxed 5`` (the token after the space, up to whitespace or ``$``).
    Unbalanced boxes are skipped."""
    for m in _BOX_RE.finditer(text):
        j = m.end()
        if j < len(text) and text[j] == "{":
            k = _match_brace(text, j)
            if k is not None:
                yield m.start(), k + 1, text[j + 1 : k].strip()
        elif m.group(0).endswith(" ") or (j < len(text) and text[j] not in "{"):
            tok = re.match(r"[^\s$]+", text[j:])
            if tok:
                yield m.start(), j + tok.end(), tok.group(0)


def boxed_all(text: str) -> list[str]:
    """Contents of every complete box in ``text``, in order. Unbalanced boxes are skipped."""
    return [c for _, _, c in _boxes(text)]


def box_spans(text: str) -> list[tuple[int, int, str]]:
    """``(start, end, content)`` of every complete box in ``text``, in order (``end``: just past the box)."""
    return list(_boxes(text))


def last_boxed(text: str | None) -> str | None:
    """The last complete box of a solution, or None when there is none."""
    if not text or ("boxed" not in text and "fbox" not in text):
        return None
    boxes = boxed_all(text)
    return boxes[-1] if boxes else None


_DISPLAY = re.compile(r"^\\\[((?:(?!\\\]).)*)\\\]$|^\\\(((?:(?!\\\)).)*)\\\)$", re.S)  # one wrapper, not two
_PLACEHOLDER = re.compile(r"\\(?:h|v)?phantom\{[^}]*\}|\\(?:quad|qquad|,|;|!)")
def distinct_boxes(text: str | None) -> list[str]:
    """The boxes of a solution, cleaned, one per distinct normal form (``\\frac32`` and ``\\frac{3}{2}`` are one),
    in order; more than one means the solution boxes several different things."""
    if not text or ("boxed" not in text and "fbox" not in text):
        return []
    out: dict[str, str] = {}
    for b in boxed_all(text):
        c = clean_answer(b)
        if c and _PLACEHOLDER.sub("", c).strip():  # \boxed{\phantom{2}} is the problem's blank, not an answer
            key = re.sub(r"\s+|\\[,;:! ]|\\left|\\right", "", c).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
            key = re.sub(r"\\(frac|sqrt)(\d)(\d)?", lambda m: f"\\{m[1]}{{{m[2]}}}" + (f"{{{m[3]}}}" if m[3] else ""), key)
            out.setdefault(key, c)
    return list(out.values())


_TEXT_NUM = re.compile(r"^\\(?:text|textbf|mathrm|mbox)\{\s*([-+]?[\d.,]+)\s*\}$")


def clean_answer(ans: str | None) -> str | None:
    """Strip presentation around an answer; None for empty."""
    if ans is None:
        return None
    a = ans.strip()
    for _ in range(4):
        before = a
        if len(a) >= 2 and a[0] == "$" and a[-1] == "$":
            a = a.strip("$").strip()
        m = _DISPLAY.match(a)
        if m:  # \[ ... \] or \( ... \) around the whole answer (Omni-MATH)
            a = (m.group(1) if m.group(1) is not None else m.group(2)).strip()
        inner = last_boxed(a) if a.startswith(("\\boxed", "\\fbox")) else None
        if inner is not None:
            a = inner
        a = a.rstrip(".").strip()
        m = _TEXT_NUM.match(a)
        if m:
            a = m.group(1)
        if a == before:
            break
    return a or None


# Ordered rules (RE2 syntax, applied vectorized with pyarrow); the first that matches names the type.
_TYPE_RULES: list[tuple[str, str]] = [
    ("integer", r"^[-+]?\d+$|^[-+]?\d{1,3}(?:,(?:\\!)?\s?\d{3})+$"),
    ("number", r"^[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?$|^\\?\$\s?\d{1,3}(?:,(?:\\!)?\s?\d{3})*(?:\.\d+)?$"),
    ("fraction", r"^[-+]?\\[dt]?frac\s*\{?\s*-?\d+\s*\}?\s*\{?\s*\d+\s*\}?$|^[-+]?\d+\s*/\s*\d+$"),
    ("set", r"^\\\{.*\\\}$|^\\left\\\{.*\\right\\\}$|^[^=<>()\[\]{}]+(?:,[^=<>()\[\]{}]+)+$"),
    ("interval", r"^(?:\\left)?\[.*,.*(?:\\right)?[\])]$|^(?:\\left)?\(.*,.*(?:\\right)?\]$|\\infty|\\cup"),
    ("tuple", r"^(?:\\left)?\(.*,.*(?:\\right)?\)$"),
    ("equation", r"^[^<>]*[^<>!\\]=[^<>]*$"),
    ("text", r"^\\(?:text|textbf|mathrm)\{[A-Za-z ]+\}$|^[A-Za-z][a-z]+(?: [a-z]+)*$"),
]


def answer_types(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Vectorized ``answer_type`` over a string column (null answers give null), typed once per distinct answer."""
    enc = pc.dictionary_encode(col)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    return _answer_types(enc.dictionary).take(enc.indices)


def _answer_types(col: pa.Array) -> pa.Array:
    s = pc.utf8_trim_whitespace(col)
    out = pa.array(["expression"] * len(s), pa.string())
    for name, pattern in reversed(_TYPE_RULES):
        out = pc.if_else(pc.match_substring_regex(s, pattern), pa.scalar(name), out)
    missing = pc.or_kleene(pc.is_null(s), pc.equal(s, ""))
    return pc.if_else(pc.fill_null(missing, True), pa.scalar(None, pa.string()), out)


def answer_type(ans: str | None) -> str | None:
    """One of schema.ANSWER_TYPES for one answer, or None for a missing answer."""
    return answer_types(pa.array([ans], pa.string()))[0].as_py()
