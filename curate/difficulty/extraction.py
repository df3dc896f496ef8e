"""Answer extraction: where a completion's final answer is (the last box, boxes that together form one answer, an
answer tag, an anchored "final answer is ..."), cleaned as math-verify reads it. Plain string work, no math-verify:
``curate.difficulty.grading`` grades what this finds.

    extract_prediction("... so the answer is \\boxed{42}.")   # ("42", "boxed")
"""

from __future__ import annotations

import re

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)
_MATH_DELIM = re.compile(r"\$|\\\(|\\\[|\\boxed")
# Markdown bold around text (``**73**``, ``**Answer: 5**``), not ``**`` as an operator (``2**10``): the opening
# marker may not follow a word character or a closing brace, the closing one may not precede a word or ``{``.
_BOLD = re.compile(r"(?<![\w}\\*])\*\*(?=[^\s*])([^*\n]{1,400}?)(?<=[^\s*])\*\*(?![\w{*])")
MAX_FALLBACK_CHARS = 4000  # an unboxed response is searched for an anchored answer in its last 4,000 characters

# How the prediction was found: "boxed" (the final box, or the boxes that together form it), "final_anchor"
# (an explicit "final answer is $...$" after the last box) and "answer_tag" are explicit answers; "anchored" is an
# unboxed response, where only an answer after an anchor ("final answer is $...$", "Answer: ...") counts.
EXPLICIT = ("boxed", "final_anchor", "answer_tag")
# What may stand between two boxes that together form one answer (``\boxed{1}, \boxed{2}``,
# ``\boxed{(2,2)} \quad \text{and} \quad \boxed{(6,2)}``, ``y_1 = \boxed{..} \) and \( y_2 = \boxed{..}``):
# layout (math delimiters, spacing, ``\text{}``) is dropped, and what is left must be separators ("and", "or",
# ",", ";") with at most part labels ("for part (a)") and variable labels (``y_2 =``), at least one separator.
_JOIN_LAYOUT = re.compile(r"\\(?:quad|qquad|[,;:! ]|text(?:rm|bf)?|mathrm|mbox)|\\[\[\]()]|~|\$|[{}]")
_JOIN_TOKEN = re.compile(r"\s*(?:(?P<sep>\band\b|\bor\b|,|;)|\b(?:for\s+)?part\s*\(?[a-z0-9]\)?|\([a-z0-9]\)|"
                         r"\b[a-z](?:_\w{1,3})?\s*=)\s*", re.I)
_JOIN_MAX_CHARS = 80
# An explicit final answer after the last box ("= \boxed{255}$ ... The final answer is $10,455$. I hope ..."): it
# wins. Only "final answer is" or "final answer:" directly before the answer, and the answer math between
# delimiters (several joined by "and", "or" or commas are one answer, as math-verify joins them) or a bare number
# that ends the sentence. "the final answer for part 2", "the final answer does not depend on $n$" and "the final
# answer is 1/2" (a bare number that does not end there) leave the box alone.
_FINAL_ANCHOR = re.compile(r"(?i)\b(?:final\s+)?answer\s*(?:is\b\s*:?|:)\s*")
_ANCHOR_MATH = re.compile(r"\$\$?([^$]{1,300}?)\$\$?|\\\((.{1,300}?)\\\)|\\\[(.{1,300}?)\\\]", re.S)
_ANCHOR_SEP = re.compile(r"\s*(?:,\s*(?:and|or)\b|\band\b|\bor\b|,)\s*", re.I)
_SENTENCE_GOES_ON = re.compile(r"\s*(?!I hope)[A-Za-z]")  # words after the anchored math: not a list of answers
_ANCHOR_NUMBER = re.compile(r"([-+]?\d(?:[\d,]*\d)?(?:\.\d+)?)(?=\s*\.?\s*(?:$|\n|I hope))")  # not "10!"


# Thousands grouped with a LaTeX space or ``{,}`` (``10\\,000``, ``1\\;234\\;567``, ``10{,}000``): math-verify reads
# ``10\\,000`` as the product 10 * 0 (so a response boxing 0 matched it). The separator is dropped between a digit and
# a group of exactly three digits; ``3{,}14`` (a decimal comma) is left alone.
_THOUSANDS = re.compile(r"(?<=\d)(?:\\[,;:! ]|\\thinspace\s*|\{,\})(?=\d{3}(?!\d))")
# An equation boxed the other way round (``\\boxed{5 = x}``): its value is the side that is not a lone variable.
_LONE_VAR = r"[A-Za-z](?:_\{?[A-Za-z0-9]{1,3}\}?)?"
_REVERSED_EQ = re.compile(rf"^\s*(?P<value>[^=]+?)\s*=\s*(?P<var>{_LONE_VAR})\s*$")
# Words that introduce the answer inside its box (``\\boxed{\\text{The answer is } 7}``), not part of it.
_BOX_WORDS = re.compile(r"^\s*\\(?:text|textbf|textrm|mathrm|mbox)\{\s*(?:the\s+)?(?:final\s+)?answer"
                        r"(?:\s+is)?\s*:?\s*\}\s*(?=\S)", re.I)
# One-variable inequalities, read as the interval they describe (``x < 3`` is ``(-\\infty, 3)``).
_LESS = {"<": ")", "\\lt": ")", "\\le": "]", "\\leq": "]", "\\leqslant": "]"}
_MORE = {">": "(", "\\gt": "(", "\\ge": "[", "\\geq": "[", "\\geqslant": "["}
_CMP = r"(<|>|\\l(?:eqslant|eq|e|t)|\\g(?:eqslant|eq|e|t))(?![a-zA-Z])"
_ONE_SIDED = re.compile(rf"^\s*{_LONE_VAR}\s*{_CMP}\s*(?P<b>[^<>=]+?)\s*$")
_TWO_SIDED = re.compile(rf"^\s*(?P<a>[^<>=]+?)\s*{_CMP}\s*{_LONE_VAR}\s*{_CMP}\s*(?P<b>[^<>=]+?)\s*$")


def join_thousands(text: str) -> str:
    """Thousands written with a thin space or ``{,}`` as plain digits (``_THOUSANDS``): gold and prediction alike."""
    return _THOUSANDS.sub("", text) if ("\\" in text or "{,}" in text) else text


def _as_interval(text: str) -> str | None:
    """``x < 3`` as ``(-\\infty, 3)``, ``2 \\le x < 5`` as ``[2, 5)``; None for anything else."""
    m = _TWO_SIDED.match(text)
    if m:
        lo, hi = m.group(2), m.group(3)
        if lo in _LESS and hi in _LESS:
            return f"{'(' if _LESS[lo] == ')' else '['}{m.group('a')}, {m.group('b')}{_LESS[hi]}"
        return None
    m = _ONE_SIDED.match(text)
    if m:
        op, b = m.group(1), m.group("b")
        if op in _LESS:
            return f"(-\\infty, {b}{_LESS[op]}"
        return f"{_MORE[op]}{b}, \\infty)"
    return None


def clean_box(content: str) -> str:
    """What a box states as its answer, in the form math-verify reads the way a careful reader does: words that
    introduce the answer dropped (``\\text{The answer is } 7``), an equation boxed the other way round turned
    (``5 = x`` is ``x = 5``), a one-variable inequality as its interval."""
    content = _BOX_WORDS.sub("", content)
    m = _REVERSED_EQ.match(content)
    if m and not re.fullmatch(_LONE_VAR, m.group("value").strip()):
        return f"{m.group('var')} = {m.group('value')}"
    interval = _as_interval(content)
    return interval if interval is not None else content


def strip_bold(text: str) -> str:
    """Remove markdown bold markers around text (math-verify 0.9 reads ``**73**`` as ``73**``)."""
    return _BOLD.sub(r"\1", text) if "**" in text else text


def _anchored_answer(body: str) -> str | None:
    """The answer right after a final-answer anchor (see ``_FINAL_ANCHOR``), or None."""
    parts, pos, end = [], 0, 0
    while True:
        m = _ANCHOR_MATH.match(body, pos)
        if not m:
            break
        parts.append(next(g for g in m.groups() if g is not None).strip())
        end = m.end()
        sep = _ANCHOR_SEP.match(body, m.end())
        if not sep or not _ANCHOR_MATH.match(body, sep.end()):
            break
        pos = sep.end()
    if len(parts) > 1 and _SENTENCE_GOES_ON.match(body, end):
        parts = parts[:1]  # "is $7$, and $2\cdot 7 = 14$ checks out": the later math is a remark, not the answer
    if parts:
        return ", ".join(p for p in parts if p) or None
    m = _ANCHOR_NUMBER.match(body)
    return m.group(1) if m else None


def _joins(between: str) -> bool:
    """Whether the text between two boxes makes them one answer (see ``_JOIN_TOKEN``)."""
    if len(between) > _JOIN_MAX_CHARS:
        return False
    rest, seps = _JOIN_LAYOUT.sub(" ", between).strip(), 0
    if not rest:  # nothing but layout between them (``\boxed{5}\boxed{7}``): one answer in two boxes
        return True
    pos = 0
    while pos < len(rest):
        m = _JOIN_TOKEN.match(rest, pos)
        if not m or m.end() == pos:
            return False
        seps += m.group("sep") is not None
        pos = m.end()
    return seps > 0


def final_span(text: str) -> tuple[list[str], str | None]:
    """The final answer of a response: ``(boxes, anchored)``.

    ``boxes`` are the contents of the last box and of the boxes before it that together form one answer
    (``\\boxed{1}, \\boxed{2}`` for "find all solutions"; see ``_joins``), in order, repeats dropped; empty when
    the response has no complete box. ``anchored`` is the answer of an explicit "final answer is $...$" (or a
    bare number) written after the last box, which wins over the boxes; else None.
    """
    from curate.sources.answers import box_spans

    if "boxed" not in text and "fbox" not in text:
        return [], None
    spans = box_spans(text)
    if not spans:
        return [], None
    i = len(spans) - 1
    while i > 0 and _joins(text[spans[i - 1][1] : spans[i][0]]):
        i -= 1
    boxes: list[str] = []
    for _, _, c in spans[i:]:
        c = clean_box(c)
        if not boxes or boxes[-1] != c:
            boxes.append(c)
    anchored = None
    tail = text[spans[-1][1] :][-MAX_FALLBACK_CHARS:]
    if "answer" in tail.lower():
        for m in reversed(list(_FINAL_ANCHOR.finditer(tail))):  # the last anchor that states an answer
            anchored = _anchored_answer(tail[m.end() :])
            if anchored is not None:
                break
    if anchored is not None and _names_the_box(anchored, text[: spans[-1][0]], spans[-1][2]):
        anchored = None  # "$x = \boxed{7}$. The final answer is $x$": the name of the boxed value, not another answer
    return boxes, anchored


def _names_the_box(anchored: str, before: str, box: str) -> bool:
    """Whether an anchored answer is only the name of the boxed value: a lone variable that the box states
    (``\\boxed{x = 7}``) or that is set equal to the box (``x = \\boxed{7}``)."""
    name = anchored.strip()
    if not re.fullmatch(_LONE_VAR, name):
        return False
    ref = re.escape(name)
    return bool(re.match(rf"\s*{ref}\s*=", box) or re.search(rf"{ref}\s*=\s*(?:\$|\\\(|\\\[)?\s*$", before[-80:]))


def extract_prediction(text: str) -> tuple[str, str]:
    """``(what math-verify parses, how it was found)`` for a model response: the anchored rule.

    1. the final answer span (``final_span``): an explicit "final answer is $X$" after the last box (passed as
       ``$X$``), else the last complete ``\\boxed{}`` together with the boxes before it that form one answer with it
       (passed on as ``\\boxed{X}`` or ``\\boxed{X}, \\boxed{Y}``, so math-verify's own boxed rules apply);
    2. else the last non-empty ``<answer>...</answer>`` of the R1 template: its text is the answer
       (``12.``, ``$\\frac{1}{2}$ cups`` and ``The answer is 5`` are answers; wrapping them in a box is not),
       put between ``$...$`` when it has no math delimiters of its own so that bare LaTeX parses;
    3. else the response's tail, from which math-verify may take an answer only after an anchor
       ("final answer is", "answer:"), never "the last number it finds" (Open-R1's accuracy reward:
       ``try_extract_without_anchor=False``; DeepScaleR scores an unboxed response wrong).

    Markdown bold around text is removed first; ``**`` between operands (``2**10``) is left alone.
    """
    text = strip_bold(text)
    boxes, anchored = final_span(text)
    if anchored is not None:
        return f"${anchored}$", "final_anchor"
    if boxes:
        return ", ".join(f"\\boxed{{{b}}}" for b in boxes), "boxed"
    tags = _ANSWER_TAG.findall(text)
    if tags and tags[-1].strip():
        tag = tags[-1].strip()
        # bare LaTeX is read by math-verify only inside math delimiters (``\\sqrt{2}`` alone parses to nothing,
        # ``2\\pi`` to 2): wrap a tag that has none; one that has them (``$\\frac{1}{2}$ cups``) is passed as is
        if not _MATH_DELIM.search(tag):
            tag = f"${tag}$"
        return tag, "answer_tag"
    return text[-MAX_FALLBACK_CHARS:], "anchored"


def final_answer(text: str) -> str | None:
    """The answer a response states explicitly (its final answer span, else its last ``<answer>`` tag), or None:
    what the samples of a problem are compared on when looking for a consensus against the gold."""
    text = strip_bold(text)
    boxes, anchored = final_span(text)
    if anchored is not None:
        return anchored
    if boxes:
        return ", ".join(boxes).strip() or None
    tags = _ANSWER_TAG.findall(text)
    return tags[-1].strip() or None if tags else None


def cut_off_unanswered(text: str, truncated: bool) -> bool:
    """A response stopped by ``max_tokens`` before any explicit answer (box or ``<answer>`` tag).

    It is ``no_answer`` without grading, in difficulty estimation and in training rewards alike: whatever an
    unfinished text says after "answer" is not the model's final answer.
    """
    return truncated and extract_prediction(text)[1] not in EXPLICIT
