"""The bundled sample: programmatic problems with exact answers, plus hand-written hard cases.

Open-Reasoner-Zero also trained on programmatically synthesized tasks; here they are the sample that
the demo and the tests run on, with no download. ``synthetic:n=2000,seed=0,difficulty=1-5,extras=1``
names it as a source:

- kinds: ``arith`` (sums/products), ``linear`` (solve a*x+b=c), ``modpow`` (a^b mod m), ``gcd``,
  ``fracsum`` (p/q + r/s in lowest terms); ``difficulty`` (1-5) sets the size of the numbers and the
  number of terms, and is stored as the row's declared difficulty.
- ``mix=ladder``: the level is drawn first and the problem built for it, so that the level tracks how hard the
  problem is for a small model (calibrated on the bundled SmolLM2-135M with the ``fewshot`` template; rungs in
  ``_ladder``). ``mix=kinds`` (the default) cycles through ``kinds`` and draws the level for each.
- ``extras=1`` appends the hand-written items of ``HANDWRITTEN``: multiple choice, proofs, yes/no,
  multi-part, figure-dependent, missing and unparseable answers, duplicates and a contaminated item;
  each says which reason the pipeline must give it (``expect``), and the tests check exactly that.

Generation is deterministic for a seed (numpy's PCG64).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from curate.core.errors import SourceError
from curate.sources.rows import BATCH_ROWS, rows_to_table

KINDS = ("arith", "linear", "modpow", "gcd", "fracsum")


def _arith(rng: np.random.Generator, d: int) -> tuple[str, str, str]:
    terms = int(rng.integers(2, 2 + d))
    hi = 10 ** min(d, 4)
    xs = [int(x) for x in rng.integers(1, hi, size=terms)]
    if d >= 3 and rng.random() < 0.5:
        a, b = xs[0], xs[1]
        return f"Compute ${a} \\times {b}$.", str(a * b), "multiplication"
    ops = rng.choice(["+", "-"], size=terms - 1)
    expr, val = str(xs[0]), xs[0]
    for op, x in zip(ops, xs[1:], strict=False):
        expr += f" {op} {x}"
        val = val + x if op == "+" else val - x
    return f"What is ${expr}$?", str(val), "arithmetic"


def _linear(rng: np.random.Generator, d: int) -> tuple[str, str, str]:
    hi = 5 * d + 5
    a = int(rng.integers(2, hi))
    x = int(rng.integers(-hi, hi))
    b = int(rng.integers(-hi * 3, hi * 3))
    c = a * x + b
    sign = "+" if b >= 0 else "-"
    return f"Solve for $x$: ${a}x {sign} {abs(b)} = {c}$.", str(x), "algebra"


def _modpow(rng: np.random.Generator, d: int) -> tuple[str, str, str]:
    a = int(rng.integers(2, 10 * d + 3))
    b = int(rng.integers(2, 6 * d + 4))
    m = int(rng.integers(3, 10 * d + 8))
    return f"Find the remainder when ${a}^{{{b}}}$ is divided by ${m}$.", str(pow(a, b, m)), "number theory"


def _gcd(rng: np.random.Generator, d: int) -> tuple[str, str, str]:
    g = int(rng.integers(1, 4 * d + 3))
    a, b = (int(v) * g for v in rng.integers(2, 10 * d + 5, size=2))
    return f"What is the greatest common divisor of ${a}$ and ${b}$?", str(math.gcd(a, b)), "number theory"


def _fracsum(rng: np.random.Generator, d: int) -> tuple[str, str, str]:
    p, r = (int(v) for v in rng.integers(1, 4 * d + 3, size=2))
    q, s = (int(v) for v in rng.integers(2, 6 * d + 5, size=2))
    num, den = p * s + r * q, q * s
    g = math.gcd(num, den)
    num, den = num // g, den // g
    ans = str(num) if den == 1 else f"\\frac{{{num}}}{{{den}}}"
    return (
        f"Compute $\\frac{{{p}}}{{{q}}} + \\frac{{{r}}}{{{s}}}$ and express the answer as a fraction in lowest terms.",
        ans,
        "prealgebra",
    )


_GEN = {"arith": _arith, "linear": _linear, "modpow": _modpow, "gcd": _gcd, "fracsum": _fracsum}
MIXES = ("kinds", "ladder")


def _ladder(rng: np.random.Generator, d: int) -> tuple[str, str, str, str]:
    """A problem of ladder level ``d`` (1 easiest .. 5 hardest): (problem, answer, subject, kind).

    The rungs, with the bundled SmolLM2-135M's mean pass rate per problem family under the ``fewshot``
    template at T=0.7 (8 problems a family, k=10, measured while choosing them; ``dev/ladder.py``
    measures the rungs): 1 a one-digit sum (0.82) or a one-digit number times 10 (0.88); 2 a one-digit
    difference or product (0.59); 3 a two-digit plus a one-digit number (0.33) or ``x + a = b`` with one-digit
    a, x (0.36); 4 two two-digit numbers (0.19), ``2x = b`` (0.19), two-digit minus one-digit (0.12), three
    one-digit terms (0.07); 5 a power's remainder, a gcd, a sum of fractions, ``a*x + b = c`` (0.01).
    """
    def pair(lo: int, hi: int) -> tuple[int, int]:
        a, b = (int(v) for v in rng.integers(lo, hi + 1, size=2))
        return a, b

    pick = float(rng.random())
    if d <= 1:
        a, b = pair(1, 9)
        if pick < 0.2:
            return f"What is ${a} \\times 10$?", str(a * 10), "arithmetic", "times10"
        return f"What is ${a} + {b}$?", str(a + b), "arithmetic", "add"
    if d == 2:
        a, b = sorted(pair(2, 9), reverse=True)
        if pick < 0.5:
            return f"What is ${a} - {b}$?", str(a - b), "arithmetic", "subtract"
        return f"What is ${a} \\times {b}$?", str(a * b), "arithmetic", "multiply"
    if d == 3:
        a, b = int(rng.integers(10, 50)), int(rng.integers(1, 10))
        if pick < 0.5:
            return f"What is ${a} + {b}$?", str(a + b), "arithmetic", "add"
        a, x = pair(1, 9)
        return f"Solve for $x$: $x + {a} = {a + x}$.", str(x), "algebra", "linear"
    if d == 4:
        if pick < 0.25:
            a, b = pair(10, 49)
            return f"What is ${a} + {b}$?", str(a + b), "arithmetic", "add"
        if pick < 0.5:
            x = int(rng.integers(2, 10))
            return f"Solve for $x$: $2x = {2 * x}$.", str(x), "algebra", "linear"
        if pick < 0.75:
            a, b = int(rng.integers(10, 50)), int(rng.integers(1, 10))
            return f"What is ${a} - {b}$?", str(a - b), "arithmetic", "subtract"
        a, b = pair(1, 9)
        c = int(rng.integers(1, 10))
        return f"What is ${a} + {b} + {c}$?", str(a + b + c), "arithmetic", "add"
    kind = ("modpow", "gcd", "fracsum", "linear")[int(pick * 4)]
    problem, answer, subject = _GEN[kind](rng, 3)
    return problem, answer, subject, kind


# Hand-written items: (id, problem, answer, question_type, expected pipeline outcome).
# "keep" means the item is a valid, verifiable problem; anything else is the exact reject reason.
HANDWRITTEN: list[tuple[str, str, str | None, str | None, str]] = [
    ("hw-mcq-1", "Which of the following is a prime number?\n(A) 21 (B) 27 (C) 29 (D) 33 (E) 35", "C", None,
     "mcq"),
    ("hw-mcq-2", "What is $2+2$?\n$\\textbf{(A)}\\ 3\\qquad\\textbf{(B)}\\ 4\\qquad\\textbf{(C)}\\ 5$", "4", None,
     "mcq"),
    ("hw-mcq-3", "The value of $3^2$ is\nA. 6\nB. 9\nC. 12\nD. 27", "B", None, "mcq"),
    ("hw-mcq-4", "How many sides does a hexagon have?", "6", "MCQ", "mcq"),
    ("hw-proof-1", "Prove that there are infinitely many primes.", "proof", None, "proof"),
    ("hw-proof-2", "Let $n$ be a positive integer. Show that $n^3 - n$ is divisible by $6$.", None, None, "proof"),
    ("hw-proof-3", "Find all functions $f$ with $f(x+y)=f(x)+f(y)$ for all reals.", "notfound", "proof", "proof"),
    ("hw-yesno-1", "Is $91$ a prime number?", "No", None, "yesno"),
    ("hw-yesno-2", "True or false: every even integer greater than $2$ is a sum of two primes for $n<100$.",
     "True", None, "yesno"),
    ("hw-multi-1", "(a) Compute $3+4$. (b) Compute $3 \\cdot 4$.", "(a) 7 (b) 12", None, "multipart"),
    # figure references are flagged (sig_figure), not rejected, by default (FilterConfig.flag_only)
    ("hw-figure-1", "In the figure shown, the shaded region has area $12$. Find the side of the square.", "4", None,
     "keep"),
    ("hw-noanswer-1", "Compute the sum of the first $10$ positive integers.", None, None, "answer_missing"),
    ("hw-badanswer-1", "Compute $1/0$ in the extended sense.", "\\frac{1}{", None, "answer_unparseable"),
    ("hw-empty-1", "   ", "3", None, "problem_empty"),
    ("hw-junk-1", "\x00\x01\x02\x03\x04\x05\x06\x07 What \x08\x0b\x0c\x0e", "1", None, "problem_not_text"),
    ("hw-long-1", "Compute $1+1$. " + "This sentence only pads the problem. " * 400, "2", None, "problem_too_long"),
    ("hw-latex-1", "Compute $\\frac{1}{2 + \\sqrt{3}$ exactly.", "2-\\sqrt{3}", None, "problem_unbalanced_braces"),
    ("hw-keep-1", "Find the number of positive divisors of $360$.", "24", None, "keep"),
    ("hw-keep-2", "What is the sum of the interior angles of a pentagon, in degrees?", "540", None, "keep"),
    ("hw-dup-1", "Find  the number of positive divisors of $360$ .", "24", None, "dedup_exact"),
    ("hw-near-1",
     "A bag holds 5 red marbles, 3 blue marbles and 2 green marbles. Two marbles are drawn at random without "
     "replacement. What is the probability that both are red? Express your answer as a common fraction.",
     "\\frac{2}{9}", None, "keep"),
    ("hw-near-2",
     "A bag contains 5 red marbles, 3 blue marbles and 2 green marbles. Two marbles are drawn at random without "
     "replacement. What is the probability that both are red? Express your answer as a common fraction.",
     "\\frac{2}{9}", None, "dedup_near"),
    ("hw-contam-1",
     "A rectangular garden is twice as long as it is wide and its perimeter is 60 meters. What is the area of the "
     "garden, in square meters?", "200", None, "contaminated"),
]

def parse_spec(spec: str) -> dict:
    opts: dict[str, Any] = {"n": 1000, "seed": 0, "difficulty": "1-5", "extras": 1, "kinds": ",".join(KINDS), "mix": "kinds"}
    body = spec.partition(":")[2]
    for part in filter(None, body.split(",")):
        k, _, v = part.partition("=")
        if k not in opts:
            raise SourceError(f"synthetic: unknown option {k!r}; options are {', '.join(opts)}")
        opts[k] = v
    try:
        opts["n"], opts["seed"], opts["extras"] = int(opts["n"]), int(opts["seed"]), int(opts["extras"])
        lo, _, hi = str(opts["difficulty"]).partition("-")
        opts["difficulty"] = (int(lo), int(hi or lo))
    except ValueError as e:
        raise SourceError(f"synthetic: bad option value in {spec!r} ({e})") from e
    if opts["n"] < 1:
        raise SourceError(f"synthetic: n must be >= 1, got {opts['n']} (extras=1 adds the {len(HANDWRITTEN)} hand-written "
                          "items to the n generated ones)")
    kinds = str(opts["kinds"]).replace("+", ",").split(",") if isinstance(opts["kinds"], str) else opts["kinds"]
    unknown = [k for k in kinds if k not in _GEN]
    if unknown:
        raise SourceError(f"synthetic: unknown kind(s) {unknown}; kinds are {', '.join(KINDS)}")
    opts["kinds"] = kinds
    if opts["mix"] not in MIXES:
        raise SourceError(f"synthetic: unknown mix {opts['mix']!r}; mixes are {', '.join(MIXES)}")
    return opts


def generate(n: int, seed: int = 0, difficulty: tuple[int, int] = (1, 5), kinds: list[str] | None = None,
             mix: str = "kinds"):
    """Yield ``n`` dict rows: id, problem, answer, subject, level, difficulty."""
    rng = np.random.default_rng(seed)
    kinds = list(kinds or KINDS)
    for i in range(n):
        d = int(rng.integers(difficulty[0], difficulty[1] + 1))
        if mix == "ladder":
            problem, answer, subject, kind = _ladder(rng, d)
        else:
            kind = kinds[i % len(kinds)]
            problem, answer, subject = _GEN[kind](rng, d)
        yield {"id": f"syn-{seed}-{i}", "problem": problem, "answer": answer, "subject": subject,
               "level": str(d), "difficulty": str(d), "question_type": kind}


def synthetic_batches(spec: str) -> Iterator[pa.Table]:
    opts = parse_spec(spec)
    batch: list = []
    rowno = 0
    for row in generate(opts["n"], opts["seed"], opts["difficulty"], opts["kinds"], opts["mix"]):
        batch.append((rowno, row, None))
        rowno += 1
        if len(batch) >= BATCH_ROWS:
            yield rows_to_table(batch)
            batch = []
    if opts["extras"]:
        for hid, problem, answer, qtype, _ in HANDWRITTEN:
            batch.append((rowno, {"id": hid, "problem": problem, "answer": answer, "question_type": qtype,
                                  "subject": "handwritten", "level": None, "difficulty": None}, None))
            rowno += 1
    if batch:
        yield rows_to_table(batch)
