"""The compiled loops (``curate.clean.kernels``): each gives its numpy, regex or ``hashlib`` twin's result bit for bit
on real rows, loads only in worker processes, and is compiled for one set of types."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from curate.clean.dedup import DedupConfig, minhash


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
