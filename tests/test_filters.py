"""Each filter step on hand-written rows: the exact reason, and the signal columns."""

from __future__ import annotations

import pytest

from curate.clean.filters import STEP_NAMES, FilterConfig, apply_filters
from curate.core.schema import Record, records_to_table


def _reason(problem, answer="5", qtype=None, cfg=None, valid=None):
    cfg = cfg or FilterConfig()
    t = records_to_table([Record(id="0" * 16, source="t", source_id="0", origin="m", problem=problem, answer=answer,
                                 question_type=qtype, declared_valid=valid)])
    t, reason = apply_filters(t, cfg)
    return reason[0].as_py(), t


@pytest.mark.parametrize(
    "problem, answer, qtype, expected",
    [
        # --- keep
        ("What is $2+3$?", "5", None, None),
        ("Let $A$, $B$, $C$ be points; dot(A); find $AB$.", "5", None, None),
        ("Find $f(a)$ when (a) is odd", "5", None, None),
        # --- multiple choice
        ("Pick one: (A) 1 (B) 2 (C) 3 (D) 4", "2", None, "mcq"),
        (r"$\textbf{(A)}\ 10\qquad\textbf{(B)}\ 12\qquad\textbf{(C)}\ 15$", "10", None, "mcq"),
        ("The value is\nA. 6\nB. 9\nC. 12", "9", None, "mcq"),
        ("Which of the following is prime?", "29", None, "mcq"),
        ("Name the largest.", "C", None, "mcq"),
        ("Name the largest.", r"\text{(E)}", None, "mcq"),
        ("How many?", "4", "MCQ", "mcq"),
        # asy code is not options
        ("[asy] dot(A);dot(B);dot(C); [/asy] Find the area.", "4", None, None),
        # --- proofs
        ("Prove that $\\sqrt 2$ is irrational.", "proof", None, "proof"),
        ("Show that $n^2 \\ge n$.", "1", None, "proof"),
        ("Find all $f$.", "notfound", None, "proof"),
        ("Find all $f$.", "f(x)=x", "proof", "proof"),
        # --- yes/no
        ("Is 91 prime?", "No", None, "yesno"),
        ("Is 7 prime?", r"\text{Yes}", None, "yesno"),
        ("True or false: $1<2$.", "1", None, "yesno"),
        # --- multi-part
        ("(a) Find $x$. (b) Find $y$.", "3", None, "multipart"),
        ("Solve.\n(i) $x+1=2$ (ii) $x+2=4$", "1", None, "multipart"),
        ("Find x.", "(a) 1 (b) 2", None, "multipart"),
        # --- figures
        ("In the figure shown, find the area.", "4", None, "figure"),
        ("As shown, the circles touch. Find r. AIME 1985 Problem 6.png", "4", None, "figure"),
        ("In the figure, [asy]draw((0,0)--(1,1));[/asy] find the slope.", "1", None, None),
        ("The rows are shown below. $$\\begin{array}{c} 1 \\\\ 1\\ 1 \\end{array}$$ Find row 5's sum.", "16", None, None),
        # --- broken or empty text
        ("   ", "3", None, "problem_empty"),
        ("\x00\x01\x02 x", "3", None, "problem_not_text"),
        ("Compute $\\frac{1}{2 + \\sqrt{3}$.", "1", None, "problem_unbalanced_braces"),
        (r"Let $S = \{1, 2\}$. Find $|S|$.", "2", None, None),
        # --- answers
        ("Compute the sum.", None, None, "answer_missing"),
        ("Compute the sum.", "  ", None, "answer_missing"),
        ("Compute the sum.", "080 or 081 (both were accepted)", None, "answer_prose"),
        ("Compute the sum.", "x" * 201, None, "answer_too_long"),
    ],
)
def test_reasons(problem, answer, qtype, expected):
    assert _reason(problem, answer, qtype)[0] == expected


def test_too_long_threshold():
    # 6000 chars pass, 6001 do not (max_problem_chars=6000)
    assert _reason("a" * 6000)[0] is None
    assert _reason("a" * 6001)[0] == "problem_too_long"
    assert _reason("a" * 101, cfg=FilterConfig(max_problem_chars=100))[0] == "problem_too_long"


def test_declared_invalid():
    assert _reason("What is 1+1?", "2", valid=False)[0] == "declared_invalid"
    assert _reason("What is 1+1?", "2", valid=True)[0] is None


def test_first_step_wins_and_signals_all_recorded():
    # a proof that is also multiple choice and multi-part: reason is the first step (mcq), signals all set
    reason, t = _reason("(a) Prove that x. (b) Which of the following holds? (A) 1 (B) 2 (C) 3", "B")
    assert reason == "mcq"
    row = t.to_pylist()[0]
    assert row["sig_mcq"] and row["sig_proof"] and row["sig_multipart"] and not row["sig_yesno"]


def test_skip_turns_a_step_off():
    assert _reason("Is 91 prime?", "No", cfg=FilterConfig(skip=("yesno",)))[0] is None


def test_bad_config_names_choices():
    with pytest.raises(ValueError, match="unknown filter"):
        FilterConfig(skip=("nope",))
    assert "mcq" in STEP_NAMES
