"""Dedup planning on crafted inputs (``curate.clean.dedup``, ``curate.clean.dedup_stage``): exact keeps, near pairs and
what keeps them apart, MinHash agreement, gold conflicts, cluster representatives, the loose-pair rule by hand."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from curate.clean.dedup import DedupConfig, minhash, number_keys, plan


def _u64(xs):
    return np.array(xs, dtype=np.uint64)


def test_plan_exact_keeps_best_source_then_first_row():
    # rows 0,2,3 share an id; ranks 5,?,1,1 -> row 2 (rank 1, earliest of the two rank-1 rows) is kept
    ids, ranks = _u64([7, 8, 7, 7]), np.array([5, 0, 1, 1])
    rep, kind = plan(ids, ranks, _u64([0, 0, 0, 0]), _u64([0, 0, 0, 0]), None, DedupConfig(near=False))
    assert rep.tolist() == [2, 1, 2, 2]
    assert kind.tolist() == [1, 0, 0, 1]


def _near(problems, answers=None):
    cfg = DedupConfig()
    col = pa.array(problems)
    sigs = minhash(col, cfg)
    n = len(problems)
    ans = _u64(range(n)) if answers == "distinct" else _u64([0] * n)
    return plan(_u64(range(100, 100 + n)), np.zeros(n, np.int64), ans, number_keys(col), sigs, cfg)


BAG = ("A bag {} 5 red marbles, 3 blue marbles and 2 green marbles. Two marbles are drawn at random without "
       "replacement. What is the probability that both are red? Express your answer as a common fraction.")


def test_near_duplicate_rewording_is_caught():
    rep, kind = _near([BAG.format("holds"), BAG.format("contains"), "What is the capital of France? Name it."])
    assert kind.tolist() == [0, 2, 0] and rep.tolist() == [0, 0, 2]


def test_near_pair_with_different_numbers_or_answers_is_kept():
    other = BAG.format("holds").replace("5 red", "6 red")
    _, kind = _near([BAG.format("holds"), other])
    assert kind.tolist() == [0, 0]  # numbers differ: a different problem
    _, kind = _near([BAG.format("holds"), BAG.format("contains")], answers="distinct")
    assert kind.tolist() == [0, 0]  # answers differ


def test_minhash_agreement_tracks_jaccard():
    cfg = DedupConfig()
    words = [f"w{i}" for i in range(60)]
    a = " ".join(words)
    b = " ".join(words[:45] + [f"z{i}" for i in range(15)])
    sig = minhash(pa.array([a, b, a]), cfg)
    # trigram sets: 58 each, 43 shared -> Jaccard 43/73 = 0.589
    agree = (sig[0] == sig[1]).mean()
    assert abs(agree - 43 / 73) < 0.12
    assert (sig[0] == sig[2]).all()


# --- through the stage, on ingested rows: shingles that keep math, golds compared as math, conflicts --------------
def _dedup(tmp_path, rows, **cfg):

    from curate.core.shards import read_table
    from curate.pipeline import dedup_stage, ingest

    tmp_path.mkdir(parents=True, exist_ok=True)
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "problem": p, "answer": a}) + "\n" for i, (p, a) in enumerate(rows)))
    ingest(str(src), tmp_path / "i")
    m = dedup_stage([tmp_path / "i"], tmp_path / "d", DedupConfig(**cfg))
    folder = tmp_path / "d" / "rejected"
    rows = read_table(folder).to_pylist() if folder.exists() and any(folder.iterdir()) else []
    return m, {r["source_id"]: (r["reject_reason"], r["reject_detail"]) for r in rows}


def test_trig_and_operator_neighbours_are_not_merged(tmp_path):
    """Same golds, one command or bracket apart: different problems (they merged when shingles dropped commands)."""
    _, rej = _dedup(tmp_path, [("Compute $\\tan 180^\\circ$.", "0"), ("Compute $\\sin 180^\\circ$.", "0"),
                               ("Compute $\\cos 45^\\circ$.", "\\frac{\\sqrt{2}}{2}"),
                               ("Compute $\\sin 45^\\circ$.", "\\frac{\\sqrt{2}}{2}"),
                               ("What is $88 \\div (4 \\div 2)$?", "44"), ("What is $88 \\div 4 \\div 2$?", "11")])
    assert rej == {}


def test_golds_are_compared_as_math_and_conflicts_keep_no_row(tmp_path):
    p = "Find the number of positive integers $n < 1000$ such that $n^2 + 1$ is divisible by $13$ and by $17$ too."
    q = "How many ordered pairs $(a, b)$ of positive integers satisfy $a + b = 100$ and $\\gcd(a, b) = 5$ here?"
    m, rej = _dedup(tmp_path, [(p, "073"), (p, "73"), (q, "12"), (q + " ", "6")])
    assert rej["r1"][0] == "dedup_exact"  # 073 is 73: one problem, one row kept
    assert rej["r2"][0] == rej["r3"][0] == "gold_conflict"  # one text, two golds: neither is kept
    assert "12 (generic r2)" in rej["r2"][1] and "6 (generic r3)" in rej["r2"][1]
    assert m.stats["dedup"]["gold_conflict_clusters"] == 1 and m.stats["gold_conflicts"][0]["answers"] == ["12", "6"]
    _, rej = _dedup(tmp_path / "keep", [(q, "12"), (q, "6")], conflicts="keep")
    assert list(rej.values())[0][0] == "dedup_exact"  # conflicts="keep": the best row stays, the conflict is listed


def test_two_transcriptions_of_one_aime_problem_merge_only_with_one_gold(tmp_path):
    a = ("A coin that comes up heads with probability $p > 0$ and tails with probability $1 - p > 0$ independently on "
         "each flip is flipped eight times. Suppose the probability of three heads and five tails is equal to "
         "$\\frac {1}{25}$ of the probability of five heads and three tails. Let $p = \\frac {m}{n}$, where $m$ and $n$ "
         "are relatively prime positive integers. Find $m + n$.")
    b = ("A coin that comes up heads with probability $p > 0$ and tails with probability $1 - p > 0$ independently on "
         "each flip is flipped $8$ times. Suppose that the probability of three heads and five tails is equal to "
         "$\\frac {1}{25}$ of the probability of five heads and three tails. Let $p = \\frac {m}{n}$ where $m$ and $n$ "
         "are relatively prime positive integers. Find $m+n$.")
    _, rej = _dedup(tmp_path / "same", [(a, "11"), (b, "011")])
    assert rej["r1"][0] == "dedup_near"
    _, rej = _dedup(tmp_path / "other", [(a, "11"), (b, "12")])
    assert rej == {}  # a looser pair with two golds is not a conflict: it is not known to be one problem


def test_the_card_lists_gold_conflicts(tmp_path):
    from data_cards.render import write_card

    q = "How many ordered pairs $(a, b)$ of positive integers satisfy $a + b = 100$ and $\\gcd(a, b) = 5$ here?"
    _dedup(tmp_path, [(q, "12"), (q, "6")])
    text = write_card(tmp_path).read_text()
    assert "**Gold conflicts.** 1 problem appears" in text and "| 12 / 6 | generic r0: 12; generic r1: 6 |" in text


def test_an_undecided_gold_pair_neither_merges_nor_conflicts():
    from curate.clean.dedup import clusters

    # rows 0 and 1 state one problem; the gold comparison timed out (neither same nor different)
    ids, ranks = _u64([5, 5]), np.zeros(2, np.int64)
    u, v, one = np.array([1]), np.array([0]), np.array([True])
    rep, kind = clusters(2, u, v, one, ~one, ~one, ~one, one, ids, ranks, DedupConfig())
    assert kind.tolist() == [0, 0]
    rep, kind = clusters(2, u, v, one, ~one, ~one, one, one, ids, ranks, DedupConfig())  # decided different
    assert kind.tolist() == [3, 3]


def test_a_cluster_keeps_its_least_rank_then_tiebreak_then_index():
    from curate.clean.dedup import clusters

    # nodes 0-3 one cluster (strict pairs, one gold), node 4 alone; node 0 shares node 2's content id
    ids, ranks = _u64([7, 8, 7, 9, 10]), np.array([1, 0, 0, 0, 0])
    u, v, t = np.array([1, 2, 3]), np.array([0, 1, 2]), np.ones(3, bool)
    # rank 0 at nodes 1-3; of those, tiebreak 3 at nodes 2 and 3; of those, the lower index: node 2
    rep, kind = clusters(5, u, v, t, ~t, t, ~t, ~t, ids, ranks, DedupConfig(), tiebreak=np.array([0, 9, 3, 3, 7]))
    assert rep.tolist() == [2, 2, 2, 2, 4] and kind.tolist() == [1, 2, 0, 2, 0]
    rep, kind = clusters(5, u, v, t, ~t, t, ~t, ~t, ids, ranks, DedupConfig())  # no tiebreak: the index, node 1
    assert rep.tolist() == [1, 1, 1, 1, 4] and kind.tolist() == [2, 0, 2, 2, 0]
    with pytest.raises(ValueError, match="ranks"):
        clusters(5, u, v, t, ~t, t, ~t, ~t, ids, ranks - 1, DedupConfig())


def test_telling_golds_and_loose_pairs_worked_by_hand():
    """A gold tells one problem from another with two letters or digits or more once lowercased; a loose pair merges
    when both rows declare one year, or its hashes agree on ``telling_threshold`` and its first row's gold tells."""
    from curate.clean.dedup import loose_ok, telling_golds

    golds = pa.array(["", "3", "12", "x", "AB", "-5", " 1/2 ", None, "\\frac{1}{2}"])
    assert telling_golds(golds).tolist() == [False, False, True, False, True, False, True, False, True]
    cfg = DedupConfig()
    assert cfg.telling_threshold == 0.7
    agree = np.array([0.9, 0.9, 0.9, 0.5, 0.5])
    strict = np.array([True, False, False, False, False])
    same_year = np.array([False, False, False, True, False])
    telling = np.array([True, True, False, False, True])
    # strict (not loose); agrees and tells; does not tell; one year; tells but agrees below 0.7
    assert loose_ok(agree, strict, same_year, telling, cfg).tolist() == [False, True, False, True, False]
