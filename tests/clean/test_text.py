"""Statement tokens (``curate.clean.text``): primes, decimals and unicode operators kept, a row's tokens independent of
the rows beside it, the byte-level cut equal to the regex passes on real rows."""

from __future__ import annotations

import json

import pyarrow as pa


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
