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
    assert len(t.keys) >= 2 * len(keys)  # at most half full
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


def test_verdicts_match_each_text_once_and_copies_take_its_verdict():
    v = Verdicts()
    ids = [f"{i:016x}" for i in range(5)]
    # batch 1: "a", "b", "a" again, "c"
    slots, send, new = v.plan(pa.array(["a", "b", "a", "c"]), pa.array([ids[0], ids[1], ids[0], ids[2]]))
    assert slots.tolist() == [0, 1, 0, 2] and send.tolist() == [0, 1, 3] and new.tolist() == [0, 1, 2]
    # batch 2, planned before batch 1's verdicts are in (the pool holds several batches): "c", "d", "a"; and "a b"
    # under a's id (its exact key drops the space) is another text: matched on its own
    slots2, send2, new2 = v.plan(pa.array(["c", "d", "a", "a b"]), pa.array([ids[2], ids[3], ids[0], ids[0]]))
    assert slots2.tolist() == [2, 3, 0, 4] and send2.tolist() == [1, 3] and new2.tolist() == [3, 4]
    # a text hash met with another id: never taken as that text
    slots3, send3, _ = v.plan(pa.array(["d"]), pa.array([ids[4]]))
    assert slots3.tolist() == [5] and send3.tolist() == [0]
    # the verdicts come back in send order: batch 1's rows 0, 1, 3 ("b" contaminated), then batch 2's
    v.fill(new, pa.array([None, "aime24", None]), pa.array([None, "7", None]), pa.array([None, "exact", None]))
    v.fill(new2, pa.array(["math500", None]), pa.array(["x/1", None]), pa.array(["ngram", None]))
    bench, bid, kind = v.take(np.array([0, 1, 0, 2, 3, 4, 1]))
    assert kind.to_pylist() == [None, "exact", None, None, "ngram", None, "exact"]
    assert bench.to_pylist() == [None, "aime24", None, None, "math500", None, "aime24"]
    assert bid.to_pylist() == [None, "7", None, None, "x/1", None, "7"]
