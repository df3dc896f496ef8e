"""The gold gate's math-verify worker pool: verdicts, memoization, the plain-number fast path, timeouts."""

from __future__ import annotations

import pytest

from curate.grading import GradingPool, _worker_parse_gold


@pytest.fixture(scope="module")
def pool():
    with GradingPool(workers=2, timeout_s=5) as p:
        yield p


@pytest.mark.parametrize(
    "gold, ok",
    [
        # plain numbers and LaTeX that math-verify parses
        ("60", True), (r"\frac{1}{2}", True), (r"\left( 3, \frac{\pi}{2} \right)", True), (r"10,\!080", True),
        ("142.0", True), (r"x \in [-2,7]", True), (r"\text{Evelyn}", True),
        # only the string fallback comes back: unparseable
        (r"\frac{1}{", False),
    ],
)
def test_parse_gold(pool, gold, ok):
    assert pool.parse_gold([gold])[0].ok is ok


def test_fast_path_agrees_with_math_verify():
    # the pool answers plain numbers without a worker; math-verify itself must agree
    for g in ["0", "-7", "123456789", "3.25", ".5", "+4"]:
        assert _worker_parse_gold(g, 5).ok is True


def test_memoization_counts(pool):
    before = dict(pool.stats)
    res = pool.parse_gold([r"\sqrt{2}", r"\sqrt{2}", r"\sqrt{2}", "5"])
    assert [r.ok for r in res] == [True, True, True, True]
    assert pool.stats["calls"] - before["calls"] == 4
    assert pool.stats["fast_path"] - before["fast_path"] == 1


def test_hard_timeout_is_its_own_outcome():
    # A worker that misses its hard deadline is killed and replaced; its item is a timeout, not "wrong".
    # A negative slack makes every deadline already past, so the kill path runs deterministically.
    import time

    with GradingPool(workers=1, timeout_s=1, slack_s=-5) as p:
        t0 = time.monotonic()
        res = p.parse_gold([r"\sqrt{3}", r"\sqrt{5}"])
        assert [(r.ok, r.reason) for r in res] == [(None, "timeout"), (None, "timeout")]
        assert p.stats["timeouts"] == 2
        assert time.monotonic() - t0 < 30
        p.slack_s = 10  # the replacement worker is healthy
        assert p.parse_gold([r"\sqrt{7}"])[0].ok is True
