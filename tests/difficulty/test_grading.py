"""The gold gate's math-verify worker pool: verdicts, memoization, the plain-number fast path, timeouts."""

from __future__ import annotations

import pytest

from curate.difficulty.grading import GradingPool, _worker_parse_gold


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


# (gold, model response, expected outcome). Gold goes first into verify; the traps are the ones other RL
# projects hit (see ../shared/ENGINES.md): repeated boxes, \text{13}, **73**, thousands separators,
# intervals vs inequalities (math-verify is asymmetric there), equations, nested boxes.
GRADING_TABLE = [
    ("840", r"First \boxed{840} and again \boxed{840}", "correct"),  # read as 840, not 840840
    ("840", r"\boxed{841} no wait \boxed{840}", "correct"),  # the last box wins
    ("840", r"\boxed{840} no wait \boxed{841}", "wrong"),
    ("13", r"\boxed{\text{13}}", "correct"),
    ("73", "The answer is **73**", "correct"),  # markdown bold stripped before parsing; "answer is" anchors it
    ("73", "**Answer: 74**", "wrong"),
    ("1000", r"\boxed{1,000}", "correct"),  # thousands separator
    ("1000", r"\boxed{1{,}000}", "correct"),
    ("12345", r"so the total is \boxed{12,345}.", "correct"),
    (r"\frac{1}{2}", r"\boxed{0.5}", "correct"),
    (r"\frac{1}{2}", r"\boxed{\dfrac{1}{2}}", "correct"),
    ("3", r"\boxed{3.0}", "correct"),
    ("42", r"\boxed{042}", "correct"),  # integer fast path
    ("-2", r"\boxed{-2}", "correct"),
    ("-2", r"\boxed{2}", "wrong"),
    ("5", r"\boxed{x=5}", "correct"),  # an equation's right-hand side
    ("(1,2)", r"\boxed{(1,2)}", "correct"),
    ("(1,2)", r"\boxed{1<x<2}", "wrong"),  # a gold interval needs an interval ...
    ("x>1", r"\boxed{(1,\infty)}", "correct"),  # ... while a gold inequality accepts the interval
    (r"4\sqrt{2}", r"\boxed{4}", "wrong"),
    (r"\frac{1}{2}", r"\boxed{\frac{1}{2}}", "correct"),
    ("2", "<answer>2</answer>", "correct"),  # the R1 template's tag
    # the tag's text is passed as it is, not wrapped in a box (a box made these three wrong)
    ("12", "<answer>12.</answer>", "correct"),
    (r"\frac{1}{2}", r"<answer>$\frac{1}{2}$ cups</answer>", "correct"),
    ("5", "<answer>The answer is 5</answer>", "correct"),
    # bare LaTeX in a tag is read between $...$: \sqrt{2} alone parsed to nothing, 2\pi and (1, 2) to 2
    (r"\sqrt{2}", r"<answer>\sqrt{2}</answer>", "correct"),
    ("2", r"<answer>2\pi</answer>", "wrong"),
    ("2", "<answer>(1, 2)</answer>", "wrong"),
    # no box and no tag: only an anchored answer counts, never "the last number in the text"
    ("2", "so 1+1 = 2", "no_answer"),
    ("7", "x = 3 so y = 7 and we get 7", "no_answer"),
    ("5", "The final answer is $5$.", "correct"),
    ("5", "Answer: 5", "correct"),
    ("2", "I do not know.", "no_answer"),
    # ** between operands is not markdown bold: 2**10 must never become 210
    ("210", r"\boxed{2**10}", "wrong"),
    ("10", r"\boxed{5+5}", "correct"),
]


@pytest.mark.parametrize("gold, response, expected", GRADING_TABLE)
def test_grading_table(pool, gold, response, expected):
    assert pool.grade([gold], [response]) == [expected]


# The final answer span (grading rule 4). The first 13 rows are the shapes of math-verify's own test cases that the
# last-box rule graded wrong although math-verify accepts them: a "find all" answer written as several boxes, and
# an explicit final answer after an intermediate box. Rewritten here with other numbers and words.
FINAL_SPAN_TABLE = [
    ("{3, 5, 11, 17}", r"The primes are $$\boxed{3}, \boxed{5}, \boxed{11}, \boxed{17}$$", "correct"),
    ("(4, 1), (9, 3)", r"$$\boxed{(4, 1)} \quad \text{and} \quad \boxed{(9, 3)}$$", "correct"),
    ("(12, 5), (40, 7)", r"so the pairs are $$\boxed{(12, 5)} \quad \text{and} \quad \boxed{(40, 7)}$$", "correct"),
    ("(2, 4), (5, 5)", r"$$\boxed{(2, 4)} \text{ for part (a) and } \boxed{(5, 5)}$$", "correct"),
    ("m = 30, n = 4", r"$$\boxed{m = 30} \quad \text{and} \quad \boxed{n = 4}$$", "correct"),
    ("{4, 5, 6}", r"\boxed{4} and \boxed{5} and \boxed{6}", "correct"),
    ("{4, 5, 6}", r"\boxed{4},\boxed{5},\boxed{6}", "correct"),
    ("(3,1),(1,3),(-2,-9),(-9,-2)", "The solutions are:\n\n\\[\n\\boxed{(1, 3)}, \\boxed{(3, 1)}, "
     "\\boxed{(-2, -9)}, \\boxed{(-9, -2)}\n\\]", "correct"),
    (r"x_{1}=2+\sqrt{3},\quad x_{2}=2-\sqrt{3}",
     r"$\boxed{\sqrt{3} + 2} \quad \text{and} \quad \boxed{2 - \sqrt{3}}$", "correct"),
    (r"y_{1}=x^{2}-2x+4, y_{2}=2x^{2}+8x+5", r"\($y_1 = \boxed{(x - 1)^2 + 3} \) and \( y_2 = \boxed{2(x + 2)^2 - 3} \)",
     "correct"),
    (r"x_{1}=\frac{1}{3}+\frac{\sqrt{2}}{6},\quad x_{2}=\frac{1}{3}-\frac{\sqrt{2}}{6}",
     r"$\boxed{\dfrac{2 + \sqrt{2}}{6}} \quad \text{and} \quad \boxed{\dfrac{2 - \sqrt{2}}{6}}$", "correct"),
    ("{-3, 2}", r"the fixed points are \[ \boxed{-3} \quad \text{and} \quad \boxed{2}. \]", "correct"),
    ("8640", r"the interest is $\boxed{140}$. Adding it, she has $8,500 + $140 = $8,640. Final Answer: The final answer "
     r"is $8,640$. I hope it is correct.", "correct"),
    # what does not join: repeated boxes are one answer; words other than separators split them; so does distance
    ("7", r"\boxed{7} and \boxed{7}", "correct"),
    ("9", r"\boxed{4} no no no no \boxed{9}", "correct"),
    ("9", r"Check: \boxed{4}. Then, after squaring both sides once more, we get \boxed{9}", "correct"),
    ("9", r"\boxed{4}" + ", and" + " " * 90 + r"\boxed{9}", "correct"),
    ("{4, 9}", r"\boxed{4} no no no no \boxed{9}", "wrong"),
    # a hedge of two answers is a set, and a set is not the single gold
    ("4", r"It is \boxed{4} or \boxed{9}", "wrong"),
    # the anchor after the last box wins, also when it is a bare number; without an answer it does not count
    ("12", r"\boxed{5} so the total is 12. Final answer: 12", "correct"),
    ("5", r"\boxed{5}. That is my final answer.", "correct"),
    # what is not an anchored answer leaves the box alone
    (r"\frac{1}{2}", r"\boxed{\frac{1}{2}}. The final answer is 1/2.", "correct"),
    (r"2\sqrt{3}", r"\boxed{2\sqrt{3}}. The final answer is 2\sqrt{3}.", "correct"),
    ("100000", r"\boxed{10^{5}} so the final answer is 10^5", "correct"),
    ("12", r"\boxed{12}. This is the final answer for part 2 of the question.", "correct"),
    ("12", "\\boxed{12}\nWait, is that really the final answer? Let me check 3 cases.", "correct"),
    ("12", r"\boxed{12}. Note that the final answer does not depend on $n$.", "correct"),
    (r"6\pi", r"\boxed{6\pi}. We leave the final answer in terms of $\pi$.", "correct"),
    ("{1, 2}", r"$\boxed{1}$, $\boxed{2}$. The final answer is $1$ and $2$.", "correct"),
    ("3628800", r"\boxed{3628800}. The final answer is 10!", "correct"),  # a factorial is not the end of a sentence
    ("12", r"\boxed{5}. The final answer is 12.", "correct"),
    # "and", "or" only as words: "andy =" is not a separator
    ("3", r"\boxed{2} andy= \boxed{3}", "correct"),
]


@pytest.mark.parametrize("gold, response, expected", FINAL_SPAN_TABLE)
def test_final_answer_span(pool, gold, response, expected):
    assert pool.grade([gold], [response]) == [expected]


def test_final_answer_of_a_span_is_what_consensus_compares():
    from curate.difficulty.extraction import extract_prediction, final_answer

    assert final_answer(r"\boxed{1}, \boxed{2}") == "1, 2"
    assert extract_prediction(r"\boxed{1}, \boxed{2}") == (r"\boxed{1}, \boxed{2}", "boxed")
    assert final_answer(r"\boxed{5}. Final answer: $x = 6$") == "x = 6"
    assert extract_prediction(r"\boxed{5}. Final answer: $x = 6$") == ("$x = 6$", "final_anchor")
    assert final_answer(r"\boxed{4} no no no no \boxed{9}") == "9"


def test_grade_memoizes_identical_pairs_and_uses_the_integer_fast_path(pool):
    before = dict(pool.stats)
    golds = ["17"] * 4 + [r"\frac{3}{4}"] * 3
    resp = [r"\boxed{17}", r"so \boxed{17}", r"\boxed{16}", r"\boxed{17}", r"\boxed{0.75}", r"\boxed{0.75}", r"\boxed{\frac34}"]
    assert pool.grade(golds, resp) == ["correct", "correct", "wrong", "correct", "correct", "correct", "correct"]
    d = {k: pool.stats[k] - before[k] for k in ("verify_calls", "verify_memo_hits", "verify_fast_path", "verify_sent")}
    # keys: (17,\boxed{17}) x3, (17,\boxed{16}), (3/4,\boxed{0.75}) x2, (3/4,\boxed{\frac34})
    assert d == {"verify_calls": 7, "verify_memo_hits": 3, "verify_fast_path": 2, "verify_sent": 2}


def test_integer_fast_path_agrees_with_math_verify():
    from curate.difficulty.grading import _worker_verify

    pairs = [("42", r"\boxed{42}"), ("42", r"\boxed{042}"), ("42", r"\boxed{43}"), ("-7", r"\boxed{-7}"), ("0", r"\boxed{-0}"),
             ("123456789012345678901234567890", r"\boxed{123456789012345678901234567890}"),
             ("123456789012345678901234567890", r"\boxed{123456789012345678901234567891}")]
    with GradingPool(workers=1) as p:
        fast = p.grade([g for g, _ in pairs], [r for _, r in pairs])
    slow = [_worker_verify((g, r), 5).reason for g, r in pairs]
    assert p.stats["verify_fast_path"] == len(pairs)
    assert fast == slow


def test_pathological_answer_costs_one_timeout_not_the_run():
    # a tower of exponents makes sympy/latex2sympy work for seconds; with a 1 s budget it is a timeout,
    # recorded as such (never "wrong"), and the next answer is graded normally
    tower = r"\boxed{" + "x^" * 300 + "2}"
    with GradingPool(workers=1, timeout_s=1, slack_s=2) as p:
        out = p.grade(["2", "2"], [tower, r"\boxed{2}"])
    assert out[0] == "timeout"
    assert out[1] == "correct"


def test_replies_never_move_between_items_after_a_deadline_miss():
    # Slow items (a tower of exponents: seconds of work) between quick ones, on 2 workers, with a per-item
    # hard deadline of 1 s (timeout 2 s, slack -5 s): each slow item is killed on its own deadline and
    # recorded as timeout; every quick item keeps its own verdict. Before request ids and per-item
    # deadlines, retried chunks went to busy workers and their stale replies were read as the new items'.
    tower = r"\boxed{" + "x^" * 300 + "2}"
    golds = ["2", "4", "2", "6", "7", "8", "9", "2", "5"]
    resp = [tower, r"\boxed{4}", tower, r"\boxed{6}", r"\boxed{x+7-x}", r"\boxed{\frac{16}{2}}", r"\boxed{3^2}", tower,
            r"\boxed{\sqrt{25}}"]
    with GradingPool(workers=2, timeout_s=2, slack_s=-5, chunk=4) as p:
        assert p.item_deadline_s == 1
        out = p.grade(golds, resp)
        assert out == ["timeout", "correct", "timeout", "correct", "correct", "correct", "correct", "timeout", "correct"]
        assert p.stats["timeouts"] == 1  # the three towers are one memoized (gold, prediction) pair
        # the pool is healthy afterwards
        assert p.grade(["3"], [r"\boxed{\frac{6}{2}}"]) == ["correct"]


def test_each_item_of_a_chunk_gets_its_own_deadline():
    # Three distinct slow items in one request: each one is killed after its own deadline, and the quick
    # items after them are still graded (the rest of the request goes back to the queue on a fresh worker).
    towers = [r"\boxed{" + "x^" * (300 + i) + "2}" for i in range(3)]
    golds = ["2", "2", "2", "3", "4"]
    with GradingPool(workers=1, timeout_s=2, slack_s=-5, chunk=8) as p:
        out = p.grade(golds, [*towers, r"\boxed{3}", r"\boxed{2+2}"])
    assert out == ["timeout", "timeout", "timeout", "correct", "correct"]
    assert p.stats["timeouts"] == 3


def test_other_problems_unboxed_solutions_are_never_graded_correct(real_data):
    # The anchored rule on real MATH solutions (see dev/grading_rule.py): (a) another problem's solution
    # with its boxes removed, graded against this problem's gold; (b) a solution cut just before the sentence
    # of its first box, graded against its own gold. Any "correct" is credit for an answer never given; the
    # old any-last-expression tail rule gave 19 of 1,500 and 112 of 1,333 here.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dev"))
    from grading_rule import probes

    foreign, cut = probes(400)
    with GradingPool(workers=2) as p:
        a = p.grade([g for g, _ in foreign], [r for _, r in foreign])
        b = p.grade([g for g, _ in cut], [r for _, r in cut])
    assert len(foreign) == 400 and len(cut) > 300
    assert a.count("correct") == 0 and b.count("correct") == 0


def test_bold_is_stripped_around_text_only():
    from curate.difficulty.extraction import extract_prediction, strip_bold

    assert strip_bold("The answer is **73**.") == "The answer is 73."
    assert strip_bold("**Answer:** 5") == "Answer: 5"
    assert strip_bold(r"\boxed{2**10}") == r"\boxed{2**10}"
    assert strip_bold("2**10 and 3**4") == "2**10 and 3**4"
    assert extract_prediction(r"so \boxed{2**10} is **big**") == (r"\boxed{2**10}", "boxed")
    assert extract_prediction("<answer>$\\frac{1}{2}$ cups</answer>") == ("$\\frac{1}{2}$ cups", "answer_tag")


def test_a_worker_that_died_while_idle_is_replaced():
    with GradingPool(workers=2) as p:
        assert p.grade(["1"], [r"\boxed{\frac{2}{2}}"]) == ["correct"]
        p._workers[0].proc.kill()
        p._workers[0].proc.join()
        out = p.grade(["2", "3", "4"], [r"\boxed{\sqrt{4}}", r"\boxed{\frac{9}{3}}", r"\boxed{5}"])
        assert out == ["correct", "correct", "wrong"]
        assert all(w.proc.is_alive() for w in p._workers)


def test_same_answer_compares_golds_as_math(pool):
    pairs = [("073", "73"), ("\\frac13", "\\frac{1}{3}"), ("x+11", "11+x"), ("\\frac{1}{2}", "0.5"),
             ("12", "6"), ("-2", "1"), ("(3,-5)", "(0,0)")]
    assert pool.same_answer(pairs) == [True, True, True, True, False, False, False]
    assert pool.same_answer([("73", "073")]) == [True]  # order does not matter (memoized as one pair)


def test_same_answer_edge_cases(pool):
    assert pool.same_answer([("", "12"), ("12345678901234567890", "12345678901234567891"), ("0.50", ".5")]) == [
        None, False, True]


def _expanded(n: int) -> str:
    import sympy

    x, y, z, w = sympy.symbols("x y z w")
    return r"\boxed{" + sympy.latex(sympy.expand((x + y + z + w) ** n)) + "}"


def test_a_comparison_that_times_out_is_timeout_and_a_second_pass_alone_decides_it():
    # Two pairs that take math-verify 2-3 s here: the expanded 8th power (parsing it, 2.3 s: right) and two
    # 12th powers that differ (comparing them, 3.1 s: wrong). At a 1 s timeout both are "timeout", never "wrong";
    # graded again one at a time with a longer timeout they get their verdicts, and later grades read those.
    golds = ["(x+y+z+w)^{8}", "(x+y+z+w)^{12}"]
    responses = [_expanded(8), r"\boxed{(x+y+z+w+1)^{12}}"]
    with GradingPool(workers=2, timeout_s=1) as p:
        assert p.grade(golds, responses) == ["timeout", "timeout"]
        assert p.stats["verify_timeouts"] == 2
        assert p.regrade(golds + golds[:1], responses + responses[:1], timeout_s=30) == ["correct", "wrong", "correct"]
        assert (p.stats["regraded"], p.stats["regrade_timeouts"], p.stats["regrade_changed"]) == (2, 0, 2)
        assert p.regrade(golds, responses, timeout_s=30) == ["correct", "wrong"]  # already graded again: not rerun
        assert p.stats["regraded"] == 2
        assert p.timeout_s == 1
        assert p.grade(golds, responses) == ["correct", "wrong"]


def test_gold_verdicts_are_kept_across_runs(tmp_path):
    # The gate parses three distinct golds that are not plain numbers with math-verify (one is unparseable); the next
    # run under the same grader takes those verdicts from the cache and parses none, with the same shards.
    from curate.clean.filters import FilterConfig
    from curate.core.shards import file_sha256, shard_paths
    from curate.pipeline import filter_stage, ingest

    src = tmp_path / "in.jsonl"
    golds = [r"\sqrt{2}", r"x^2+1", r"\frac{1}{", "12", r"\sqrt{2}"]
    src.write_text("".join(f'{{"problem": "Compute the value of item number {i} in the list.", "answer": "{g}"}}\n'
                           .replace("\\", "\\\\") for i, g in enumerate(golds)))
    ingest(str(src), tmp_path / "ing", adapter="generic")
    cfg = FilterConfig(gold_cache=str(tmp_path / "verdicts"))
    first = filter_stage([tmp_path / "ing"], tmp_path / "f1", cfg)
    g1 = first.stats["gold_gate"]
    assert (g1["worker_parsed"], g1["known"], g1["fast_path"]) == (3, 0, 1)
    assert first.rows_kept == 4 and first.rejected_by_reason == {"answer_unparseable": 1}
    second = filter_stage([tmp_path / "ing"], tmp_path / "f2", cfg)
    g2 = second.stats["gold_gate"]
    assert (g2["worker_parsed"], g2["known"], g2["fast_path"]) == (0, 3, 1)
    assert [file_sha256(p) for p in shard_paths(tmp_path / "f1" / "kept")] == [
        file_sha256(p) for p in shard_paths(tmp_path / "f2" / "kept")]
    # one folder, named by the grader version, holds the three verdicts
    from curate.difficulty.verdicts import GoldVerdicts

    assert len(GoldVerdicts(tmp_path / "verdicts", 5).load()) == 3
    assert list((tmp_path / "verdicts").iterdir()) == [GoldVerdicts(tmp_path / "verdicts", 5).dir]
    assert not GoldVerdicts(tmp_path / "verdicts", 1).load()  # another timeout: another folder


def test_workers_leave_ctrl_c_to_their_parent_and_end_quietly_with_it(tmp_path):
    """Ctrl-C reaches the whole process group: the workers ignore it (the parent stops the pool and says so in one
    line; each worker printed a KeyboardInterrupt traceback). A parent killed with -9 takes its workers with it, and
    they print nothing (they lived on and printed BrokenPipeError)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pool = GradingPool(workers=2).start()
    try:
        pids = [w.proc.pid for w in pool._workers]
        for pid in pids:
            os.kill(pid, signal.SIGINT)
        time.sleep(0.5)
        assert all(w.proc.is_alive() for w in pool._workers)
        assert pool.grade(["x^2 + 1"], ["The answer is $\\boxed{1 + x^2}$"]) == ["correct"]  # and they still serve
    finally:
        pool.close()
    script = ("import sys, time\nfrom curate.difficulty.grading import GradingPool\np = GradingPool(workers=2).start()\n"
              "print(' '.join(str(w.proc.pid) for w in p._workers), flush=True)\ntime.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stderr is not None
    workers = [int(x) for x in child.stdout.readline().split()]
    child.kill()
    child.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.2)
    assert not any(_alive(p) for p in workers)
    assert "Traceback" not in child.stderr.read()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False
