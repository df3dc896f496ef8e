"""Buckets, resampling weights, balanced selection, stratification, curriculum stages: hand-computed cases."""

from __future__ import annotations

import pyarrow as pa
import pytest

from curate.select.curriculum import (
    BucketSpec,
    SelectionError,
    Target,
    bucket_of,
    curriculum_stages,
    largest_remainder,
    sample_weights,
    select,
)


@pytest.mark.parametrize(
    "n_correct, n_graded, bucket",
    [(0, 10, "unsolved"), (10, 10, "solved"), (1, 10, "hard"), (3, 10, "hard"), (4, 10, "medium"), (6, 10, "medium"),
     (7, 10, "easy"), (9, 10, "easy"), (1, 3, "hard"), (2, 3, "medium"), (5, 8, "medium"), (0, 0, "ungraded"),
     (3, 9, "hard"), (6, 9, "medium"), (7, 9, "easy")],
)
def test_bucket_boundaries_at_exact_pass_counts(n_correct, n_graded, bucket):
    assert bucket_of(n_correct, n_graded) == bucket


def test_custom_bucket_edges():
    spec = BucketSpec.parse("hard=0.2,mid=0.5,easy=1")
    assert [bucket_of(n, 10, spec) for n in (1, 2, 3, 5, 6, 9)] == ["hard", "hard", "mid", "mid", "easy", "easy"]
    for bad in ("hard=0.5,easy=0.4", "hard=0.5", "a=0.5,a=1", "solved=0.5,easy=1", "hard=x,easy=1"):
        with pytest.raises(SelectionError):
            BucketSpec.parse(bad)


def test_resampling_weights():
    w = sample_weights(pa.array([0.0, 0.3, 1.0, None, 0.96], pa.float32()), floor=0.05).to_pylist()
    assert w == pytest.approx([1.0, 0.7, 0.05, 1.0, 0.05])
    with pytest.raises(SelectionError):
        sample_weights(pa.array([0.5]), floor=2)


def test_largest_remainder():
    assert largest_remainder(10, {"a": 1, "b": 1, "c": 1}) == {"a": 4, "b": 3, "c": 3}
    assert largest_remainder(7, {"a": 0.5, "b": 0.3, "c": 0.2}) == {"a": 4, "b": 2, "c": 1}  # 3.5, 2.1, 1.4
    assert largest_remainder(0, {"a": 1}) == {"a": 0}
    with pytest.raises(SelectionError):
        largest_remainder(3, {"a": 0, "b": 0})


def _table(spec):
    """spec: list of (n_correct, count, source); k = 10; subjects alternate."""
    rows = []
    for n, count, src in spec:
        for j in range(count):
            rows.append({"id": f"{src}-{n}-{j}", "source": src, "subject": "alg" if j % 2 else "geo",
                         "n_correct": n, "n_graded": 10, "k": 10, "pass_rate": n / 10})
    return pa.Table.from_pylist(rows)


CRAFTED = [(2, 6, "A"), (3, 4, "B"),  # hard: 10 rows, 6 from A and 4 from B
           (5, 3, "A"),  # medium: 3
           (8, 8, "B"),  # easy: 8
           (0, 5, "A"), (10, 4, "B")]  # unsolved 5, solved 4


def test_uniform_selection_with_shortfall_redistributed_and_stratified():
    s = select(_table(CRAFTED), 12, Target.parse("uniform", BucketSpec()), seed=0)
    r = s.report
    # quotas 4/4/4; medium has 3 -> one row short, handed to hard (tie with easy broken by order)
    assert r["by_bucket"]["medium"] == {"available": 3, "target_weight": 0.3333, "asked": 4, "taken": 3, "short": 1}
    assert (r["by_bucket"]["hard"]["taken"], r["by_bucket"]["easy"]["taken"]) == (5, 4)
    assert r["shortfall"] == {"medium": 1} and r["unfilled"] == 0 and r["rows_selected"] == 12
    assert r["excluded"] == {"unsolved": 5, "solved": 4}
    hard = [row for row in s.table.to_pylist() if row["bucket"] == "hard"]
    # 5 hard rows from sources A:6, B:4 -> 3 and 2 (proportional, largest remainder)
    assert sorted(row["source"] for row in hard) == ["A", "A", "A", "B", "B"]
    assert r["by_source"]["A"] == {"available": 9, "taken": 6} and r["by_source"]["B"] == {"available": 12, "taken": 6}
    assert sorted({round(w, 4) for w in s.table["sample_weight"].to_pylist()}) == [0.2, 0.5, 0.7, 0.8]


def test_shortfall_fail_rule_and_impossible_requests():
    t = _table(CRAFTED)
    with pytest.raises(SelectionError, match="medium needs 4, has 3"):
        select(t, 12, Target.parse("uniform", BucketSpec()), shortfall="fail")
    with pytest.raises(SelectionError, match="only 21 eligible"):
        select(t, 50, Target.parse("uniform", BucketSpec()), shortfall="fail")
    s = select(t, 50, Target.parse("uniform", BucketSpec()))
    assert s.report["rows_selected"] == 21 and s.report["unfilled"] == 29
    for bad in ("hard=0,medium=0", "hardest=1", "band:0.9-0.1", "band:x-y", "hard=-1,easy=2"):
        with pytest.raises(SelectionError):
            Target.parse(bad, BucketSpec())
    with pytest.raises(SelectionError, match="missing columns"):
        select(t.drop(["n_graded"]), 3, Target.parse("uniform", BucketSpec()))
    bad = t.set_column(t.column_names.index("n_correct"), "n_correct", pa.array([11] + [1] * (t.num_rows - 1)))
    with pytest.raises(SelectionError, match="inconsistent difficulty"):
        select(bad, 3, Target.parse("uniform", BucketSpec()))


def test_band_is_strict_and_custom_histogram():
    t = _table([(1, 2, "A"), (2, 3, "A"), (9, 2, "B"), (10, 1, "B")])
    s = select(t, None, Target.parse("band:0.1-0.9", BucketSpec()))
    assert s.report["rows_selected"] == 3 and sorted(set(s.table["n_correct"].to_pylist())) == [2]
    assert s.report["excluded"] == {"outside_band": 5}
    c = select(_table(CRAFTED), 10, Target.parse("hard=0.5,medium=0.3,easy=0.2", BucketSpec()))
    assert {k: v["taken"] for k, v in c.report["by_bucket"].items()} == {"hard": 5, "medium": 3, "easy": 2}
    ends = select(_table(CRAFTED), None, Target.parse("unsolved=1,hard=1", BucketSpec()), include_ends=True)
    assert ends.report["by_bucket"]["unsolved"]["taken"] == 5 and ends.report["excluded"]["solved"] == 4


def test_selection_is_deterministic_under_a_seed():
    t = _table(CRAFTED)
    a = select(t, 12, Target.parse("uniform", BucketSpec()), seed=3).table["id"].to_pylist()
    b = select(t, 12, Target.parse("uniform", BucketSpec()), seed=3).table["id"].to_pylist()
    c = select(t, 12, Target.parse("uniform", BucketSpec()), seed=4).table["id"].to_pylist()
    assert a == b and a != c


def test_curriculum_stages_go_easy_to_hard():
    s = select(_table(CRAFTED), None, Target.parse("uniform", BucketSpec()))
    stages = curriculum_stages(s)
    assert [(n, t.num_rows) for n, t in stages] == [("easy", 8), ("medium", 3), ("hard", 10)]


@pytest.mark.parametrize(
    "n_correct, n_graded, k, bucket",
    # timeouts and crashes count as failures: 1 correct of 1 graded out of 10 is hard, not solved
    [(1, 1, 10, "hard"), (3, 3, 10, "hard"), (5, 5, 10, "medium"), (9, 9, 10, "easy"), (10, 10, 10, "solved"),
     (0, 4, 10, "unsolved"), (0, 0, 10, "ungraded")],
)
def test_buckets_count_ungraded_samples_as_failures(n_correct, n_graded, k, bucket):
    assert bucket_of(n_correct, n_graded, k=k) == bucket


def test_rows_with_incomplete_grading_are_reported_apart():
    rows = _table([(2, 3, "A"), (7, 2, "A")]).to_pylist()
    rows[0]["n_graded"] = 8  # two samples timed out
    rows.append({"id": "to", "source": "A", "subject": "geo", "n_correct": 1, "n_graded": 1, "k": 10, "pass_rate": 0.1})
    s = select(pa.Table.from_pylist(rows), None, Target.parse("uniform", BucketSpec()))
    assert s.report["available_by_bucket"] == {"hard": 4, "easy": 2}
    assert s.report["incompletely_graded_by_bucket"] == {"hard": 2}


def test_include_ends_keeps_the_ends():
    t = _table(CRAFTED)
    # uniform: the ends join the balanced mix (5 buckets); without the flag they are excluded
    plain = select(t, None, Target.parse("uniform", BucketSpec()))
    assert plain.report["excluded"] == {"unsolved": 5, "solved": 4} and plain.report["rows_selected"] == 21
    ends = select(t, None, Target.parse("uniform", BucketSpec()), include_ends=True)
    assert ends.report["rows_selected"] == 30 and ends.report["excluded"] == {}
    assert {k: v["taken"] for k, v in ends.report["by_bucket"].items()} == {
        "unsolved": 5, "hard": 10, "medium": 3, "easy": 8, "solved": 4}
    quota = select(t, 10, Target.parse("uniform", BucketSpec()), include_ends=True)
    assert {k: v["asked"] for k, v in quota.report["by_bucket"].items()} == {
        "unsolved": 2, "hard": 2, "medium": 2, "easy": 2, "solved": 2}
    # band: pass rates 0 and 1 join the band
    band = select(t, None, Target.parse("band:0.1-0.9", BucketSpec()), include_ends=True)
    assert band.report["rows_selected"] == 30
    # a custom target must give the ends a weight itself
    with pytest.raises(SelectionError, match="give the ends a weight"):
        select(t, None, Target.parse("hard=1,easy=1", BucketSpec()), include_ends=True)


def test_adaptive_rows_are_bucketed_as_their_estimate_decided():
    """1 correct of 12 (or 16) is "hard" by its counts, but the posterior's largest mass is "unsolved" (0.52 and 0.655
    under the Jeffreys prior): exports and the trainer read the bucket the estimator decided."""
    from curate.difficulty.adaptive import masses
    from curate.select.curriculum import assign_buckets, decided_bucket

    t = pa.table({"id": ["a", "b", "c", "d"], "n_correct": [1, 1, 3, 1], "n_graded": [12, 16, 10, 12],
                  "k": [12, 16, 10, 12], "pass_rate": [1 / 12, 1 / 16, 0.3, 1 / 12],
                  "bucket_masses": [masses(1, 12), masses(1, 16), masses(3, 10), None]})
    assert assign_buckets(t).to_pylist() == ["unsolved", "unsolved", "hard", "hard"]  # a fixed-k row: by its counts
    assert decided_bucket(masses(1, 12), BucketSpec.parse("hard=0.5,easy=1")) is None  # other buckets: the counts
