"""Dedup planning on crafted inputs, MinHash agreement, and decontamination rules."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from curate.clean.decontam import BenchmarkIndex, DecontamConfig
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


def _in_a_worker(fn, *args):
    """``fn(*args)`` in a spawned worker process, where the compiled loops may load (``kernels.compiled``)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as ex:
        return ex.submit(fn, *args).result()


def _minhash_both(rows: list[str]) -> list[tuple] | None:
    from curate.clean.kernels import compiled

    if compiled("shingle_loop") is None:
        return None
    col, out = pa.array(rows), []
    for cfg in (DedupConfig(), DedupConfig(bands=16, rows=2, seed=7)):
        out.append((minhash(col, cfg), minhash(col, cfg, compiled=False)))
    return out


def _word_hashes_both(texts: list[str]) -> tuple | None:
    import hashlib

    from curate.clean.kernels import compiled
    from curate.clean.text import tokens, word_hashes

    kernel = compiled("blake2b_8")
    if kernel is None:
        return None
    flat = pa.concat_arrays([tokens(pa.array(texts)).flatten(), pa.array(["é" * 64, "x" * 127, "y" * 128, "z" * 129,
                                                                           "q" * 256, "w" * 257])])
    out = np.empty(1, np.uint64)  # the empty string: one block of zeros
    kernel(np.frombuffer(b"\0", np.uint8), np.zeros(2, np.int64), out)
    empty = int.from_bytes(hashlib.blake2b(b"", digest_size=8).digest(), "little")
    return len(pc.unique(flat)), word_hashes(flat, compiled=True), word_hashes(flat), int(out[0]), empty


def test_the_compiled_loops_never_load_in_the_main_process():
    """vLLM 0.32 fails to start in a process where numba is loaded: only pool workers may load the loops."""
    from curate.clean.kernels import compiled

    assert all(compiled(k) is None for k in ("shingle_loop", "blake2b_8", "hash_loop", "token_loop", "digits_loop",
                                             "stmt_loop", "agree_loop", "pair_loop", "rare_loop",
                                             "band_loop"))


def test_compiled_minhash_gives_the_numpy_signatures_bit_for_bit(real_data):
    """The compiled loop (numba, where installed; in a worker process) and the numpy blocks on real statements, with
    rows that have no word, one short shingle, and more shingles than one numpy block holds."""
    from curate.clean import dedup

    rows = [json.loads(x)["problem"] for x in (real_data / "math_hendrycks/test/test.jsonl").read_text().splitlines()]
    rows = rows[:3000] + ["", "$$", "seven", " ".join(f"w{i}" for i in range(3 * dedup.MINHASH_BLOCK))]
    got = _in_a_worker(_minhash_both, rows)
    if got is None:
        pytest.skip("numba is not installed here (or GRADUS_NUMBA=0): only the numpy loop runs")
    for (fast, plain), perms in zip(got, (96, 32), strict=True):
        assert fast.dtype == plain.dtype == np.uint32 and fast.shape == (len(rows), perms)
        assert np.array_equal(fast, plain)
        assert (plain[3000:3002] == np.iinfo(np.uint32).max).all() and (plain[3002] != np.iinfo(np.uint32).max).all()
    assert np.array_equal(got[0][1], minhash(pa.array(rows), DedupConfig()))  # and this process's numpy path


def test_compiled_blake2b_gives_hashlibs_word_hashes(real_data):
    """``kernels.blake2b_8`` against ``hashlib.blake2b(digest_size=8)`` on every distinct token of MATH test and
    Omni-MATH (non-ASCII ones too) and on byte strings at the block edges (0, 127, 128, 129, 256, 257 bytes)."""
    import hashlib

    texts = []
    for rel in ("math_hendrycks/test/test.jsonl", "omni_math_rule/omni_math_rule.jsonl"):
        texts += [json.loads(x)["problem"] for x in (real_data / rel).read_text().splitlines()]
    got = _in_a_worker(_word_hashes_both, texts)
    if got is None:
        pytest.skip("numba is not installed here (or GRADUS_NUMBA=0): only hashlib runs")
    distinct, fast, plain, empty, want_empty = got
    assert distinct > 5_000 and np.array_equal(fast, plain)
    assert int(plain[-1]) == int.from_bytes(hashlib.blake2b(b"w" * 257, digest_size=8).digest(), "little")
    assert empty == want_empty


def _hash_strings_both(cols: list[pa.Array | pa.ChunkedArray]) -> list[tuple] | None:
    from curate.clean.dedup import hash_strings
    from curate.clean.kernels import compiled

    if compiled("hash_loop") is None:
        return None
    return [(hash_strings(c, compiled=True), hash_strings(c)) for c in cols]


def test_compiled_hash_strings_gives_the_numpy_hashes(real_data):
    """``kernels.hash_loop`` against ``hash_strings``' numpy steps on the statements, golds and ids of MATH test and
    Omni-MATH, and on strings at the word edges (0, 7, 8, 9 bytes), past ``HASH_WORDS`` words, with nulls, sliced (an
    array offset), chunked, as large strings and as a column of empty strings only."""
    from curate.clean import dedup

    rows = []
    for rel in ("math_hendrycks/test/test.jsonl", "omni_math_rule/omni_math_rule.jsonl"):
        rows += [json.loads(x) for x in (real_data / rel).read_text().splitlines()]
    edge = pa.array(["", "abcdefg", "abcdefgh", "abcdefghi", None, "é" * 5, "x" * (8 * dedup.HASH_WORDS + 3), "a\x00"])
    problems = pa.array([r["problem"] for r in rows])
    cols = [problems, pa.array([str(r.get("answer")) for r in rows]), pa.array([f"math:{i}" for i in range(len(rows))]),
            edge, edge.slice(2, 5), pa.chunked_array([edge.slice(0, 3), edge.slice(3)]), edge.cast(pa.large_string()),
            pa.array(["", ""]), problems.slice(1000, 3000)]
    got = _in_a_worker(_hash_strings_both, cols)
    if got is None:
        pytest.skip("numba is not installed here (or GRADUS_NUMBA=0): only the numpy steps run")
    for (fast, plain), col in zip(got, cols, strict=True):
        assert fast.dtype == plain.dtype == np.uint64 and len(fast) == len(col)
        assert np.array_equal(fast, plain)
    assert len(set(got[0][1].tolist())) > 0.99 * len(rows)  # statements repeat little: the hashes tell them apart
    assert np.array_equal(got[4][0], got[3][0][2:7])  # a slice hashes as its strings


def _tokens_both(cols: list[pa.Array]) -> list[tuple] | None:
    from curate.clean.kernels import compiled
    from curate.clean.text import tokens

    if compiled("token_loop") is None:
        return None
    return [(tokens(c, compiled=True), tokens(c)) for c in cols]


def test_compiled_tokens_give_the_numpy_tokens(real_data):
    """``kernels.token_loop`` against ``_ascii_tokens``' numpy passes (and the regex passes for the other rows) on the
    canonical statements of MATH test and Omni-MATH, and on rows with no token, nulls, a sliced array and a column of
    empty strings."""
    from curate.clean.text import canonical

    texts = []
    for rel in ("math_hendrycks/test/test.jsonl", "omni_math_rule/omni_math_rule.jsonl"):
        texts += [json.loads(x)["problem"] for x in (real_data / rel).read_text().splitlines()]
    canon = canonical(pa.array(texts))
    edge = pa.array(["", "{}", None, "a", "x^2+y'", "((a1b22))", "12 345", ",,,"])
    cols = [canon, edge, canon.slice(2000, 500), pa.array(["", ""]), edge.slice(1, 4)]
    got = _in_a_worker(_tokens_both, cols)
    if got is None:
        pytest.skip("numba is not installed here (or GRADUS_NUMBA=0): only the numpy passes run")
    for fast, plain in got:
        assert fast.equals(plain)
    assert len(got[0][1]) == len(texts) and pc.sum(pc.list_value_length(got[0][1])).as_py() > 300_000
    assert got[1][1].to_pylist() == [None, None, None, ["a"], ["x", "^", "2", "+", "y", "'"],
                                     ["(", "(", "a", "1", "b", "22", ")", ")"], ["12", "345"], None]


def _numbers_both(cols: list[pa.Array]) -> list[tuple] | None:
    from curate.clean.dedup import numbers_with_counts
    from curate.clean.kernels import compiled

    if compiled("digits_loop") is None:
        return None
    return [(numbers_with_counts(c, c, compiled=True), numbers_with_counts(c, c)) for c in cols]


def test_compiled_numbers_give_the_regex_numbers(real_data):
    """``kernels.digits_loop`` against ``number_strings``' regex passes and their count on the canonical statements of
    MATH test and Omni-MATH, and on rows without digits, with digits at either end, non-ASCII text between digits,
    a sliced array and a column of empty strings."""
    from curate.clean.text import canonical

    texts = []
    for rel in ("math_hendrycks/test/test.jsonl", "omni_math_rule/omni_math_rule.jsonl"):
        texts += [json.loads(x)["problem"] for x in (real_data / rel).read_text().splitlines()]
    canon = canonical(pa.array(texts))
    edge = pa.array(["", "abc", "12", " 3 x 45 ", "7é8", "x9", "0.5 and 10", "٣ 4"])
    got = _in_a_worker(_numbers_both, [canon, edge, canon.slice(3000, 700), pa.array(["", ""])])
    if got is None:
        pytest.skip("numba is not installed here (or GRADUS_NUMBA=0): only the regex passes run")
    for (fast, fast_n), (plain, plain_n) in got:
        assert fast.equals(plain) and fast_n.dtype == plain_n.dtype == np.int32 and np.array_equal(fast_n, plain_n)
    assert got[1][1][0].to_pylist() == ["", "", "12", "3 45", "7 8", "9", "0 5 10", "4"]
    assert got[1][1][1].tolist() == [0, 0, 1, 2, 2, 1, 3, 1]
    assert int(got[0][0][1].sum()) > 30_000


def _canonical_both(cols: list[pa.Array]) -> list[tuple] | None:
    from curate.clean import text
    from curate.clean.kernels import compiled

    kernel = compiled("rare_loop")
    if kernel is None:
        return None
    return [(text.canonical(c, compiled=True), text.canonical(c), text._rare_bits(pc.utf8_lower(pc.fill_null(c, "")),
                                                                                   kernel)) for c in cols]


# each rare rewrite's trigger, its bits worked out by hand (bit j: ``text._RARE_REWRITES[j]``)
_RARE_CASES = [
    ("plain text 12,345", 0), ("see [asy]draw((0,0));[/asy] now", 1 << 0), ("~mrenthusiasm", 1 << 0),
    ("\\dfrac12", 0b111010), ("\\tbinom{4}{2}", 1 << 2), ("\\frac{1}2", 0b111000), ("\\sqrt2", 1 << 6),
    ("90^\\circ", 1 << 7), ("90°", 1 << 7), ("1, 2, \\ldots, n", 1 << 8), ("a...b", 1 << 8), ("a…b", 1 << 8),
    ("\\cdots", (1 << 8) | (1 << 14)), ("x \\leq 1", 1 << 9), ("\\left( x \\right)", 1 << 9), ("x≤1", 1 << 9),
    ("x \\geq 1", 1 << 10), ("x≥1", 1 << 10), ("x \\neq 1", 1 << 11), ("x≠1", 1 << 11), ("2 \\times 3", 1 << 12),
    ("2×3", 1 << 12), ("6 \\div 2", 1 << 13), ("6÷2", 1 << 13), ("2 \\cdot 3", 1 << 14), ("2·3", 1 << 14),
    ("2⋅3", 1 << 14), ("5−3", 1 << 15), ("5–3", 1 << 15), ("3.14", 1 << 16), ("end.", 0), (".5", 0), ("", 0),
    ("\\", 0), ("[asy", 0), ("\\fra", 0), ("\\le", 1 << 9), ("$x$ \\sin 1.5 \\times", (1 << 12) | (1 << 16)),
]


def test_compiled_rare_bits_give_the_regex_canonical_text(real_data):
    """``canonical`` with ``kernels.rare_loop``'s bits (dedup's workers) against its regex path on every statement of
    the real files (MATH test, MATH-500, Omni-MATH, DeepMath, DeepScaleR, Open-Reasoner-Zero, AIME; 27k rows):
    the same text, and each trigger's bits as worked out by hand (also nulls, a sliced array, empty strings)."""
    import csv

    texts = []
    for rel in ("math_hendrycks/test/test.jsonl", "omni_math_rule/omni_math_rule.jsonl", "math500/test.jsonl",
                "deepmath_roll/math_deepmath_deal.jsonl"):
        for line in (real_data / rel).read_text().splitlines():
            row = json.loads(line)
            texts.append(row.get("problem") or row.get("prompt") or "")
    for rel in ("deepscaler/train/math.json", "deepscaler/train/aime.json"):
        texts += [r["problem"] for r in json.loads((real_data / rel).read_text())]
    for rel in ("orz/orz_math_72k_collection_extended.prefix.json", "orz/orz_math_57k_collected.prefix.json"):
        texts += [r[0]["value"] for r in json.loads((real_data / rel).read_text())]
    with open(real_data / "aime_1983_2024/AIME_Dataset_1983_2024.kaggle_original.csv", newline="") as f:
        texts += [r["Question"] for r in csv.DictReader(f)]
    assert len(texts) > 25_000
    col = pa.array(texts)
    edge = pa.array([c for c, _ in _RARE_CASES] + [None, "A \\DFRAC12 ≤ 3.5"])
    got = _in_a_worker(_canonical_both, [col, edge, col.slice(5000, 3000), pa.array(["", ""])])
    if got is None:
        pytest.skip("numba is not installed here (or GRADUS_NUMBA=0): only the regex path runs")
    for fast, plain, _ in got:
        assert fast.equals(plain)
    bits = got[1][2]
    assert bits[: len(_RARE_CASES)].tolist() == [b for _, b in _RARE_CASES]
    assert bits[-2:].tolist() == [0, (1 << 1) | 0b111000 | (1 << 9) | (1 << 16)]  # null; lowercased first
    assert (got[0][2] != 0).mean() > 0.3  # most real rows need some rare rewrite


def _signatures_after_features(rows: list[str]) -> dict[str, int] | None:
    from curate.clean import kernels
    from curate.clean.dedup_disk import buckets, features, signatures

    if not kernels.warm():
        return None
    n = len(rows)
    t = pa.table({"id": [f"i{k}" for k in range(n)], "source": ["math"] * n, "source_id": [str(k) for k in range(n)],
                  "answer": ["1"] * n, "problem": rows, "year": pa.nulls(n, pa.int64())})
    features(t, DedupConfig(), {})
    features(t, DedupConfig(), {}, np.arange(n) % 2 == 0)
    seg = {k: np.empty(n, np.uint64) for k in ("hi", "lo", "rn")}  # as ``Work._slices`` reads them
    for k in seg:
        seg[k][:] = np.arange(n) % 7
    buckets._key_pairs(seg)
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:  # as ``shard_work`` writes a shard's band files
        words = np.empty((24, 2, n), np.uint64)
        signatures._band_words(features(t, DedupConfig(), {})[1], DedupConfig(), words)
        signatures._save_bands(Path(tmp), "bands", words, DedupConfig(), np.arange(n), np.zeros(n, np.uint64),
                               np.zeros(n, np.int32))
    return {k: len(f.signatures) for k, f in kernels._BUILT.items() if f is not None}


def test_each_loop_is_compiled_for_one_set_of_types(real_data):
    """The worker's warm-up compiles (or loads) each loop for the types its callers pass: dedup's features on real
    statements add no second compile (numba compiles anew for a writable array where it had a read-only one)."""
    rows = [json.loads(x)["problem"] for x in (real_data / "math_hendrycks/test/test.jsonl").read_text().splitlines()]
    got = _in_a_worker(_signatures_after_features, rows[:2000])
    if got is None:
        pytest.skip("numba is not installed here (or GRADUS_NUMBA=0)")
    assert got == {"shingle_loop": 1, "blake2b_8": 1, "hash_loop": 1, "token_loop": 1, "digits_loop": 1, "stmt_loop": 1,
                   "agree_loop": 1, "pair_loop": 1, "rare_loop": 1, "band_loop": 1}


def _agree_both(sig: np.ndarray, iu: np.ndarray, iv: np.ndarray) -> tuple | None:
    from curate.clean.kernels import compiled

    kernel = compiled("agree_loop")
    if kernel is None:
        return None
    fast = np.empty(len(iu))
    kernel(np.ascontiguousarray(sig, np.uint32), sig.shape[1], iu.astype(np.int64), iv.astype(np.int64), fast)
    return fast, np.count_nonzero(sig[iu] == sig[iv], axis=1) / sig.shape[1], len(kernel.signatures)


def test_compiled_agreement_gives_the_numpy_shares(real_data):
    """``kernels.agree_loop`` (the disk engine's judge) against numpy's comparison of gathered signatures, on the
    MinHash signatures of MATH test statements: random pairs, each row with itself, and near pairs."""
    rows = [json.loads(x)["problem"] for x in (real_data / "math_hendrycks/test/test.jsonl").read_text().splitlines()]
    rows = rows[:2000] + [r + " Explain." for r in rows[:500]]  # near copies: most values equal, not all
    sig = minhash(pa.array(rows), DedupConfig())
    rng = np.random.default_rng(0)
    iu = np.r_[rng.integers(0, len(rows), 5000), np.arange(100), np.arange(500)]
    iv = np.r_[rng.integers(0, len(rows), 5000), np.arange(100), 2000 + np.arange(500)]
    got = _in_a_worker(_agree_both, sig, iu, iv)
    if got is None:
        pytest.skip("numba is not installed here (or GRADUS_NUMBA=0)")
    fast, plain, compiled_for = got
    assert np.array_equal(fast, plain) and compiled_for == 1
    assert (plain[5000:5100] == 1).all() and 0.5 < plain[5100:].mean() < 1 and plain[:5000].mean() < 0.1


def _statement_hashes_both(cols: list[pa.Array]) -> list[tuple] | None:
    from curate.clean.dedup import statement_hashes
    from curate.clean.kernels import compiled
    from curate.clean.text import tokens

    if compiled("stmt_loop") is None:
        return None
    out = []
    for c in cols:
        toks = tokens(c)
        out.append((statement_hashes(c, toks, compiled=True), statement_hashes(c, toks)))
    return out


def test_compiled_statement_hashes_give_the_joined_keys_hashes(real_data):
    """``kernels.stmt_loop`` against ``hash_strings`` of the joined statement keys on MATH test and Omni-MATH, and on
    rows of question words only, of one token, of tokens crossing the 8-byte words, without tokens, null, sliced."""
    texts = []
    for rel in ("math_hendrycks/test/test.jsonl", "omni_math_rule/omni_math_rule.jsonl"):
        texts += [json.loads(x)["problem"] for x in (real_data / rel).read_text().splitlines()]
    edge = pa.array(["Find the value of", "x", "abcdefg hijklmno pq", "", None, "What is 12+345?", "{} ,,,"])
    cols = [pa.array(texts), edge, edge.slice(2, 4), pa.array(texts).slice(100, 50)]
    got = _in_a_worker(_statement_hashes_both, cols)
    if got is None:
        pytest.skip("numba is not installed here (or GRADUS_NUMBA=0)")
    for fast, plain in got:
        assert fast.dtype == plain.dtype == np.uint64 and np.array_equal(fast, plain)
    assert got[1][1][0] == got[1][1][3]  # only question words: the empty key, as a row without tokens
    assert len(set(got[0][1].tolist())) > 0.99 * len(texts)


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


def _index(tmp_path, rows):
    p = tmp_path / "bench.jsonl"
    import json

    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return BenchmarkIndex.build((f"mybench={p}",), 8)


def test_decontam_exact_ngram_and_boilerplate(tmp_path):
    bench_problem = ("Let N be the number of ordered pairs of positive integers whose product is a perfect "
                     "square below 500. Find the remainder when N is divided by 1000.")
    idx = _index(tmp_path, [{"id": "b1", "problem": bench_problem, "answer": "7"},
                            {"id": "b2", "problem": "What is $1+1$?", "answer": "2"}])
    rows = pa.array([
        "What is $1 + 1$ ?",  # exact after normalization
        "Here: " + bench_problem[:-1] + " please.",  # near-verbatim copy
        "A different problem about circles. Find the remainder when N is divided by 1000.",  # boilerplate only
    ])
    bench, bid, kind = idx.match(rows, DecontamConfig())
    assert kind == ["exact", "ngram", None]
    assert bid[:2] == ["b2", "b1"] and bench[:2] == ["mybench", "mybench"]
    # Open-R1's rule (any shared 8-gram) also flags the boilerplate row
    _, _, kind0 = idx.match(rows, DecontamConfig(min_overlap=0.0, min_shared=1, require_numbers=False))
    assert kind0 == ["exact", "ngram", "ngram"]
    # a reworded copy below min_overlap is still caught when it keeps all the item's numbers (500, 1000)
    reworded = pa.array(["Find the remainder when N is divided by 1000, where N counts the ordered pairs of positive "
                         "integers whose product is a perfect square below 500."])
    assert idx.match(reworded, DecontamConfig())[2] == ["ngram"]
    assert idx.match(reworded, DecontamConfig(min_overlap_numbers=1.0))[2] == [None]


# --- through the stage, on ingested rows: shingles that keep math, golds compared as math, conflicts --------------
def _dedup(tmp_path, rows, **cfg):
    import json

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


def test_tokens_keep_primes_decimals_and_unicode_operators():
    from curate.clean.text import sequence_keys

    keys = sequence_keys(pa.array(["Find $f'(2)$.", "Find $f(2)$.", "What is 3.14 × 2?", "What is 314 × 2?",
                                   "Compute $3 \\times 2$.", "What is 3 × 2?", "1, 2, \\ldots, n \\leq 5",
                                   "1, 2, \\dots, n \\le 5"]))
    assert keys[0] != keys[1] and keys[2] != keys[3]
    assert keys[4] == keys[5] and keys[6] == keys[7]


def test_tokens_of_a_row_do_not_depend_on_the_rows_beside_it():
    # ASCII rows and the others go through different patterns (``_by_ascii``): each row's tokens must be what it
    # gets alone, Unicode letters and digits kept as words, ASCII punctuation and symbols as separators
    from curate.clean.text import tokens

    rows = ["Let $x_1 + y = 3$; find x.", "Für alle α ∈ ℝ: α² ≥ 0, Ünïcödé 12", "AB,CD  (e) {f}", "日本語 テキスト 12",
            "", "3 × 2 ≤ 7"]
    together = tokens(pa.array(rows)).to_pylist()
    assert together == [tokens(pa.array([r])).to_pylist()[0] for r in rows]
    assert together[1][:3] == ["für", "alle", "α"] and together[2] == ["ab", "cd", "(", "e", ")", "f"]
    assert together[3] == ["日本語", "テキスト", "12"]


def test_tokens_cut_from_bytes_match_the_regex_passes(real_data):
    """ASCII rows are tokenized in numpy from their bytes, the others by regex passes: on every statement and solution
    of the real files, the regex passes run on every row give the same lists, nulls included."""
    import json

    from curate.clean.text import _regex_tokens, canonical, tokens

    hand = ["", None, "  ", "a\\sin2x", "12ab34", "x'' + y'", "++--", "\\\\ \\{1\\}", "e^{i\\pi}+1=0", "a2b3c"]
    got = tokens(pa.array(hand, pa.string())).to_pylist()
    assert got[:3] == [None, None, None]
    assert got[3:] == [["a", "sin", "2", "x"], ["12", "ab", "34"], ["x", "'", "'", "+", "y", "'"], ["+", "+", "-", "-"],
                       ["1"], ["e", "^", "i", "pi", "+", "1", "=", "0"], ["a", "2", "b", "3", "c"]]
    texts = list(hand)
    for f in ("math_hendrycks/test/test.jsonl", "omni_math_rule/omni_math_rule.jsonl", "math500/test.jsonl",
              "deepmath_roll/math_deepmath_deal.jsonl"):
        for line in (real_data / f).read_text().splitlines():
            r = json.loads(line)
            texts += [r[k] for k in ("problem", "solution", "prompt") if isinstance(r.get(k), str)]
    canon = canonical(pa.array(texts, pa.string()))
    fast, slow = tokens(None, canon), _regex_tokens(canon)
    assert len(texts) > 20_000
    assert fast.to_pylist() == slow.to_pylist()
    assert fast.is_null().to_pylist() == slow.is_null().to_pylist()


def test_decontam_keeps_template_siblings_and_other_figures(tmp_path):
    import json

    bench = tmp_path / "b.jsonl"
    item = ("Let $f(x) = 2x - 3$ and $g(x) = x + 1$. What is the value of $f(1 + g(2))$ when both are applied "
            "in this order?")
    fig = "The graph of $y = f(x)$ is shown below. [asy]draw((0,0)--(1,2));[/asy] Find $f(1)$."
    bench.write_text(json.dumps({"id": "b1", "problem": item}) + "\n" + json.dumps({"id": "b2", "problem": fig}) + "\n")
    idx = BenchmarkIndex.build((f"b={bench}",), 8)
    rows = pa.array([item.replace("g(2)", "g(5)"),  # a sibling: the numbers of the item are not all there
                     item.replace("$f(x) = 2x - 3$", "\\(f(x) = 2x - 3\\)"),  # a copy
                     fig.replace("(1,2)", "(1,3)"),  # the same words around another drawing
                     fig])
    _, bid, kind = idx.match(rows, DecontamConfig())
    assert kind == [None, "exact", None, "exact"] and bid[1] == "b1" and bid[3] == "b2"


def test_decontam_refuses_rows_whose_ids_are_not_content_ids(tmp_path):
    """Exact matches compare the rows' ids with the benchmark items' content ids: shards whose ids are something
    else (not written by ingest) would miss every exact copy, so the stage refuses them with a clear error."""
    import json

    import pyarrow.parquet as pq
    import pytest

    from curate.core.runner import StageError
    from curate.pipeline import decontam_stage, ingest

    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"id": "b1", "problem": "What is the sum of the first 100 positive integers?"}) + "\n")
    src = tmp_path / "rows.jsonl"
    src.write_text(json.dumps({"id": "r1", "problem": "What is the sum of the first 100 positive integers?",
                               "answer": "5050"}) + "\n")
    ingest(str(src), tmp_path / "i")
    cfg = DecontamConfig(benchmarks=(f"b={bench}",))
    assert decontam_stage([tmp_path / "i"], tmp_path / "d", cfg).rows_kept == 0  # the exact copy is found
    shard = next((tmp_path / "i" / "kept").glob("*.parquet"))
    t = pq.read_table(shard)
    pq.write_table(t.set_column(t.schema.get_field_index("id"), "id", pa.array(["row-1"])), shard)
    with pytest.raises(StageError, match="not the content ids"):
        decontam_stage([tmp_path / "i"], tmp_path / "d2", cfg)


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
