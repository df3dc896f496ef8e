"""Decontam matches each distinct text once per run (``curate.clean.decontam.Verdicts``) over a batch-at-a-time hash
table (``curate.core.arrays.IntTable``): the table against a dict, the slots worked out by hand, and the stage's
shards the same as a match of every row."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from curate.clean.decontam import Verdicts, _id_words
from curate.core.arrays import IntTable


def test_int_table_holds_what_a_dict_holds_through_growth_and_long_probe_runs():
    rng = np.random.default_rng(0)
    keys = rng.integers(-(2**62), 2**62, 50_000, dtype=np.int64)
    keys = np.unique(keys[keys != -1])
    # 300 keys with the same low 20 bits: one probe run of 300 cells
    same_low = (np.arange(1, 301, dtype=np.int64) << 20) | 12345
    keys = np.concatenate([keys, same_low])
    t = IntTable(capacity=16)
    ref: dict[int, int] = {}
    for part in np.array_split(np.arange(len(keys)), 7):  # several puts: the table grows from 16 cells
        t.put(keys[part], part * 3)
        ref.update(zip(keys[part].tolist(), (part * 3).tolist(), strict=True))
    assert len(t) == len(ref) == len(keys)
    assert 2 * len(t.keys) >= 3 * len(keys)  # at most two thirds full
    assert t.get(keys).tolist() == [ref[k] for k in keys.tolist()]
    absent = np.array([7, -2, 12345, (301 << 20) | 12345], np.int64)
    assert t.get(absent).tolist() == [-1, -1, -1, -1]
    with pytest.raises(ValueError, match="held already"):
        t.put(keys[:1], np.array([0]))
    with pytest.raises(ValueError, match="not a key"):
        t.get(np.array([-1]))


def test_id_words_read_the_hex_ids_and_hash_any_other():
    ids = pa.array(["0000000000000001", "00000000000000ff", "ffffffffffffffff", "9a43c917ad04b568"])
    assert _id_words(ids).view(np.uint64).tolist() == [1, 255, 2**64 - 1, 0x9A43C917AD04B568]
    sliced = pa.array(["x", "000000000000000a", "000000000000000b"]).slice(1)  # an offset into the buffers
    assert _id_words(sliced).tolist() == [10, 11]
    odd = pa.array(["000000000000000A", "0000000000000001"])  # not ingest's lowercase hex: hashed, row by row
    assert _id_words(odd).tolist() == [hash("000000000000000A"), hash("0000000000000001")]


def _found(*kinds: str | None) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``match_batch``'s answer for rows whose kinds are given: benchmark "b" and id "b<row>" where one matched."""
    return (pa.array([k and "b" for k in kinds], pa.string()),
            pa.array([k and f"b{i}" for i, k in enumerate(kinds)], pa.string()), pa.array(list(kinds), pa.string()))


def test_verdicts_match_each_text_once_and_copies_take_its_verdict():
    v = Verdicts()
    ids = [f"{i:016x}" for i in range(5)]
    # batch 1: "a", "b", "a" again, "c"
    refs, send, base = v.plan(pa.array(["a", "b", "a", "c"]), pa.array([ids[0], ids[1], ids[0], ids[2]]))
    assert refs.tolist() == [0, 1, 0, 2] and send.tolist() == [0, 1, 3] and base == 0
    # batch 2, planned before batch 1's verdicts are in (the pool holds several batches): "c", "d", "a"; and "a b"
    # under a's id (its exact key drops the space) is another text: matched on its own
    refs2, send2, base2 = v.plan(pa.array(["c", "d", "a", "a b"]), pa.array([ids[2], ids[3], ids[0], ids[0]]))
    assert refs2.tolist() == [2, 3, 0, 4] and send2.tolist() == [1, 3] and base2 == 3
    # a text hash met with another id: never taken as that text (matched, and not remembered over "d")
    refs3, send3, base3 = v.plan(pa.array(["d"]), pa.array([ids[4]]))
    assert refs3.tolist() == [5] and send3.tolist() == [0] and base3 == 5
    assert v.matched == 6
    # the verdicts come back in send order: batch 1's rows 0, 1, 3 ("b" matched), then batch 2's ("d" matched)
    bench, bid, kind = v.resolve(refs, base, _found(None, "exact", None))
    assert kind.to_pylist() == [None, "exact", None, None] and bid.to_pylist() == [None, "b1", None, None]
    bench, bid, kind = v.resolve(refs2, base2, _found("ngram", None))
    assert kind.to_pylist() == [None, "ngram", None, None]
    assert bench.to_pylist() == [None, "b", None, None] and bid.to_pylist() == [None, "b0", None, None]
    # a later batch of copies only: nothing sent, every verdict remembered
    refs4, send4, base4 = v.plan(pa.array(["b", "a", "d", "b"]), pa.array([ids[1], ids[0], ids[3], ids[1]]))
    assert refs4.tolist() == [1, 0, 3, 1] and len(send4) == 0
    bench, bid, kind = v.resolve(refs4, base4, _found())
    assert kind.to_pylist() == ["exact", None, "ngram", "exact"] and bid.to_pylist() == ["b1", None, "b0", "b1"]


def test_verdicts_past_the_limit_are_matched_each_time_and_not_remembered():
    v = Verdicts(limit=2)
    ids = [f"{i:016x}" for i in range(3)]
    refs, send, base = v.plan(pa.array(["a", "b"]), pa.array(ids[:2]))
    assert (refs.tolist(), base) == ([0, 1], 0)
    v.resolve(refs, base, _found("exact", None))
    # "c" twice and "a": "c" is past the limit, so its rows refer to the one row sent (-1 - 0); "a" is remembered
    refs, send, base = v.plan(pa.array(["c", "a", "c"]), pa.array([ids[2], ids[0], ids[2]]))
    assert refs.tolist() == [-1, 0, -1] and send.tolist() == [0] and base == -1
    bench, bid, kind = v.resolve(refs, base, _found("ngram"))
    assert kind.to_pylist() == ["ngram", "exact", "ngram"] and bid.to_pylist() == ["b0", "b0", "b0"]
    refs, send, _ = v.plan(pa.array(["c"]), pa.array([ids[2]]))  # not remembered: sent again
    assert refs.tolist() == [-1] and send.tolist() == [0] and v.slots == 2 and v.matched == 4
