"""Filters: small vectorized steps, each with a reason; the first step that fires names the rejection.

Every step sees the whole batch (pyarrow compute, RE2 regexes), so a batch of 16k rows costs a few
kernel calls per step, not a Python loop per row. Signals are recorded for every row in the
``sig_*`` columns (Big-Math keeps per-filter signal columns so that a policy can be re-applied without
re-running), and ``reject_reason`` is the name of the first step that fired, in ``STEPS`` order.

Which items are unverifiable follows the RL-data papers: Kimi k1.5 (arXiv:2501.12599, sec. 2.2) drops
multiple-choice, true/false and proof-based questions because a model can guess them or a rule cannot
check them; Big-Math (arXiv:2502.17387) drops multiple choice, yes/no, true/false, proofs and multi-part
questions, and keeps only problems with one closed-form answer; Open-Reasoner-Zero (arXiv:2503.24290)
drops problems that rule-based math-verify cannot evaluate (the gold gate, in ``curate.pipeline``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class FilterConfig:
    """Thresholds of the heuristic filters; ``skip`` names steps to turn off."""

    # DAPO's recipe trains with max_prompt_length 2048 tokens (arXiv:2503.14476); ~3 chars/token for LaTeX.
    max_problem_chars: int = 6000
    # Short closed-form answers only (Big-Math's "closed-form" criterion); longer ones are prose or lists.
    max_answer_chars: int = 200
    # Fraction of control characters above which a "problem" is binary junk, not text.
    max_control_frac: float = 0.01
    skip: tuple[str, ...] = ()  # filter steps to turn off (gradus list filters)
    gold_gate: bool = True  # math-verify must parse the gold answer (ORZ); see curate.pipeline
    gold_timeout_s: int = 5  # math-verify's seconds per gold parse (its own default)

    def __post_init__(self) -> None:
        unknown = [s for s in self.skip if s not in STEP_NAMES and s != "answer_unparseable"]
        if unknown:
            raise ValueError(f"skip: unknown filter(s) {unknown}; choose from {', '.join(STEP_NAMES)}, answer_unparseable")
        if self.max_problem_chars <= 0 or self.max_answer_chars <= 0:
            raise ValueError("max_problem_chars and max_answer_chars must be positive")


def _re(col: pa.ChunkedArray | pa.Array, pattern: str) -> pa.Array:
    return pc.fill_null(pc.match_substring_regex(col, pattern), False)


def _any(*masks: pa.Array) -> pa.Array:
    out = masks[0]
    for m in masks[1:]:
        out = pc.or_(out, m)
    return out


def _blank(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    return pc.fill_null(pc.equal(pc.utf8_trim_whitespace(col), ""), True)


# --- patterns (RE2 syntax) -----------------------------------------------------------------------------
# options embedded as (A) ... (B) ... (C) (also inside \textbf{(A)} and $\text{(A)}$)
# (not after a letter or digit: asy code has dot(A);dot(B);dot(C))
_MCQ_OPTIONS = r"(?:^|[^A-Za-z0-9_])\(A\)[\s\S]*?[^A-Za-z0-9_]\(B\)[\s\S]*?[^A-Za-z0-9_]\(C\)"
# options as lines "A. ..." / "A) ..." followed by a "B" line
_MCQ_LINES = r"(?m)^\s*\$?A[.):]\s*\S[\s\S]*^\s*\$?B[.):]\s*\S"
_MCQ_PHRASE = r"(?i)which of the following|which one of the following|choose the correct|select the correct"
# an answer that is a bare option letter: C, (C), \text{C}, \textbf{(C)}, $C$
_MCQ_ANSWER = r"^\s*\$?\s*(?:\\(?:text|textbf|mathrm)\s*\{\s*)?\(?[A-E]\)?\s*\}?\s*\$?\s*$"
_PROOF = r"(?i)\bprove\b|\bprove that\b|\bshow that\b|\bdemonstrate that\b|\bprove or disprove\b|\bshow how\b"
_PROOF_ANSWER = r"(?i)^\s*(?:proof|notfound|not found|\\text\{proof\})\s*$"
_YESNO_ANSWER = r"(?i)^\s*\$?\s*(?:\\text(?:bf)?\s*\{\s*)?(?:yes|no|true|false)\b[^0-9=]{0,40}$"
_YESNO_PROBLEM = r"(?i)\btrue or false\b|\byes or no\b|\banswer (?:yes|no)\b"
_MULTIPART = (
    r"(?:^|[\s.:;,])\(a\)[\s\S]*?[\s.:;,]\(b\)|(?i)\bpart \(?a\)?[\s\S]*\bpart \(?b\)?|"
    r"(?m)^\s*a\)\s[\s\S]*^\s*b\)\s|(?:^|\s)\(i\)[\s\S]*?\s\(ii\)"
)
_MULTIPART_ANSWER = r"\(a\)[\s\S]*\(b\)|(?i)\ba\)[\s\S]*\bb\)|\(i\)[\s\S]*\(ii\)"
_FIGURE_REF = (
    r"(?i)\bas shown\b|\bshown (?:below|above|here|in the (?:figure|diagram|picture))|"
    r"\bin the (?:figure|diagram|picture|graph) (?:below|above|shown)|\bthe (?:figure|diagram|picture) "
    r"(?:below|above|shows)|\bsee (?:the )?(?:figure|diagram)\b|\bin the (?:figure|diagram)\b|"
    r"\.(?:png|jpe?g|gif|svg)\b"
)
# a drawing, an image, or a table/array that "shown below" can refer to
_FIGURE_PRESENT = (
    r"\[asy\]|\\begin\{(?:tikzpicture|array|tabular|matrix|pmatrix|bmatrix)\}|<img|!\[[^\]]*\]\(|"
    r"\\includegraphics|(?m)^\s*\|.*\|\s*$"
)
_CONTROL = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x{fffd}]"
_PROSE_ANSWER = r"(?:^|[^\\A-Za-z])[A-Za-z]{2,}\s+[A-Za-z]{2,}\s+[A-Za-z]{2,}"


def _problem_empty(t: pa.Table, c: FilterConfig) -> pa.Array:
    return _blank(t["problem"])


def _problem_not_text(t: pa.Table, c: FilterConfig) -> pa.Array:
    n_ctrl = pc.count_substring_regex(pc.fill_null(t["problem"], ""), _CONTROL)
    length = pc.max_element_wise(pc.utf8_length(pc.fill_null(t["problem"], "")), 1)
    return pc.fill_null(pc.greater(pc.divide(pc.cast(n_ctrl, pa.float64()), length), c.max_control_frac), False)


def _problem_too_long(t: pa.Table, c: FilterConfig) -> pa.Array:
    return pc.fill_null(pc.greater(pc.utf8_length(t["problem"]), c.max_problem_chars), False)


def _unbalanced(t: pa.Table, c: FilterConfig) -> pa.Array:
    p = pc.fill_null(t["problem"], "")
    opens = pc.subtract(pc.count_substring(p, "{"), pc.count_substring(p, "\\{"))
    closes = pc.subtract(pc.count_substring(p, "}"), pc.count_substring(p, "\\}"))
    return pc.not_equal(opens, closes)


def _qtype(t: pa.Table, pattern: str) -> pa.Array:
    return _re(t["question_type"], pattern) if "question_type" in t.column_names else pa.array([False] * len(t))


def _mcq(t: pa.Table, c: FilterConfig) -> pa.Array:
    p, a = t["problem"], t["answer"]
    return _any(
        _re(p, _MCQ_OPTIONS), _re(p, _MCQ_LINES), _re(p, _MCQ_PHRASE), _re(a, _MCQ_ANSWER),
        _qtype(t, r"(?i)^\s*(?:mcq|multiple[- _]?choice)\s*$"),
    )


def _proof(t: pa.Table, c: FilterConfig) -> pa.Array:
    return _any(_re(t["problem"], _PROOF), _re(t["answer"], _PROOF_ANSWER), _qtype(t, r"(?i)^\s*proof\s*$"))


def _yesno(t: pa.Table, c: FilterConfig) -> pa.Array:
    return _any(_re(t["answer"], _YESNO_ANSWER), _re(t["problem"], _YESNO_PROBLEM))


def _multipart(t: pa.Table, c: FilterConfig) -> pa.Array:
    return _any(_re(t["problem"], _MULTIPART), _re(t["answer"], _MULTIPART_ANSWER))


def _figure(t: pa.Table, c: FilterConfig) -> pa.Array:
    p = t["problem"]
    return pc.and_(_re(p, _FIGURE_REF), pc.invert(_re(p, _FIGURE_PRESENT)))


def _declared_invalid(t: pa.Table, c: FilterConfig) -> pa.Array:
    return pc.fill_null(pc.invert(t["declared_valid"]), False)


def _answer_missing(t: pa.Table, c: FilterConfig) -> pa.Array:
    return _blank(t["answer"])


def _answer_too_long(t: pa.Table, c: FilterConfig) -> pa.Array:
    return pc.fill_null(pc.greater(pc.utf8_length(t["answer"]), c.max_answer_chars), False)


def _answer_prose(t: pa.Table, c: FilterConfig) -> pa.Array:
    return _re(t["answer"], _PROSE_ANSWER)


@dataclass(frozen=True)
class Step:
    name: str  # the reject reason
    signal: str | None  # record column that stores the step's signal for every row
    fn: Callable[[pa.Table, FilterConfig], pa.Array]
    doc: str


STEPS: list[Step] = [
    Step("problem_empty", None, _problem_empty, "problem missing or blank"),
    Step("problem_not_text", None, _problem_not_text, "control characters / replacement chars: binary junk"),
    Step("problem_too_long", None, _problem_too_long, "longer than max_problem_chars"),
    Step("problem_unbalanced_braces", None, _unbalanced, "unescaped { and } do not balance: broken LaTeX"),
    Step("mcq", "sig_mcq", _mcq, "options (A)...(C), option lines, 'which of the following', letter answer, MCQ"),
    Step("proof", "sig_proof", _proof, "prove/show that, declared proof, answer 'proof'/'notfound'"),
    Step("yesno", "sig_yesno", _yesno, "answer yes/no/true/false, or 'true or false' asked"),
    Step("multipart", "sig_multipart", _multipart, "several sub-questions (a)/(b), (i)/(ii), part a/b"),
    Step("figure", "sig_figure", _figure, "refers to a figure/diagram/image that the text does not contain"),
    Step("declared_invalid", None, _declared_invalid, "the source marks the problem or solution invalid"),
    Step("answer_missing", None, _answer_missing, "no gold answer"),
    Step("answer_too_long", None, _answer_too_long, "gold answer longer than max_answer_chars"),
    Step("answer_prose", None, _answer_prose, "gold answer is prose (three words in a row)"),
]
STEP_NAMES = [s.name for s in STEPS]


def apply_filters(t: pa.Table, cfg: FilterConfig) -> tuple[pa.Table, pa.Array]:
    """Signals and first-firing reason for a batch.

    Returns the table with ``sig_*`` columns filled and an array of reasons (null = passes every step).
    """
    reason = pa.nulls(len(t), pa.string())
    masks = []
    for step in STEPS:
        if step.name in cfg.skip:
            continue
        mask = step.fn(t, cfg)
        if isinstance(mask, pa.ChunkedArray):
            mask = mask.combine_chunks()
        masks.append((step, mask))
        if step.signal:
            t = t.set_column(t.schema.get_field_index(step.signal), step.signal, mask)
    for step, mask in reversed(masks):  # first step in order wins
        reason = pc.if_else(mask, pa.scalar(step.name), reason)
    return t, reason
