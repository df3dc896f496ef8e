"""The grader against the verdicts a careful reader gives (``tests/grading_cases.py``), and the pieces of the rule
that correct around math-verify (``curate.difficulty.grading``), by hand."""

from __future__ import annotations

import pytest
from grading_cases import CASES

from curate.difficulty.extraction import clean_box, extract_prediction, final_answer, join_thousands


@pytest.fixture(scope="module")
def verdicts():
    from curate.difficulty import GradingPool

    with GradingPool(2) as pool:
        return pool.grade([g for _, g, _, _ in CASES], [r for _, _, r, _ in CASES])


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_every_case_gets_the_careful_verdict(verdicts, i):
    kind, gold, response, correct = CASES[i]
    assert (verdicts[i] == "correct") == correct, f"{kind}: gold {gold!r}, response {response!r}: {verdicts[i]}"


def test_thousands_lose_their_thin_spaces_and_nothing_else():
    assert join_thousands("10\\,000") == "10000"
    assert join_thousands("1\\,234\\,567") == "1234567"
    assert join_thousands("1\\;234") == "1234" and join_thousands("10{,}000") == "10000"
    assert join_thousands("3{,}14") == "3{,}14"  # a decimal comma
    assert join_thousands("12\\,\\text{cm}") == "12\\,\\text{cm}"  # a space before a unit
    assert join_thousands("10\\,0000") == "10\\,0000"  # not a group of three
    assert join_thousands("f(x)\\,dx") == "f(x)\\,dx"


def test_a_box_states_its_answer_as_a_careful_reader_reads_it():
    assert clean_box("5 = x") == "x = 5" and clean_box("-2 = y_1") == "y_1 = -2"
    assert clean_box("x = 5") == "x = 5" and clean_box("x^2 = 5") == "x^2 = 5" and clean_box("x = y") == "x = y"
    assert clean_box("\\text{The answer is } 7") == "7" and clean_box("\\text{Answer: }7") == "7"
    assert clean_box("\\text{Tuesday}") == "\\text{Tuesday}"  # words that are the answer stay
    assert clean_box("x < 3") == "(-\\infty, 3)" and clean_box("x \\geq -1") == "[-1, \\infty)"
    assert clean_box("2 \\le x < 5") == "[2, 5)" and clean_box("2 < x > 5") == "2 < x > 5"


def test_the_last_stated_answer_is_the_final_answer():
    # a retraction after the box
    assert extract_prediction("$\\boxed{6}$. Wait: 3 + 4 = 7, so the answer is 7.") == ("$7$", "final_anchor")
    # an anchor that only names the boxed value leaves the box
    assert extract_prediction("$x=\\boxed{7}$. The final answer is $x$.") == ("\\boxed{7}", "boxed")
    assert extract_prediction("$\\boxed{x = 7}$. The final answer is $x$.") == ("\\boxed{x = 7}", "boxed")
    assert extract_prediction("$y=\\boxed{7}$. The final answer is $x$.") == ("$x$", "final_anchor")
    # a remark after the anchored answer is not part of it
    assert final_answer("$\\boxed{7}$. The final answer is $7$, and $2\\cdot7=14$ checks out.") == "7"
    assert final_answer("$\\boxed{1}$. The final answer is $3$ and $5$.") == "3, 5"
    # boxes side by side are one answer
    assert extract_prediction("$\\boxed{5}\\boxed{7}$") == ("\\boxed{5}, \\boxed{7}", "boxed")
    # "the answer is" followed by no answer leaves the box
    assert extract_prediction("$\\boxed{6}$. The answer is correct.") == ("\\boxed{6}", "boxed")
