"""Responses and gold answers with the verdict a careful reader gives, written here (not copied from math-verify's
tests): what ``tests/difficulty/test_grading_cases.py`` holds the grader to, and ``benchmarks/grading_cases.py`` counts.

Each case: (kind, gold, response, correct). The rule they hold the grader to (README, grading): the final answer is
the last one the response states (a box, or an explicit "the answer is X" after it); boxes with nothing or only
separators between them form one answer; inside a box, an equation names its value on either side, and a leading
"the answer is" in words is not part of the answer; thousands may be grouped with commas or thin spaces.
"""

from __future__ import annotations

CASES: list[tuple[str, str, str, bool]] = [
    # thousands separators, in the gold and in the response
    ("thousands", "10\\,000", "So the total is $\\boxed{0}$.", False),
    ("thousands", "10\\,000", "So the total is $\\boxed{10000}$.", True),
    ("thousands", "10\\,000", "So the total is $\\boxed{10,000}$.", True),
    ("thousands", "10\\,000", "So the total is $\\boxed{10{,}000}$.", True),
    ("thousands", "10\\,000", "So the total is $\\boxed{10\\,000}$.", True),
    ("thousands", "1\\,234", "$\\boxed{1234}$", True),
    ("thousands", "1\\,234", "$\\boxed{1}$", False),
    ("thousands", "10000", "$\\boxed{10\\,000}$", True),
    ("thousands", "1234567", "$\\boxed{1\\,234\\,567}$", True),
    ("thousands", "1234567", "$\\boxed{1\\;234\\;567}$", True),
    ("thousands", "10000", "$\\boxed{10\\,001}$", False),
    ("thousands", "3.14", "$\\boxed{3{,}14}$", False),  # a decimal comma is not a thousands separator
    # the final-answer anchor
    ("anchor", "7", "$x=\\boxed{7}$. The final answer is $x$.", True),
    ("anchor", "7", "We get $x = \\boxed{7}$.\nThe final answer is $x$", True),
    ("anchor", "7", "The final answer is $7$, and $2\\cdot7=14$ checks out.", True),
    ("anchor", "7", "The final answer is $7$, and $14$ is twice it.", True),
    ("anchor", "7", "So $\\boxed{7}$. The final answer is $7$, and $2\\cdot7=14$ checks out.", True),
    ("anchor", "3, 5", "The roots are found. The final answer is $3$ and $5$.", True),
    ("anchor", "\\pi", "So the area is $\\boxed{\\pi}$. The final answer is $\\pi$.", True),
    ("anchor", "5", "Then $\\boxed{8}$ but the final answer is $5$.", True),
    # equations in the box, either way round
    ("equation", "5", "$\\boxed{x^2 = 5}$", True),
    ("equation", "5", "$\\boxed{5 = x}$", True),
    ("equation", "5", "$\\boxed{x = 5}$", True),
    ("equation", "5", "$\\boxed{x = 6}$", False),
    ("equation", "5", "$\\boxed{6 = x}$", False),
    ("equation", "-2", "$\\boxed{y = -2}$", True),
    ("equation", "-2", "$\\boxed{-2 = y}$", True),
    # words around the number inside the box
    ("words", "7", "$\\boxed{\\text{The answer is } 7}$", True),
    ("words", "7", "$\\boxed{\\text{Answer: } 7}$", True),
    ("words", "7", "$\\boxed{\\text{The answer is } 8}$", False),
    ("words", "7", "$\\boxed{7 \\text{ apples}}$", True),
    ("words", "\\text{Tuesday}", "$\\boxed{\\text{Tuesday}}$", True),
    # two boxes that form one answer
    ("boxes", "5, 7", "$\\boxed{5}\\boxed{7}$", True),
    ("boxes", "5, 7", "$\\boxed{5}$ $\\boxed{7}$", True),
    ("boxes", "5, 7", "$\\boxed{5}$, $\\boxed{7}$", True),
    ("boxes", "5, 7", "$\\boxed{5}$ and $\\boxed{7}$", True),
    ("boxes", "5, 7", "$\\boxed{5}\\boxed{8}$", False),
    ("boxes", "12", "First $\\boxed{3}$. Then multiply by four to get the result $\\boxed{12}$.", True),
    # a retraction after the box: the last stated answer counts
    ("retraction", "7", "$\\boxed{6}$. Wait, that is wrong: 3 + 4 = 7, so the answer is 7.", True),
    ("retraction", "6", "$\\boxed{6}$. Wait, that is wrong: 3 + 4 = 7, so the answer is 7.", False),
    ("retraction", "7", "$\\boxed{6}$. Wait, that is wrong: so the answer is $7$.", True),
    ("retraction", "6", "$\\boxed{6}$. The answer is correct.", True),
    ("retraction", "6", "$\\boxed{6}$. So the answer is 6, as expected.", True),
    # units written out, percentages, degrees
    ("units", "12", "$\\boxed{12 \\text{ cm}}$", True),
    ("units", "12", "$\\boxed{12\\,\\text{cm}}$", True),
    ("units", "12", "$\\boxed{12 \\text{ meters}}$", True),
    ("units", "12", "$\\boxed{13 \\text{ cm}}$", False),
    ("percent", "25\\%", "$\\boxed{25\\%}$", True),
    ("percent", "25", "$\\boxed{25\\%}$", True),
    ("percent", "25\\%", "$\\boxed{25}$", True),
    ("percent", "25\\%", "$\\boxed{35\\%}$", False),
    ("degrees", "30^\\circ", "$\\boxed{30}$", True),
    ("degrees", "30", "$\\boxed{30^\\circ}$", True),
    ("degrees", "30", "$\\boxed{30^{\\circ}}$", True),
    ("degrees", "30", "$\\boxed{60^\\circ}$", False),
    # intervals and inequalities
    ("interval", "(2, 5)", "$\\boxed{(2, 5)}$", True),
    ("interval", "(2, 5)", "$\\boxed{[2, 5]}$", False),
    ("interval", "[2, 5)", "$\\boxed{[2,5)}$", True),
    ("interval", "(-\\infty, 3)", "$\\boxed{x < 3}$", True),
    ("interval", "(-\\infty, 3]", "$\\boxed{x < 3}$", False),
    ("interval", "x < 3", "$\\boxed{(-\\infty, 3)}$", True),
    ("interval", "x \\le 3", "$\\boxed{x \\leq 3}$", True),
    ("interval", "x \\le 3", "$\\boxed{x < 3}$", False),
    ("interval", "2 \\le x < 5", "$\\boxed{[2, 5)}$", True),
    # answers in words
    ("words", "\\text{yes}", "$\\boxed{\\text{yes}}$", True),
    ("words", "\\text{(B)}", "$\\boxed{\\text{(B)}}$", True),
    ("words", "\\text{(B)}", "$\\boxed{\\text{(C)}}$", False),
    # plus or minus, sets, matrices, fractions, roots
    ("pm", "\\pm 3", "$\\boxed{\\pm 3}$", True),
    ("pm", "\\pm 3", "$\\boxed{3, -3}$", True),
    ("pm", "\\pm 3", "$\\boxed{3}$", False),
    ("set", "\\{1, 2, 3\\}", "$\\boxed{\\{3, 2, 1\\}}$", True),
    ("set", "\\{1, 2, 3\\}", "$\\boxed{\\{1, 2\\}}$", False),
    ("matrix", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
     "$\\boxed{\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}}$", True),
    ("matrix", "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
     "$\\boxed{\\begin{pmatrix} 1 & 3 \\\\ 2 & 4 \\end{pmatrix}}$", False),
    ("fraction", "\\frac{1}{2}", "$\\boxed{0.5}$", True),
    ("fraction", "\\frac{1}{2}", "$\\boxed{\\dfrac12}$", True),
    ("fraction", "\\frac{1}{2}", "$\\boxed{1/2}$", True),
    ("fraction", "\\frac{1}{2}", "$\\boxed{\\frac{1}{3}}$", False),
    ("root", "2\\sqrt{3}", "$\\boxed{\\sqrt{12}}$", True),
    ("root", "2\\sqrt{3}", "$\\boxed{2\\sqrt{2}}$", False),
    # no explicit answer: never "the last number it finds"
    ("unanchored", "7", "Adding 3 and 4 we get 7", False),
    ("unanchored", "7", "Answer: 7", True),
    ("unanchored", "7", "The answer is $7$.", True),
]
