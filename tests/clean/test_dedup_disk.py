"""The on-disk dedup engine decides every row as the in-memory one does: crafted near duplicates across shards and
key ranges, the real files, and a killed run restarted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.clean import dedup_disk
from curate.clean.dedup import DedupConfig, minhash
from curate.clean.dedup_disk import buckets, files, judge, signatures
from curate.clean.dedup_disk import folder as work_folder
from curate.core.shards import read_table, shard_paths
from curate.pipeline import dedup_stage, ingest

STORY = ("A farmer has {a} sheep and {b} goats in a {field} field next to the river. Every morning he counts the "
         "animals, and every evening he moves half of the goats to the barn on the hill. How many animals are in the "
         "field after the evening move if no animal is sold or born?")
TRAIN = ("Two trains leave a station at noon, one heading east at {a} miles per hour and the other heading west at "
         "{b} miles per hour along a straight track. After how many hours will the trains be exactly {c} miles apart "
         "from each other?")

DIGITS = ("{verb} the sum of all the digits of the number $2^{{15}}$ when it is written out in base ten, "
          "without any leading zeros.")

FARM = ("Near the town of {abc}, a farmer keeps {n} sheep and 8 goats in a {field} field next to the river, and "
        "every morning he counts all of his animals. How many animals does he count?")

# (shard, id, problem, answer); the expected fate of each row is in EXPECTED
ROWS = [
    (0, "s1", STORY.format(a=12, b=8, field="green"), "16"),
    (0, "t1", TRAIN.format(a=40, b=60, c=300), "3"),
    (0, "u1", "What is $7 + 5$?", "12"),
    (1, "s2", STORY.format(a=12, b=8, field="large"), "16"),  # one word changed: a near duplicate of s1
    (1, "s3", STORY.format(a=12, b=9, field="green"), "16.5"),  # one number changed: another problem
    (1, "u2", "What is $7 + 5$?", "12"),  # an exact copy of u1
    (2, "t2", TRAIN.format(a=40, b=60, c=300).replace("straight", "long"), "3"),  # a near duplicate of t1
    (2, "u3", "What is $7+5$ ?", "12"),  # the same text up to spaces: an exact copy
    (2, "v1", "Find the remainder when $2^{10}$ is divided by $7$.", "2"),
    (3, "t3", TRAIN.format(a=40, b=60, c=300).replace("noon", "midday"), "3"),  # another near duplicate of t1
    (3, "v2", "Find the remainder when $2^{10}$ is divided by $7$.", "4"),  # the same statement, another gold
    (3, "w1", "Compute $\\gcd(76, 36)$.", "4"),
    (0, "x1", DIGITS.format(verb="Find"), "26"),
    (2, "x2", DIGITS.format(verb="Find"), "26"),  # an exact copy with the same gold: one node for both
    (3, "x3", DIGITS.format(verb="Compute"), "27"),  # the same statement (the ask reworded), another gold
    (0, "y1", FARM.format(abc="$ABC$", n="12", field="green"), "20"),
    (1, "y2", FARM.format(abc="$A B C$", n="1 2", field="green"), "20"),  # the same content id, other tokens
    (2, "y3", FARM.format(abc="$A B C$", n="1 2", field="large"), "20"),  # a near duplicate of y2, not of y1
]
EXPECTED = {"s2": ("dedup_near", "s1"), "u2": ("dedup_exact", "u1"), "u3": ("dedup_exact", "u1"),
            "t2": ("dedup_near", "t1"), "t3": ("dedup_near", "t1"), "v1": ("gold_conflict", None),
            "v2": ("gold_conflict", None), "x1": ("gold_conflict", None), "x2": ("gold_conflict", None),
            "x3": ("gold_conflict", None), "y2": ("dedup_exact", "y1"), "y3": ("dedup_near", "y1")}


def _shards(tmp_path: Path) -> list[Path]:
    """One ingested folder (one shard) per shard number of ROWS."""
    dirs = []
    for s in sorted({r[0] for r in ROWS}):
        src = tmp_path / f"src{s}.jsonl"
        src.write_text("".join(json.dumps({"id": i, "problem": p, "answer": a}) + "\n" for k, i, p, a in ROWS if k == s))
        ingest(str(src), tmp_path / f"i{s}")
        dirs.append(tmp_path / f"i{s}")
    return dirs


def _outcome(folder: Path) -> tuple[list[str], dict]:
    m = json.loads((folder / "manifest.json").read_text())
    fates = {}
    for r in read_table(folder / "rejected").to_pylist():
        fates[r["source_id"].split(":")[-1]] = (r["reject_reason"], r["dedup_cluster"])
    return [s["sha256"] for s in m["kept_shards"] + m["rejected_shards"]], fates


def test_crafted_near_duplicates_across_shards_and_key_ranges(tmp_path, monkeypatch):
    # the near pairs are above the threshold, the one-number variant shares the words: MinHash as the stage sees it
    sig = minhash(pa.array([r[2] for r in ROWS]), DedupConfig())
    agree = lambda a, b: (sig[a] == sig[b]).mean()  # noqa: E731
    assert agree(0, 3) >= 0.8 and agree(1, 6) >= 0.8 and agree(1, 9) >= 0.8 and agree(0, 4) >= 0.8
    assert agree(12, 14) >= 0.5 and agree(16, 17) >= 0.8 and agree(15, 17) < 0.8
    dirs = _shards(tmp_path)
    dedup_stage(dirs, tmp_path / "mem", DedupConfig(engine="memory"))
    dedup_stage(dirs, tmp_path / "disk", DedupConfig(engine="disk", workers=1))
    monkeypatch.setattr(work_folder, "PART_ENTRIES", 3)  # 15 rows: every band split into 8 key ranges
    monkeypatch.setattr(dedup_disk, "JUDGE_PAIRS", 1)  # and each range of rows' pairs judged on its own
    dedup_stage(dirs, tmp_path / "ranges", DedupConfig(engine="disk", workers=1))
    # ... and judged in two worker processes (the ranges shared out by this one)
    dedup_stage(dirs, tmp_path / "split", DedupConfig(engine="disk", workers=2))
    mem, fates = _outcome(tmp_path / "mem")
    ids = {i: None for _, i, _, _ in ROWS}
    kept_ids = {r["source_id"].split(":")[-1]: r["dedup_cluster"] for r in read_table(tmp_path / "mem" / "kept").to_pylist()}
    assert set(kept_ids) == set(ids) - set(EXPECTED)
    for i, (reason, rep) in EXPECTED.items():
        assert fates[i][0] == reason, i
        if rep:  # the duplicate names the content id of the row it was merged into
            assert fates[i][1] == kept_ids[rep], i
    assert _outcome(tmp_path / "disk") == (mem, fates)
    assert _outcome(tmp_path / "ranges") == (mem, fates)
    assert _outcome(tmp_path / "split") == (mem, fates)
    m = json.loads((tmp_path / "ranges" / "manifest.json").read_text())
    # x1-x2 (one content id, one gold, one text) is a single node: x2 gets no signature; u1-u3 (u3's text has other
    # spaces), v1-v2 (two golds) and y1-y2 (one content id, other tokens and numbers) are paired row by row
    assert m["stats"]["dedup_work"] == {"shards": 4, "key_ranges_per_band": 8, "id_groups": 1,
                                        "id_groups_paired_by_row": 3, "rows_with_signatures": len(ROWS) - 1}
    conflicts = sorted(sorted(r["source_id"].split(":")[-1] for r in c["rows"]) for c in m["stats"]["gold_conflicts"])
    assert conflicts == [["v1", "v2"], ["x1", "x2", "x3"]]
    assert not (tmp_path / "ranges" / "work").exists()  # the scratch files go once the stage is done


def test_judge_gives_each_pair_its_verdict_however_the_first_rows_are_read(tmp_path):
    """``Work.judge`` reads the first rows' records shard by shard, in pieces of at most ``chunk`` pairs: a pair's
    share of equal hashes is that of its two rows' signatures (computed here on the rows' texts), and its verdict is
    the same with pieces of one pair or with the pairs in another order."""
    shards = [p for d in _shards(tmp_path) for p in shard_paths(d / "kept")]
    cfg = DedupConfig(engine="disk", workers=1)
    w = dedup_disk.build(shards, tmp_path / "work", cfg, {})
    got = [buckets.band_pairs(w, b) for b in range(cfg.bands)]
    keys = np.unique(np.concatenate([u.astype(np.int64) * w.n + v for u, v in got]))
    u, v = keys // w.n, keys % w.n  # every distinct band pair, in row order
    assert len(u) >= 5 and (v < u).all()
    problems = pa.concat_arrays([pq.read_table(p, columns=["problem"])["problem"].combine_chunks() for p in shards])
    sig = minhash(problems, cfg)  # the rows' signatures, in the stage's row order
    ok, agree, strict = judge.judge_pairs(w, u, v)
    assert (agree == (sig[u] == sig[v]).mean(axis=1)).all()
    assert ok.any() and (agree >= cfg.threshold).any() and (agree < cfg.threshold).any()
    for chunk in (1, 2):
        again = judge.judge_pairs(w, u, v, chunk=chunk)
        assert all((a == b).all() for a, b in zip(again, (ok, agree, strict), strict=True))
    back = judge.judge_pairs(w, u[::-1].copy(), v[::-1].copy())  # later rows out of order: their records found all the same
    assert all((a[::-1] == b).all() for a, b in zip(back, (ok, agree, strict), strict=True))
    assert [len(x) for x in judge.judge_pairs(w, u[:0], v[:0])] == [0, 0, 0]
    w.close()


def test_band_entries_are_grouped_by_key_then_row_even_when_keys_share_their_high_bits():
    """``_by_key`` sorts a word of the keys (high bits) with the positions; keys that share those bits are told apart
    on the whole key, and a key's entries stay in row order."""
    # two shards' runs, each sorted by key: rows 0-4 and 10-12; keys (hi, lo): (5, 1) three times, (5, 2) twice,
    # (9, 0) twice, (7, 7) once (no other entry: dropped)
    entry = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("row", "<i8")])
    seg = np.zeros(8, entry)
    seg["hi"] = [5, 5, 5, 7, 9, 5, 5, 9]
    seg["lo"] = [1, 1, 2, 7, 0, 1, 2, 0]
    seg["row"] = [0, 1, 2, 4, 3, 10, 11, 12]

    def groups(s, at):
        """Each key's rows, in the order ``at`` gives them; the keys must come one group each."""
        keys = list(zip(s["hi"][at].tolist(), s["lo"][at].tolist(), strict=True))
        out: dict = {}
        for i, k in enumerate(keys):
            assert k not in out or keys[i - 1] == k  # contiguous
            out.setdefault(k, []).append(int(s["row"][at[i]]))
        return out

    want = {(5, 1): [0, 1, 10], (5, 2): [2, 11], (9, 0): [3, 12]}
    assert groups(seg, buckets._by_key(seg)) == want
    low = seg.copy()  # small words: every key shares its high bits (all zero) with the others, told apart below
    low["hi"], low["lo"] = [5, 5, 6, 7, 9, 5, 6, 9], 0
    assert groups(low, buckets._by_key(low)) == {(5, 0): [0, 1, 10], (6, 0): [2, 11], (9, 0): [3, 12]}
    assert buckets._by_key(seg[[0, 2, 3]]).tolist() == []  # no shared key
    rng = np.random.default_rng(0)  # against a plain sort on random keys with many shared ones, high bits apart
    for shift, lo in ((58, 3), (0, 1)):  # ... and all in the low bits (one run of many keys)
        r = np.zeros(5000, entry)
        r["hi"] = rng.integers(0, 40, 5000).astype(np.uint64) << np.uint64(shift)
        r["lo"], r["row"] = rng.integers(0, lo, 5000), np.arange(5000)
        order = np.lexsort((r["row"], r["lo"], r["hi"]))
        k = np.r_[False, (r["hi"][order][1:] == r["hi"][order][:-1]) & (r["lo"][order][1:] == r["lo"][order][:-1])]
        assert groups(r, buckets._by_key(r)) == groups(r, order[k | np.r_[k[1:], False]])


def _key_pairs_compiled(segs: list[dict]) -> list | None:
    """``buckets._key_pairs`` of each band range, through the compiled loop (None where it does not load)."""
    from curate.clean.kernels import compiled

    if compiled("pair_loop") is None:
        return None
    return [buckets._key_pairs(seg) for seg in segs]


def _seg(hi, lo, rn) -> dict:
    """Band entries as ``Work._slices`` reads them: a writable uint64 column each."""
    out = {}
    for k, v in (("hi", hi), ("lo", lo), ("rn", rn)):
        out[k] = np.empty(len(v), np.uint64)
        out[k][:] = v
    return out


def test_compiled_key_pairs_give_the_sorted_groups_pairs(real_data):
    """``kernels.pair_loop`` (in a worker process) against ``_by_key`` and ``_groups``: each entry whose key an
    earlier entry holds, with that key's first entry, on crafted keys and on the band entries of MATH test."""
    mix = np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        twin = np.uint64(5) ^ (np.uint64(1) * mix) ^ (np.uint64(2) * mix)  # (twin, 2) has the word of (5, 1)
    # rows 0-7: keys (5, 1) at rows 0, 3, 6; (5, 2) at 1, 7; (twin, 2) at 2, 5 (same word as (5, 1), another key);
    # (9, 9) once (no pair)
    crafted = _seg([5, 5, twin, 5, 9, twin, 5, 5], [1, 2, 2, 1, 9, 2, 1, 2], np.arange(8, dtype=np.uint64) << 32)
    want = {(3, 0), (6, 0), (7, 1), (5, 2)}
    rows = [json.loads(x)["problem"] for x in (real_data / "math_hendrycks/test/test.jsonl").read_text().splitlines()]
    rows = rows + [r + " Explain." for r in rows[:1500]]  # near copies: many shared band keys
    sig = minhash(pa.array(rows), DedupConfig())
    words = np.empty((24, 2, len(rows)), np.uint64)
    signatures._band_words(sig, DedupConfig(), words)
    n = len(rows)
    real = [_seg(files.mix(words[b, 0]), words[b, 1], np.arange(n, dtype=np.uint64) << 32) for b in range(24)]
    rng = np.random.default_rng(0)  # many shared keys, in few buckets and in many
    small = [_seg(rng.integers(0, k, 20_000), rng.integers(0, 2, 20_000), np.arange(20_000, dtype=np.uint64) << 32)
             for k in (3, 5_000)]
    segs = [crafted, *real, *small]
    got = _in_a_worker(_key_pairs_compiled, segs)
    if got is None:
        pytest.skip("numba is not installed here (or GRADUS_NUMBA=0)")
    as_set = lambda ra, rb: set(zip((ra >> np.uint64(32)).tolist(), (rb >> np.uint64(32)).tolist(), strict=True))  # noqa: E731
    assert as_set(*got[0]) == want == as_set(*buckets._key_pairs(crafted))  # here: the numpy twin
    shared = 0
    for seg, (ra, rb) in zip(segs, got, strict=True):
        at = buckets._by_key(seg)
        later, first = buckets._groups([seg["hi"][at], seg["lo"][at]])
        plain = as_set(seg["rn"][at[later]], seg["rn"][at[first]])
        assert len(ra) == len(plain) and as_set(ra, rb) == plain
        shared += len(plain)
    assert shared > 24 * 1000  # the near copies share most of their bands


def _band_files_compiled(folder: str, words: np.ndarray, rows: np.ndarray, numh: np.ndarray,
                         cnt: np.ndarray) -> bool | None:
    """``signatures._save_bands`` into ``folder`` twice in a worker: through ``kernels.band_loop`` (``a``) and through
    its numpy twin (``b``). None where the loop does not load."""
    from curate.clean import kernels

    if kernels.compiled("band_loop") is None:
        return None
    signatures._save_bands(Path(folder), "a", words, DedupConfig(), rows, numh, cnt)
    kernels._BUILT["band_loop"] = None  # the twin
    try:
        signatures._save_bands(Path(folder), "b", words, DedupConfig(), rows, numh, cnt)
    finally:
        del kernels._BUILT["band_loop"]
    return True


def test_compiled_band_files_are_the_numpy_files_byte_for_byte(real_data, tmp_path):
    """``kernels.band_loop`` writes the band files (``.bin`` and ``.cuts.npy``) that the numpy passes write, byte for
    byte, on the signatures of MATH test with near copies (many equal keys) and on no entries at all; and the file
    holds every entry once per band, each range's entries in row order."""
    rows = [json.loads(x)["problem"] for x in (real_data / "math_hendrycks/test/test.jsonl").read_text().splitlines()]
    rows = rows + [r + " Explain." for r in rows[:1500]]
    n = len(rows)
    words = np.empty((24, 2, n), np.uint64)
    signatures._band_words(minhash(pa.array(rows), DedupConfig()), DedupConfig(), words)
    rng = np.random.default_rng(1)
    own = np.sort(rng.choice(3 * n, n, replace=False)).astype(np.int64)  # a shard's own rows, global numbers
    numh, cnt = rng.integers(0, 1 << 63, n).astype(np.uint64), rng.integers(0, 300, n).astype(np.int32)
    for folder, args in ((tmp_path / "real", (words, own, numh, cnt)),
                         (tmp_path / "none", (words[:, :, :0], own[:0], numh[:0], cnt[:0]))):
        folder.mkdir()
        if _in_a_worker(_band_files_compiled, str(folder), *args) is None:
            pytest.skip("numba is not installed here (or GRADUS_NUMBA=0)")
        for suffix in (".bin", ".cuts.npy"):
            assert (folder / f"a{suffix}").read_bytes() == (folder / f"b{suffix}").read_bytes()
    cuts = np.load(tmp_path / "real" / "a.cuts.npy")
    cols = np.fromfile(tmp_path / "real" / "a.bin", np.uint64).reshape(24, 3, n)
    assert cuts.shape == (24, files.RANGES + 1) and (cuts[:, -1] == n).all()
    for b in (0, 23):
        hi, rn = cols[b, 0], cols[b, 2]
        assert np.array_equal(np.sort(hi), np.sort(files.mix(words[b, 0])))
        assert np.array_equal(np.sort(rn >> np.uint64(32)), own.astype(np.uint64))
        top = hi >> np.uint64(64 - files.RANGE_BITS)
        assert (np.diff(top.astype(np.int64)) >= 0).all()  # by range
        same = top[1:] == top[:-1]
        assert (rn[1:][same] > rn[:-1][same]).all()  # rows in order within a range


def _in_a_worker(fn, *args):
    """``fn(*args)`` in a spawned worker process, where the compiled loops may load (``kernels.compiled``)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
        return ex.submit(fn, *args).result()


def test_parts_for_bounds_each_key_range():
    assert work_folder.parts_for(10) == 1
    assert work_folder.parts_for(work_folder.PART_ENTRIES) == 1
    assert work_folder.parts_for(work_folder.PART_ENTRIES + 1) == 2
    assert work_folder.parts_for(10 * work_folder.PART_ENTRIES) == 16  # 10M rows: 16 ranges of 625k entries
    keys = np.sort(np.array([0, 2**62, 2**63 - 1, 2**63, 2**64 - 1], np.uint64))
    assert files.key_ranges(keys, 2).tolist() == [0, 3, 5]  # split on the top bit
    assert files.key_ranges(keys, 4).tolist() == [0, 1, 3, 4, 5]


@pytest.mark.parametrize("where", ["signatures", "judge", "clusters"])
def test_a_killed_dedup_restarts_from_its_shards_and_writes_the_same(tmp_path, monkeypatch, where):
    """Killed while the shards' files are written, while the pairs are judged, or once the pairs are found (their
    band files and records are gone by then: ``drop_pair_inputs``), a run started again writes the same shards."""
    dirs = _shards(tmp_path)
    dedup_stage(dirs, tmp_path / "whole", DedupConfig(workers=1))
    computed: list[int] = []
    real_work = dedup_disk.shard_work

    def spy(job):
        if not (Path(job.work) / f"done_{job.index:05d}.json").exists():
            computed.append(job.index)
            if where == "signatures" and job.index == 2 and computed.count(2) == 1:
                raise KeyboardInterrupt  # killed while the third shard's files are written
        return real_work(job)

    monkeypatch.setattr(dedup_disk, "shard_work", spy)
    if where == "judge":
        monkeypatch.setattr(judge, "judge_pairs", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    if where == "clusters":
        import curate.clean.dedup_stage as stage

        monkeypatch.setattr(stage, "clusters", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        dedup_stage(dirs, tmp_path / "killed", DedupConfig(workers=1))
    assert (tmp_path / "killed" / "work").is_dir() and not (tmp_path / "killed" / "manifest.json").exists()
    monkeypatch.undo()
    monkeypatch.setattr(dedup_disk, "shard_work", spy)
    before = list(computed)
    dedup_stage(dirs, tmp_path / "killed", DedupConfig(workers=1))
    if where == "signatures":
        assert before == [0, 1, 2] and computed[3:] == [2, 3]  # shards 0 and 1 were not computed again
    elif where == "clusters":
        assert before == [0, 1, 2, 3] and computed[4:] == [0, 1, 2, 3]  # their band files and records went
    else:
        assert before == [0, 1, 2, 3] and computed[4:] == []  # every shard's files were reused
    assert _outcome(tmp_path / "killed") == _outcome(tmp_path / "whole")


def test_a_work_folder_of_another_layout_starts_over(tmp_path, monkeypatch):
    """A run killed under an older version left step-1 files of another layout (no ``format.json``, a done marker
    without band entries): the restart empties the folder instead of reading them."""
    dirs = _shards(tmp_path)
    dedup_stage(dirs, tmp_path / "whole", DedupConfig(workers=1))
    monkeypatch.setattr(judge, "judge_pairs", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        dedup_stage(dirs, tmp_path / "killed", DedupConfig(workers=1))
    monkeypatch.undo()
    work = tmp_path / "killed" / "work"
    (work / "format.json").unlink()
    for f in work.glob("done_*.json"):
        f.write_text(json.dumps({"rows": json.loads(f.read_text())["rows"]}))  # the old layout's marker
    dedup_stage(dirs, tmp_path / "killed", DedupConfig(workers=1))
    assert _outcome(tmp_path / "killed") == _outcome(tmp_path / "whole")


@pytest.mark.realdata
def test_disk_engine_gives_the_in_memory_clusters_on_the_real_files(real_data, tmp_path):
    """MATH test, DeepScaleR's MATH train and AIME, the Kaggle AIME file and its AIMO-2 variant, one shard each:
    exact and near duplicates, rewordings and gold conflicts across files. Both engines write the same shards and
    report the same clusters; the disk engine computes the shards' signatures in two processes."""
    files = ["math_hendrycks/test/test.jsonl", "deepscaler/train/math.json", "deepscaler/train/aime.json",
             "aime_1983_2024/AIME_Dataset_1983_2024.kaggle_original.csv",
             "aime_1983_2024/AIME_1983_2025_grpo_aimo2_variant.csv"]
    dirs = []
    for i, rel in enumerate(files):
        ingest(str(real_data / rel), tmp_path / f"i{i}")
        dirs.append(tmp_path / f"i{i}")
    mem = dedup_stage(dirs, tmp_path / "mem", DedupConfig(engine="memory"))
    disk = dedup_stage(dirs, tmp_path / "disk", DedupConfig(engine="disk", workers=2))
    assert mem.stats["dedup"] == disk.stats["dedup"]
    d = disk.stats["dedup"]
    assert d["exact_duplicates"] > 500 and d["near_duplicates"] > 100 and d["gold_conflict_clusters"] >= 1
    assert mem.stats["gold_conflicts"] == disk.stats["gold_conflicts"]
    assert [s["sha256"] for s in mem.kept_shards + mem.rejected_shards] == \
        [s["sha256"] for s in disk.kept_shards + disk.rejected_shards]
    assert mem.config_hash == disk.config_hash  # the engine is not part of the stage's identity


def test_exhaustive_near_pairs_match_brute_force():
    """``curate.clean.checks``' ground truth (prefix filtering) finds every pair a brute-force comparison of
    all pairs finds, with the same Jaccard."""
    from curate.clean.checks import true_pairs

    rng = np.random.default_rng(3)
    base = [rng.choice(40, size=rng.integers(1, 12), replace=False) for _ in range(12)]
    sets = []
    for i in range(80):  # variants of a few bases: many pairs near every threshold
        s = set(base[i % 12].tolist())
        s ^= set(rng.choice(40, size=rng.integers(0, 4)).tolist())
        sets.append(np.array(sorted(s or {0}), np.uint64))
    for t in (0.5, 0.8):
        a, b, jac = true_pairs(sets, t)
        got = {(int(x), int(y)): round(float(j), 9) for x, y, j in zip(a, b, jac, strict=True)}
        want = {}
        for x in range(len(sets)):
            for y in range(x + 1, len(sets)):
                sx, sy = set(sets[x].tolist()), set(sets[y].tolist())
                j = len(sx & sy) / len(sx | sy)
                if j >= t:
                    want[(x, y)] = round(j, 9)
        assert got == want and len(want) > 20


@pytest.mark.realdata
def test_recall_of_near_duplicates_on_real_rows(real_data, tmp_path):
    """MATH test and DeepScaleR's MATH train, every pair of different content ids at shingle Jaccard >= 0.5 found
    exhaustively (``curate.clean.checks.near_pair_recall``): at >= 0.8 every pair is an LSH candidate (24 bands x 4 rows);
    the pairs with the same numbers, drawing and gold string are merged, but for four "arrange the letters of the
    word NINE / THAT" siblings (another word, the same count: the strict rule wants 80% of the signature, the loose
    one a telling gold)."""
    from curate.clean.checks import near_pair_recall

    ingest(str(real_data / "math_hendrycks/test/test.jsonl"), tmp_path / "i0")
    ingest(str(real_data / "deepscaler/train/math.json"), tmp_path / "i1")
    dedup_stage([tmp_path / "i0", tmp_path / "i1"], tmp_path / "d", DedupConfig(workers=1))
    g = near_pair_recall([tmp_path / "i0", tmp_path / "i1"], tmp_path / "d", 0.5)
    high = g["jac"] >= 0.8
    assert (len(g["jac"]), int(high.sum())) == (1286, 292)
    assert g["candidate"][high].all()
    same = high & ~g["other_numbers"] & ~g["other_drawing"] & ~g["other_gold"]
    assert (int(same.sum()), int(g["merged"][same].sum())) == (14, 10)
    assert g["candidate"].mean() > 0.9  # the S-curve gives 0.88 at J = 0.5


def test_hash_strings_reads_each_string_and_nothing_else():
    # read from the arrow buffers 8 bytes at a time: a string's hash must not depend on its neighbours, on the
    # array's offset or chunks or offset width, and strings that differ in any byte (past the 8th, a zero byte,
    # one byte longer) must differ
    import pyarrow as pa

    from curate.clean.dedup import hash_strings

    a = pa.array(["", "a", "a\x00", "abcdefgh", "abcdefghi", "abcdefgi", "é", "e", "abcdefgh" * 100,
                  "abcdefgh" * 100 + "x", "x" + "abcdefgh" * 100])
    h = hash_strings(a)
    assert len(set(h.tolist())) == len(a)
    assert hash_strings(pa.array(["ab", "XYZW"]))[0] == hash_strings(pa.array(["ab", "QQQQ"]))[0]
    assert hash_strings(pa.array(["ab", "XYZW"]))[0] == hash_strings(pa.array(["ab"]))[0]
    assert (hash_strings(a.slice(3, 4)) == h[3:7]).all()
    assert (hash_strings(pa.chunked_array([a.slice(0, 5), a.slice(5)])) == h).all()
    assert (hash_strings(a.cast(pa.large_string())) == h).all()
    assert hash_strings(pa.array([None], pa.string()))[0] == hash_strings(pa.array(["\x00null"]))[0]
    assert len(hash_strings(pa.array([], pa.string()))) == 0
    assert (hash_strings(a.dictionary_encode()) == h).all()


def test_hash_strings_goes_on_alone_past_its_word_limit(monkeypatch):
    # words past HASH_WORDS are folded one row at a time in Python integers: the same hash as all at once
    import pyarrow as pa

    from curate.clean import dedup

    a = pa.array(["", "a" * 7, "b" * 8, "c" * 9, "d" * 16, "e" * 17, "f" * 40 + "é", "abcdefgh" * 5, None])
    whole = dedup.hash_strings(a)
    monkeypatch.setattr(dedup, "HASH_WORDS", 2)
    assert (dedup.hash_strings(a) == whole).all()


def test_scratch_writes_are_the_bytes_tofile_writes(tmp_path, monkeypatch):
    """``_write`` (64 KB at a time) puts down what ``ndarray.tofile`` does: plain, structured, empty and strided
    arrays, and arrow buffers, across the chunk size."""
    import pyarrow as pa

    monkeypatch.setattr(files, "WRITE_CHUNK", 1000)
    strided = np.arange(3000, dtype=np.uint32).reshape(1000, 3)[:, :2]
    exact = np.zeros(70, dedup_disk.EXACT)
    exact["idh"], exact["row"] = np.arange(70, dtype=np.uint64) * 7919, np.arange(70)
    for i, a in enumerate([np.arange(999, dtype=np.uint64), np.zeros(0, np.uint64), exact, strided]):
        ours, theirs = tmp_path / f"o{i}", tmp_path / f"t{i}"
        with open(ours, "wb") as f:
            files.write(f, a)
        np.ascontiguousarray(a).tofile(theirs)
        assert ours.read_bytes() == theirs.read_bytes()
        assert len(ours.read_bytes()) == a.nbytes
    with open(tmp_path / "buf", "wb") as f:
        files.write(f, pa.py_buffer(bytes(range(256)) * 20))
    assert (tmp_path / "buf").read_bytes() == bytes(range(256)) * 20


def test_decides_keeps_the_near_pairs_that_can_merge_or_conflict(tmp_path):
    """Worked by hand, the caller's rules (``dedup_stage``): a strict pair may merge; a loose pair may when both rows
    declare one year; a pair of one statement whose gold strings differ may be a conflict; a loose pair of other
    years, or of one statement and one gold, links nothing (agreements under ``telling_threshold``: no gold read)."""
    w = dedup_disk.Work(tmp_path, DedupConfig(), [])
    agree = np.array([0.9, 0.6, 0.6, 0.6, 0.6, 0.6])
    strict = np.array([True, False, False, False, False, False])
    years = (np.array([-1, 2001, 2001, -1, -1, -1]), np.array([-1, 2001, 2002, -1, -1, -1]))
    stmt = (np.array([1, 2, 3, 4, 5, 6], np.uint64), np.array([9, 8, 7, 4, 5, 0], np.uint64))
    ans = (np.array([1, 1, 1, 1, 1, 1], np.uint64), np.array([1, 1, 1, 2, 1, 2], np.uint64))
    got = judge.decides(w, np.arange(6), agree, strict, np.ones(6, bool), {"year": years, "stmt": stmt, "ans": ans})
    assert got.tolist() == [True, True, False, True, False, False]
