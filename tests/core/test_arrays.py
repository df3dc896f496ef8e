"""The set operations of ``curate.core.arrays`` against values worked out by hand and against numpy's own, on both
of their paths (a sort, or a mark per possible value; sorted input searched as it is)."""

import numpy as np

from curate.core.arrays import in_sorted, marked_places, search, union, unique_inverse


def test_unique_inverse_by_sort_and_by_marks_give_numpys_answer():
    x = np.array([7, 2, 7, 0, 5, 2], np.int64)
    for bound in (None, 8):
        vals, inv = unique_inverse(x, bound)
        assert vals.tolist() == [0, 2, 5, 7] and inv.tolist() == [3, 1, 3, 0, 2, 1] and vals.dtype == np.int64
    rng = np.random.default_rng(3)
    rows = rng.integers(0, 1_000_000, 300_000)
    want = np.unique(rows, return_inverse=True)
    for bound in (None, 1_000_000):
        vals, inv = unique_inverse(rows, bound)
        assert np.array_equal(vals, want[0]) and np.array_equal(inv, want[1])
    # a bound far above the values' count: the sort (a mark per possible value would cost more)
    vals, inv = unique_inverse(np.array([3, 1 << 40, 3]), 1 << 41)
    assert vals.tolist() == [3, 1 << 40] and inv.tolist() == [0, 1, 0]
    assert unique_inverse(np.zeros(0, np.int64), 10)[0].tolist() == []
    # sorted input (a judge job's rows) is not sorted again, with the same answer
    vals, inv = unique_inverse(np.array([2, 2, 5, 7, 7, 7], np.int32))
    assert vals.tolist() == [2, 5, 7] and inv.tolist() == [0, 0, 1, 2, 2, 2] and inv.dtype == np.int64
    # two arrays at once: the places of each among the values of both
    vals, (pu, pv) = marked_places(10, np.array([7, 2, 7]), np.array([0, 9]))
    assert vals.tolist() == [0, 2, 7, 9] and pu.tolist() == [2, 1, 2] and pv.tolist() == [0, 3]
    assert vals.dtype == pu.dtype == np.int32


def test_union_merges_two_sorted_sets_and_any_other_input():
    assert union(np.array([1, 4, 9]), np.array([2, 4, 10])).tolist() == [1, 2, 4, 9, 10]
    assert union(np.array([5, 1, 5]), np.array([3])).tolist() == [1, 3, 5]
    assert union(np.zeros(0, np.int64), np.zeros(0, np.int64)).tolist() == []


def test_search_and_in_sorted_on_sorted_and_unsorted_input():
    s = np.array([2, 4, 8])
    assert search(s, np.array([1, 4, 9, 8])).tolist() == [0, 1, 2, 2]  # unsorted: by a sort
    assert search(s, np.array([1, 4, 8, 9])).tolist() == [0, 1, 2, 2]  # sorted: searched as it is
    assert in_sorted(np.array([8, 3, 2]), s).tolist() == [True, False, True]
    assert in_sorted(np.array([2, 3, 8]), s).tolist() == [True, False, True]
    assert in_sorted(np.array([5]), np.zeros(0, np.int64)).tolist() == [False]
