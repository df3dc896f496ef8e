"""Answer extraction, cleaning and typing; text normal forms, n-gram hashes, escape repair."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from curate.clean.text import content_ids, exact_key, ngram_hashes, repair_escapes
from curate.sources.answers import answer_type, boxed_all, clean_answer, last_boxed


@pytest.mark.parametrize(
    "solution, expected",
    [
        # nested braces
        (r"so the answer is $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
        (r"$\boxed{\left( 3, \frac{\pi}{2} \right)}$", r"\left( 3, \frac{\pi}{2} \right)"),
        # \boxed 5 without braces
        (r"The answer is $\boxed 5$.", "5"),
        # \fbox
        (r"hence \fbox{12}", "12"),
        # several boxes: the last one is the final answer
        (r"first \boxed{3}, finally \boxed{7}", "7"),
        # escaped braces inside a box do not end it
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),
        # an unbalanced last box is skipped, the earlier complete one is used
        (r"\boxed{4} and then \boxed{\frac{1}{2}", "4"),
        ("no box here", None),
        (None, None),
    ],
)
def test_last_boxed(solution, expected):
    assert last_boxed(solution) == expected


def test_boxed_all_order():
    assert boxed_all(r"\boxed{1} x \boxed{2}") == ["1", "2"]


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("$5$", "5"),
        (r"\boxed{42}.", "42"),
        (r"\text{13}", "13"),
        ("  7.  ", "7"),
        (r"\frac{1}{2}", r"\frac{1}{2}"),
        ("", None),
        (None, None),
    ],
)
def test_clean_answer(raw, expected):
    assert clean_answer(raw) == expected


@pytest.mark.parametrize(
    "ans, expected",
    [
        ("5", "integer"), ("-12", "integer"), ("10,080", "integer"), (r"10,\!080", "integer"),
        ("0.5", "number"), (".5", "number"), (r"\$32,\!348", "number"),
        (r"\frac{1}{2}", "fraction"), (r"-\dfrac{9}{7}", "fraction"), ("3/4", "fraction"),
        ("(1,2)", "tuple"), ("[1,2)", "interval"), (r"(-\infty, 2) \cup (3, \infty)", "interval"),
        (r"\{1,2\}", "set"), ("4,6,14,15", "set"),
        ("x=3", "equation"), (r"\text{Monday}", "text"), (r"2x^2+\sqrt{3}", "expression"),
        (None, None), ("  ", None),
    ],
)
def test_answer_type(ans, expected):
    assert answer_type(ans) == expected


def test_exact_key_folds_spacing_not_digits():
    a = pa.array(["Let $x$ , $y$ and $z$", "Let $x$, $y$  and $z$", r"\left( \dfrac{1}{2} \right)", "Let $x$, $y$ and $w$"])
    k = exact_key(a).to_pylist()
    assert k[0] == k[1] == "letx,yandz"
    assert k[2] == r"(\frac{1}{2})"
    ids = content_ids(pa.array(["What is 2+3?", "what is  2+3 ?", "What is 2+4?"])).to_pylist()
    assert ids[0] == ids[1] != ids[2] and len(ids[0]) == 16


def test_ngram_hashes_rows_and_determinism():
    col = pa.array(["a b c d", "a b c d", None, "a b", "x y z"])
    h, r = ngram_hashes(col, 3)
    # "a b c d" has 2 trigrams; "a b" is short -> 1 shingle of its 2 words; "x y z" 1 trigram; null none
    assert r.tolist() == [0, 0, 1, 1, 3, 4]
    assert h[0] == h[2] and h[1] == h[3] and h[0] != h[1]
    h2, _ = ngram_hashes(pa.array(["a b c d"]), 3)
    assert np.array_equal(h2, h[:2])  # same text, same hashes, independent of the batch
    h3, r3 = ngram_hashes(col, 3, short_docs=False)
    assert r3.tolist() == [0, 0, 1, 1, 4]


def test_repair_escapes_only_before_latex_commands():
    col = pa.array(["$8-\x0crac{6}{4-2}$", "tab\tseparated", "$2\times 3$", "x\x15y"])
    fixed, changed = repair_escapes(col)
    assert fixed.to_pylist() == [r"$8-\frac{6}{4-2}$", "tab\tseparated", r"$2\times 3$", "x\x15y"]
    assert changed.to_pylist() == [True, False, True, False]


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("\\[\n\\boxed{\\frac{n+1}{4n-2}}\n\\]", "\\frac{n+1}{4n-2}"),  # Omni-MATH wrappers
        ("\\[\\frac{1}{2}\\]", "\\frac{1}{2}"),
        ("\\(\\boxed{3}\\)", "3"),
        ("\\[ N \\equiv 672 \\pmod{1000} \\]", "N \\equiv 672 \\pmod{1000}"),
    ],
)
def test_clean_answer_strips_display_wrappers(raw, expected):
    assert clean_answer(raw) == expected


def test_distinct_boxes_folds_spelling_only():
    from curate.sources.answers import distinct_boxes

    assert distinct_boxes("so \\boxed{\\frac32}, i.e. \\boxed{\\dfrac{3}{2}}") == ["\\frac32"]
    assert distinct_boxes("$x=\\boxed{-2}$ or $x=\\boxed{1}$") == ["-2", "1"]
    assert distinct_boxes("no box") == []


def test_repair_newline_damage():
    col = pa.array(["x \neq y", "f \nabla g", "line one\nequals two", "a\nu = 3"])
    fixed, changed = repair_escapes(col)
    assert fixed.to_pylist() == ["x \\neq y", "f \\nabla g", "line one\nequals two", "a\nu = 3"]
    assert changed.to_pylist() == [True, True, False, False]
