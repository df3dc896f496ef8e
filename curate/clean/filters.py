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

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.clean.text import apply_on


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
    # steps that record their signal column and reject nothing: on 688 labelled real rows the figure reject was
    # right on 14 of 25 rows (benchmarks/filter_check.py): most "as shown in the figure" problems state enough
    flag_only: tuple[str, ...] = ("figure",)
    gold_gate: bool = True  # math-verify must parse the gold answer (ORZ); see curate.pipeline
    gold_timeout_s: int = 5  # math-verify's seconds per gold parse (its own default)
    # gold parse verdicts kept across runs under $GRADUS_HOME/gold_verdicts (a path: there; "": off); not in the
    # identity: a verdict is a pure function of the gold string and the grader version, which the identity holds
    gold_cache: str = "default"
    workers: int = 0  # processes that run the heuristics; 0: the usable cores for 200k rows or more (not in the identity)

    def __post_init__(self) -> None:
        unknown = [s for s in self.skip if s not in STEP_NAMES and s != "answer_unparseable"]
        if unknown:
            raise ValueError(f"skip: unknown filter(s) {unknown}; choose from {', '.join(STEP_NAMES)}, answer_unparseable")
        unknown = [s for s in self.flag_only if s not in SIGNAL_STEPS]
        if unknown:
            raise ValueError(f"flag_only: unknown filter(s) {unknown}; choose from {', '.join(SIGNAL_STEPS)}")
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


def _one_of(*patterns: str) -> str:
    """One RE2 pattern that matches where any of ``patterns`` does: a regex pass costs about the same per row
    whatever it holds, so one pass of the alternation replaces one pass each. A leading inline flag group
    (``(?i)``, ``(?m)``) is scoped to its own pattern."""
    parts = []
    for x in patterns:
        m = re.match(r"\(\?([a-zA-Z]+)\)", x)
        parts.append(f"(?{m.group(1)}:{x[m.end():]})" if m else f"(?:{x})")
    return "|".join(parts)


def _and_on(mask: pa.Array | pa.ChunkedArray, t: pa.Table, fn) -> pa.Array:
    """``mask AND fn(t)`` with ``fn`` (a row-wise test of a table, no nulls) run on the rows ``mask`` holds only:
    most rows fail the first, cheap test, and the rest of the tests need not read them."""
    mask = mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask
    if not pc.any(mask).as_py():
        return mask
    at = pc.indices_nonzero(mask)
    out = np.zeros(len(mask), bool)
    out[at.to_numpy()] = fn(t.take(at)).to_numpy(zero_copy_only=False)
    return pa.array(out)


# --- patterns (RE2 syntax) -----------------------------------------------------------------------------
# options embedded as (A) ... (B) ... (C) (also inside \textbf{(A)} and $\text{(A)}$)
# (not after a letter or digit: asy code has dot(A);dot(B);dot(C))
_MCQ_OPTIONS = r"(?:^|[^A-Za-z0-9_])\(A\)[\s\S]*?[^A-Za-z0-9_]\(B\)[\s\S]*?[^A-Za-z0-9_]\(C\)"
# short lower-case options with a one-letter gold: "Is it (a) empty, (b) finite, (c) countable, or (d) uncountable?"
_MCQ_OPTIONS_LOWER = r"\(a\)[^()?]{1,60}\(b\)[^()?]{1,60}\(c\)"
_MCQ_ANSWER_LOWER = r"^\s*\$?\s*(?:\\text\s*\{\s*)?\(?[a-e]\)?\s*\}?\s*\$?\s*$"
# options as lines "A. ..." / "A) ..." followed by a "B" line
_MCQ_LINES = r"(?m)^\s*\$?A[.):]\s*\S[\s\S]*^\s*\$?B[.):]\s*\S"
# three option lines without punctuation: "A Tuesday\nB Wednesday\nC Thursday"
_MCQ_BARE_LINES = r"(?m)^\s*A\s+\S[^\n]*\n\s*B\s+\S[^\n]*\n\s*C\s+\S"
# drawing code names points A, B, C in calls like dir(A): it is not a list of options
_ASY = r"(?s)\[asy\].*?\[/asy\]"
_MCQ_PHRASE = (r"(?i)which of the following|which one of the following|choose the correct|select the correct|"
               r"enter the letters? of the correct|the letter of the correct|correct letter|\(A, B, C, D,? or E\)")
# the options written as quoted words: Enter "odd", "even", or "neither".
_MCQ_ENTER_ONE_OF = r'(?i)\benter\s+"[^"]+",\s*"[^"]+",?\s*or\s+"[^"]+"'
# an answer that is a bare option letter: C, (C), \text{C}, \textbf{(C)}, $C$
_MCQ_ANSWER = r"^\s*\$?\s*(?:\\(?:text|textbf|mathrm)\s*\{\s*)?\(?[A-E]\)?\s*\}?\s*\$?\s*$"
# an instruction to prove: "Prove that", "Show that", "prove or disprove" (a sentence of its own, or "and show")
_PROOF = r"(?i)\bprove\b|\bprove that\b|\bshow that\b|\bdemonstrate that\b|\bprove or disprove\b|\bshow how\b"
_PROOF_ANSWER = r"(?i)^\s*(?:proof|notfound|not found|\\text\{proof\})\s*$"
# the problem also asks for something checkable: "Show that the limit exists and determine it", "prove that ... and
# find the smallest c", "What is this color? (It is necessary to show that it is the only one.)"
_ASKS_VALUE = (
    r"(?i)(?:^|[.?!:;$]\s*|\n\s*|\band\s+|\bthen\s+|,\s*|\bso,?\s+|\balso\s+)(?:find|compute|calculate|evaluate|determine)"
    r"\b|\b(?:what|how many|how much|which)\b[^.?!]*\?"
)
_YESNO_ANSWER = r"(?i)^\s*\$?\s*(?:\\text(?:bf)?\s*\{\s*)?(?:yes|no|true|false)\b[^0-9=]{0,40}$"
_YESNO_PROBLEM = r"(?i)\btrue or false\b|\byes or no\b|\banswer (?:yes|no)\b"
# a question of whether: its gold is a restated claim ("converges", "I = J", the witness R) however it is written
_WHETHER = r"(?i)\b(?:determine|decide|check|verify|establish|investigate|examine|state|find out|tell)\s+(?:whether|if)\b"
_DETERMINE_ANY = r"(?i)\bdetermine\b"
_DETERMINE_WHETHER = r"(?i)\bdetermine\s+(?:whether|if)\b"
_OTHER_ASK = (r"(?i)\b(?:find|compute|calculate|evaluate|express|how many|how much|what is|what are|what's|add up)\b"
              r"|\bif so\b")
# a gold that is a condition ("p > 1", "x \in (0, 1)") answers "for which values", not a whether
_CONDITION_ANSWER = r"[<>]|\\[lg]eq?\b|\\in\b|\\neq\b"
# candidates for several sub-questions: two markers of one family; which are questions is decided per row
_MULTIPART_MARKERS = (
    r"\(a\)[\s\S]*\(b\)|\(i\)[\s\S]*\(ii\)|\(1\)[\s\S]*\(2\)|\(I\)[\s\S]*\(II\)|(?m)^\s*a\)[\s\S]*^\s*b\)|"
    r"(?i)\bpart \(?a\)?[\s\S]*\bpart \(?b\)?|(?m)^\s*1[.)]\s[\s\S]*^\s*2[.)]\s"
)
_MULTIPART_ANSWER = r"\(a\)[\s\S]*\(b\)|(?i)\ba\)[\s\S]*\bb\)|\(i\)[\s\S]*\(ii\)|\(1\)[\s\S]*\(2\)|\(I\)[\s\S]*\(II\)"
# A reference that leans on a picture for what the problem needs: "in the figure", "the diagram shows", "shown
# below", "the shaded region". Weaker mentions ("as shown", "(see figure)", an AIME copy's "Problem 4.png" tag, an
# image link) often come with a text that states everything, and are recorded in ``sig_figure`` without a reject:
# a problem that truly needs its missing figure is never solved and shows up as such in difficulty estimation,
# while a good problem dropped here is lost.
_FIGURE_REF = (
    r"(?i)\bshown (?:below|above)\b|\bthe (?:figure|diagram|picture|graph) (?:below |above )?(?:shows|is shown)\b|"
    r"\bshaded\b|(?:^|[.!?]\s+)in the (?:figure|diagram|picture)\b|\bin the (?:figure|diagram|picture) (?:below|above)\b"
)
_FIGURE_MENTION = (
    r"(?i)\bas shown\b|\b(?:figure|diagram|picture) (?:below|above)\b|\bin the (?:figure|diagram|picture)\b|"
    r"\bsee (?:the )?(?:figure|diagram)\b|\.(?:png|jpe?g|gif|svg)\b|<img|!\[[^\]]*\]\(|"
    r"\\includegraphics"
)
# the drawing's source, or a table/array that "shown below" can refer to (an image link is not: a text model
# cannot see it)
_FIGURE_PRESENT = (
    r"(?i)\[asy\]|\\begin\{(?:tikzpicture|picture|array|tabular|matrix|pmatrix|bmatrix)\}|\\put\s*\(|\\draw\b|"
    r"<svg|(?m)^\s*\|.*\|\s*$"
)
# "the first rows are shown below" followed by the rows themselves, written out
_SHOWN_IN_TEXT = r"(?i)\b(?:shown|given|listed|written|displayed) (?:below|above)\b"
_WRITTEN_OUT = r"\$\$|\\\[|\\bullet|\\begin\{"
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


# the statement carries its own solution: a collapsed "Solution" block (ORZ's AoPS copies), a solution or
# "Quickest Method of Solving" section after the problem (DeepScaleR's AIME copies), or the gold itself boxed
_SOLUTION_BLOCK = r"(?i)<summary>\s*solution|\n\s*(?:\*?solution\b|quickest method of solving\b)"


_BOX_OPEN = re.compile(r"\\boxed\s*\{\s*")


def _solution_in_problem(t: pa.Table, c: FilterConfig) -> pa.Array:
    p, a = t["problem"], t["answer"]
    boxed = _re(p, r"\\boxed\s*\{")
    if pc.any(boxed).as_py():  # few rows: is the gold itself in a box of the statement?
        ps, as_ = p.to_pylist(), a.to_pylist()
        boxed = pa.array([bool(f) and bool(as_[i]) and f"\\boxed{{{as_[i].strip()}}}" in _BOX_OPEN.sub(r"\\boxed{", ps[i])
                          for i, f in enumerate(boxed.to_pylist())], pa.bool_())
    return _any(_re(p, _SOLUTION_BLOCK), boxed)


def _qtype(t: pa.Table, pattern: str) -> pa.Array:
    return _re(t["question_type"], pattern) if "question_type" in t.column_names else pa.array([False] * len(t))


_LETTER = re.compile(r"[A-E]")


def _letter_is_an_object(problem: str, answer: str) -> bool:
    """A one-letter answer that names something of the problem (angle C, matrix A, point D) is not an option
    letter: the letter stands alone in the problem (``$C$``, ``\angle C``, "point C") and not as an option
    marker (``C.``, ``C)``, ``C:``)."""
    m = _LETTER.search(answer)
    if not m:
        return False
    x = m.group(0)
    text = re.sub(r'(?s)\[asy\].*?\[/asy\]|"[^"]*"', " ", problem)  # drawing code and quoted labels name nothing
    # not the article ("A birdbath", "A 3-digit number": "A" then a space), not an option marker ("A.", "A)", "A:")
    after = r"(?![A-Za-z.):\s])" if x == "A" else r"(?![A-Za-z.):]| [a-z])"
    if re.search(rf"(?<![A-Za-z\\(]){x}{after}", text):
        return True
    # a vertex of a named figure: "triangle $ABC$", "$ABCD$"
    return any(re.search(rf"(?<![A-Za-z\\])[A-Z]*{x}[A-Z]*(?![A-Za-z])", m) for m in re.findall(r"\$[^$]+\$", text))


_MCQ_ANY = _one_of(_MCQ_OPTIONS, _MCQ_LINES, _MCQ_BARE_LINES, _MCQ_PHRASE, _MCQ_ENTER_ONE_OF)


def _mcq(t: pa.Table, c: FilterConfig) -> pa.Array:
    a = t["answer"]
    p = t["problem"]
    has_asy = pc.fill_null(pc.match_substring(p, "[asy]"), False).to_numpy(zero_copy_only=False)
    if has_asy.any():  # the drawing code out, of the rows that hold some (_ASY needs "[asy]")
        p = apply_on(p.combine_chunks() if isinstance(p, pa.ChunkedArray) else p, has_asy,
                      lambda x: pc.replace_substring_regex(x, _ASY, " "))
    letter = _re(a, _MCQ_ANSWER)
    if pc.any(letter).as_py():  # few rows: decided one by one
        ps, as_ = p.to_pylist(), a.to_pylist()
        flags = letter.to_pylist()
        letter = pa.array([bool(f) and not _letter_is_an_object(ps[i] or "", as_[i] or "")
                           for i, f in enumerate(flags)], pa.bool_())
    lower = pa.table({"p": p, "a": a})
    return _any(
        _re(p, _MCQ_ANY), letter,
        _and_on(_re(p, _MCQ_OPTIONS_LOWER), lower, lambda x: _re(x["a"], _MCQ_ANSWER_LOWER)),
        _qtype(t, r"(?i)^\s*(?:mcq|multiple[- _]?choice)\s*$"),
    )


def _proof(t: pa.Table, c: FilterConfig) -> pa.Array:
    p = t["problem"]
    asked = _and_on(_re(p, _PROOF), t, lambda x: pc.invert(_re(x["problem"], _ASKS_VALUE)))
    return _any(asked, _re(t["answer"], _PROOF_ANSWER), _qtype(t, r"(?i)^\s*proof\s*$"))


def _count(col: pa.ChunkedArray | pa.Array, pattern: str) -> pa.Array:
    return pc.count_substring_regex(pc.fill_null(col, ""), pattern)


def _yesno(t: pa.Table, c: FilterConfig) -> pa.Array:
    p, a = t["problem"], t["answer"]
    # "outputs TRUE or FALSE. How many programs are there?" asks for a number
    asks_tf = _and_on(_re(p, _YESNO_PROBLEM), t, lambda x: pc.invert(_re(x["problem"], _OTHER_ASK)))

    # "Determine whether the series converges": the only ask is a whether (no find/compute/how many, and every
    # "determine" is a "determine whether")
    def only(x: pa.Table) -> pa.Array:
        q = x["problem"]
        out = pc.and_(pc.invert(_re(q, _OTHER_ASK)), pc.equal(_count(q, _DETERMINE_ANY), _count(q, _DETERMINE_WHETHER)))
        return pc.and_(out, pc.invert(_re(x["answer"], _CONDITION_ANSWER)))

    return _any(_re(a, _YESNO_ANSWER), asks_tf, _and_on(_re(p, _WHETHER), t, only))


_FAMILIES = [
    [r"\(a\)", r"\(b\)", r"\(c\)", r"\(d\)", r"\(e\)"],
    [r"\(i\)", r"\(ii\)", r"\(iii\)", r"\(iv\)", r"\(v\)"],
    [r"\(1\)", r"\(2\)", r"\(3\)", r"\(4\)", r"\(5\)"],
    [r"\(I\)", r"\(II\)", r"\(III\)", r"\(IV\)", r"\(V\)"],
    [r"(?m)^\s*a\)", r"(?m)^\s*b\)", r"(?m)^\s*c\)", r"(?m)^\s*d\)"],
    [r"(?m)^\s*1[.)]\s", r"(?m)^\s*2[.)]\s", r"(?m)^\s*3[.)]\s", r"(?m)^\s*4[.)]\s"],
    [r"(?i)\bpart \(?a\)?", r"(?i)\bpart \(?b\)?", r"(?i)\bpart \(?c\)?"],
]
_CALL = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_^}])'\\")
_FAMILIES_RE = [[re.compile(m) for m in fam] for fam in _FAMILIES]
# a sub-question asks something of its own
_CUE = re.compile(r"\?|(?i:\b(?:find|determine|compute|calculate|evaluate|prove|show|simplify|solve|express|estimate"
                  r"|give|list|sketch|explain|what|how many|how much|why)\b)")
# "Solve:" / "Find the following." right before the first marker: the markers are the things to find
_ASK_INTRO = re.compile(r"(?i)^\s*(?:find|determine|compute|calculate|evaluate|simplify|solve|prove|show|answer|express"
                        r"|factor|expand)\b[^.?!]{0,40}[:.]?\s*$")
# "Answer each question yes or no and add up the numbers": the parts feed one answer
_AGGREGATE = re.compile(r"(?i)\badd up\b|\bhow many of (?:the following|these|them)\b|\bsum of the (?:numbers|labels)\b"
                        r"|\bnumber of (?:true|correct|false) ")
_CONDITIONS = re.compile(r"(?i)such that|satisf|where|condition|propert|following (?:rule|step)|\bif\b")


def _several_questions(problem: str) -> bool:
    """Two or more sub-questions: markers (a)/(b), (i)/(ii), (1)/(2), (I)/(II), a)/b) or 1./2. at line
    starts, "part a"/"part b", where at least two of the marked parts ask something of their own, or where the
    markers follow a bare instruction ("Solve:"). Markers that list conditions, rules or steps of one question
    ("a sequence is good if (i) ... (ii) ... Find the smallest n") are not sub-questions, nor are parts whose
    answers are added up into one ("how many of the following are true")."""
    if _AGGREGATE.search(problem):
        return False
    for fam in _FAMILIES_RE:
        starts, pos = [], 0
        for marker in fam:
            m = marker.search(problem, pos)
            while m and m.start() > 0 and problem[m.start() - 1] in _CALL:  # f(1), W(2), P(a): arguments, not markers
                m = marker.search(problem, m.end())
            if not m:
                break
            starts.append((m.start(), m.end()))
            pos = m.end()
        if len(starts) < 2:
            continue
        bounds = [e for _, e in starts]
        ends = [s for s, _ in starts[1:]] + [len(problem)]
        asking = sum(bool(_CUE.search(problem[b:e])) for b, e in zip(bounds, ends, strict=True))
        if asking >= 2:
            return True
        before = re.split(r"[.?!\n]", problem[: starts[0][0]].rstrip().rstrip(".:"))[-1]
        if _ASK_INTRO.match(before) and not _CONDITIONS.search(before):
            return True
    return False


def _multipart(t: pa.Table, c: FilterConfig) -> pa.Array:
    p = t["problem"]
    cand = _re(p, _MULTIPART_MARKERS)
    if pc.any(cand).as_py():
        ps = p.to_pylist()
        cand = pa.array([bool(f) and _several_questions(ps[i] or "") for i, f in enumerate(cand.to_pylist())], pa.bool_())
    return _any(cand, _re(t["answer"], _MULTIPART_ANSWER))


def _figure_missing(t: pa.Table, pattern: str) -> pa.Array:
    def absent(x: pa.Table) -> pa.Array:
        q = x["problem"]
        in_text = pc.and_(_re(q, _SHOWN_IN_TEXT), _re(q, _WRITTEN_OUT))
        return pc.invert(_any(_re(q, _FIGURE_PRESENT), in_text))

    return _and_on(_re(t["problem"], pattern), t, absent)


def _figure(t: pa.Table, c: FilterConfig) -> pa.Array:
    return _figure_missing(t, _FIGURE_REF)


def _figure_mention(t: pa.Table, c: FilterConfig) -> pa.Array:
    """The signal: any mention of a picture the text does not hold (the reject needs a strong reference)."""
    return _any(_figure_missing(t, _FIGURE_REF), _figure_missing(t, _FIGURE_MENTION))


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
    signal_fn: Callable[[pa.Table, FilterConfig], pa.Array] | None = None  # a wider signal than the reject, if any


STEPS: list[Step] = [
    Step("problem_empty", None, _problem_empty, "problem missing or blank"),
    Step("problem_not_text", None, _problem_not_text, "control characters / replacement chars: binary junk"),
    Step("problem_too_long", None, _problem_too_long, "longer than max_problem_chars"),
    Step("problem_unbalanced_braces", None, _unbalanced, "unescaped { and } do not balance: broken LaTeX"),
    Step("solution_in_problem", None, _solution_in_problem, "the statement carries its solution (a 'Solution' "
         "block or section, or the gold boxed): the answer leaks into the prompt"),
    Step("mcq", "sig_mcq", _mcq, "options (A)...(C), option lines, 'which of the following', letter answer, MCQ"),
    Step("proof", "sig_proof", _proof, "prove/show that with nothing else asked, declared proof, answer 'proof'/'notfound'"),
    Step("yesno", "sig_yesno", _yesno, "answer yes/no/true/false; 'true or false' or 'determine whether' the only ask"),
    Step("multipart", "sig_multipart", _multipart, "two or more marked parts that each ask ((a)/(b), (i)/(ii), "
         "(1)/(2), (I)/(II), 1./2.); parts that list conditions are one question"),
    Step("figure", "sig_figure", _figure, "leans on a figure the text does not contain ('in the figure', 'shown below', "
         "'shaded'); any mention ('as shown', an image tag) sets sig_figure only", _figure_mention),
    Step("declared_invalid", None, _declared_invalid, "the source marks the problem or solution invalid"),
    Step("answer_missing", None, _answer_missing, "no gold answer"),
    Step("answer_too_long", None, _answer_too_long, "gold answer longer than max_answer_chars"),
    Step("answer_prose", None, _answer_prose, "gold answer is prose (three words in a row)"),
]
STEP_NAMES = [s.name for s in STEPS]
SIGNAL_STEPS = [s.name for s in STEPS if s.signal]


READS = ("problem", "answer", "declared_valid", "question_type")  # the record columns the steps read
BATCH_COLUMNS = (*READS, *(s.signal for s in STEPS if s.signal))  # what ``filter_batch`` is sent of a batch


def filter_batch(args: tuple[pa.Table, FilterConfig]) -> tuple[dict[str, pa.Array], pa.Array]:
    """``apply_filters`` for a worker process: ``args`` is a batch's ``BATCH_COLUMNS`` (not the whole record: less
    to send) and the config; returns the signal columns it filled and the reasons."""
    t, cfg = args
    t, reason = apply_filters(t, cfg)
    return {s.signal: t[s.signal] for s in STEPS if s.signal and s.name not in cfg.skip}, reason


def apply_filters(t: pa.Table, cfg: FilterConfig) -> tuple[pa.Table, pa.Array]:
    """Signals and first-firing reason for a batch.

    Returns the table with ``sig_*`` columns filled and an array of reasons (null = passes every step).
    Steps in ``cfg.flag_only`` fill their signal and reject nothing; steps in ``cfg.skip`` do neither.
    """
    reason = pa.nulls(len(t), pa.string())
    masks = []
    for step in STEPS:
        if step.name in cfg.skip:
            continue
        mask = step.fn(t, cfg)
        if isinstance(mask, pa.ChunkedArray):
            mask = mask.combine_chunks()
        if step.name not in cfg.flag_only:
            masks.append((step, mask))
        if step.signal:
            sig = step.signal_fn(t, cfg) if step.signal_fn else mask
            t = t.set_column(t.schema.get_field_index(step.signal), step.signal, sig)
    for step, mask in reversed(masks):  # first step in order wins
        reason = pc.if_else(mask, pa.scalar(step.name), reason)
    return t, reason
