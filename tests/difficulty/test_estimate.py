"""Difficulty estimation logic: Wilson bounds, parameter keys, seeds, templates, chunked resume, the store.

A scripted sampler stands in for the engine here (pure logic: chunking, resume, conservation); the real
engines run in tests/difficulty/test_estimate_engines.py.
"""

from __future__ import annotations

import math

import pyarrow.parquet as pq
import pytest

from curate.core.runner import StageError
from curate.core.shards import read_table
from curate.difficulty import templates
from curate.difficulty.engines import Completion, Engine, GenRequest, SamplingConfig, sample_seed
from curate.difficulty.estimate import EstimateConfig, estimate, param_key, store_identity, template_fingerprint, wilson
from curate.difficulty.grading import GRADER_VERSION
from curate.pipeline import ingest


def test_wilson_hand_computed():
    # z = 1.96: z^2 = 3.8415; for 5/10 the centre is 0.5 and the half width 1.4160 * sqrt(0.025 + 0.0096) = 0.2634
    lo, hi = wilson(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    lo, hi = wilson(0, 10)  # centre = half = 0.19207 / 1.38415 = 0.13877
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    lo, hi = wilson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.7225, abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)
    # the interval always contains the point estimate and narrows with n
    for n in (1, 4, 10, 64):
        for c in range(n + 1):
            lo, hi = wilson(c, n)
            assert lo <= c / n <= hi
    assert (wilson(32, 64)[1] - wilson(32, 64)[0]) < (wilson(5, 10)[1] - wilson(5, 10)[0])


def _ident(model="m", rev="r", template="chat", tfp="t", s=None, timeout=5, base_url=None, grader=None):
    return store_identity(model, rev, template, tfp, s or SamplingConfig(), timeout, base_url=base_url, grader=grader)


def test_store_key_changes_with_everything_that_changes_a_result():
    k0 = param_key(_ident())
    variants = [SamplingConfig(k=8), SamplingConfig(temperature=0.7), SamplingConfig(top_p=0.9),
                SamplingConfig(max_tokens=512), SamplingConfig(seed=1), SamplingConfig(max_prompt_tokens=2048)]
    keys = {param_key(_ident(s=v)) for v in variants}
    keys |= {param_key(_ident(model="m2")), param_key(_ident(rev="r2")), param_key(_ident(template="r1")),
             param_key(_ident(tfp="other chat template text")), param_key(_ident(timeout=10)),
             param_key(_ident(base_url="http://localhost:8000/v1")), param_key(_ident(grader="other"))}
    assert k0 not in keys and len(keys) == 13
    assert param_key(_ident()) == k0
    # the grader identity names the parsers under math-verify as well
    assert all(x in GRADER_VERSION for x in ("math-verify==", "sympy==", "latex2sympy2_extended==", "gradus-grading="))


def test_template_fingerprint_sees_the_template_text_not_only_its_name():
    class Tok:
        def __init__(self, tpl):
            self.chat_template = tpl

        def apply_chat_template(self, msgs, tokenize=False, add_generation_prompt=True):
            return self.chat_template.format(msgs[-1]["content"])

    a, b = Tok("<u>{}</u><a>"), Tok("<user>{}</user><assistant>")
    assert template_fingerprint("chat", a) != template_fingerprint("chat", b)
    assert template_fingerprint("chat", a) == template_fingerprint("chat", Tok("<u>{}</u><a>"))
    assert template_fingerprint("r1") != template_fingerprint("qwen_math")


def test_sample_seeds_are_stable_distinct_and_31_bit():
    seeds = [sample_seed(0, "abc", j) for j in range(10)]
    assert len(set(seeds)) == 10 and all(0 <= s < 2**31 for s in seeds)
    assert seeds == [sample_seed(0, "abc", j) for j in range(10)]
    assert sample_seed(1, "abc", 0) != seeds[0] and sample_seed(0, "abd", 0) != seeds[0]


def test_bad_sampling_parameters_are_refused():
    for kw in ({"k": 0}, {"temperature": -1}, {"top_p": 0}, {"max_tokens": 0}):
        with pytest.raises(ValueError):
            SamplingConfig(**kw)
    with pytest.raises(ValueError, match="template: 'alpaca' is not one of chat, qwen_math, r1, none"):
        EstimateConfig(template="alpaca")


def test_templates():
    p = "What is $2+3$?"
    r1 = templates.render("r1", p)
    assert r1.startswith("A conversation between User and Assistant.") and r1.endswith(f"User: {p}\nAssistant: <think>")
    assert templates.render("qwen_math", p) == (
        "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        f"<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n"
    )
    assert templates.render("none", p) == p
    assert templates.messages("chat", p) == [{"role": "user", "content": p + "\n" + templates.BOXED_INSTRUCTION}]
    with pytest.raises(templates.TemplateError, match="needs a tokenizer"):
        templates.render("chat", p)
    few = templates.messages("fewshot", p)  # three worked exchanges, then the problem
    assert [m["role"] for m in few] == ["user", "assistant"] * 3 + ["user"] and few[-1]["content"] == p
    assert [m["content"][-14:] for m in few if m["role"] == "assistant"] == [
        "s $\\boxed{6}$.", " $\\boxed{12}$.", "s $\\boxed{7}$."]
    with pytest.raises(templates.TemplateError, match="'fewshot' needs a tokenizer"):
        templates.render("fewshot", p)


class ScriptedEngine(Engine):
    """Answers from a script: problem id -> list of k response texts. ``fail_after`` simulates a crash."""

    backend = "scripted"
    model_name = "scripted-model"
    model_path = "/nonexistent"

    def __init__(self, cfg, script, fail_after=None, tokenizer=None):
        super().__init__(cfg)
        self.script, self.fail_after, self.tokenizer = script, fail_after, tokenizer
        self.served: list[str] = []
        self.rounds: list[tuple[str, int, int]] = []  # (problem, first sample, samples) of every request

    def stream(self, requests):
        import time

        for r in requests:
            if r is None:  # sequential estimation: nothing to send until a round is graded
                time.sleep(0.001)
                continue
            if self.fail_after is not None and len(self.served) >= self.fail_after:
                raise KeyboardInterrupt("simulated kill")
            self.served.append(r.key)
            self.rounds.append((r.key, r.first, r.count(self.cfg)))
            texts = self.script(r)
            yield r.id, [Completion(t, len(t.split()), "length" if t.endswith("...") else "stop") for t in texts]


def _script(k):
    def answer(r: GenRequest):
        # problem text carries the gold; sample j is right for j < (len(problem) % (k + 1))
        n_right = len(r.prompt) % (k + 1)
        return [f"so \\boxed{{{r.prompt.split('=')[-1].strip()}}}" if j < n_right else "I think \\boxed{-999}"
                for j in range(k)]
    return answer


@pytest.fixture()
def small_input(tmp_path):
    src = tmp_path / "in.jsonl"
    rows = [f'{{"problem": "Compute q{i} = {i * 7}", "answer": "{i * 7}"}}' for i in range(10)]
    rows.append('{"problem": "no gold here", "answer": ""}')
    src.write_text("\n".join(rows) + "\n")
    ingest(str(src), tmp_path / "ing", adapter="generic")
    return tmp_path / "ing"


def _cfg(tmp_path, **kw):
    base = dict(model="scripted", backend="vllm", template="none", sampling=SamplingConfig(k=4, temperature=1.0,
                max_tokens=32, seed=0), chunk_rows=3, store=str(tmp_path / "store"), model_revision="rev1")
    return EstimateConfig(**{**base, **kw})


def test_estimate_scores_every_row_and_rejects_rows_without_gold(tmp_path, small_input):
    cfg = _cfg(tmp_path, keep_responses=True)
    m = estimate([small_input], tmp_path / "est", cfg, engine=ScriptedEngine(cfg.sampling, _script(4)), progress=False)
    assert (m.rows_in, m.rows_kept, m.rows_rejected) == (11, 10, 1)
    assert m.rejected_by_reason == {"no_gold": 1}
    t = read_table(tmp_path / "est" / "kept").to_pylist()
    for row in t:
        want = len(row["problem"]) % 5  # the script's rule, k = 4
        assert row["n_correct"] == want and row["n_graded"] == 4 and row["k"] == 4
        assert row["correct"] == [j < want for j in range(4)]
        assert row["outcomes"] == ["correct" if j < want else "wrong" for j in range(4)]
        assert row["pass_rate"] == pytest.approx(want / 4)
        lo, hi = wilson(want, 4)
        assert row["pass_rate_low"] == pytest.approx(lo, abs=1e-6) and row["pass_rate_high"] == pytest.approx(hi, abs=1e-6)
        ident = (row["model"], row["model_revision"], row["backend"], row["template"])
        assert ident == ("scripted-model", "rev1", "scripted", "none")
        assert (row["temperature"], row["max_tokens"], row["seed"]) == (1.0, 32, 0)
        assert row["grader_version"].startswith("math-verify==")
    hist = {}
    for row in t:
        hist[str(row["n_correct"])] = hist.get(str(row["n_correct"]), 0) + 1
    assert m.stats["pass_count_histogram"] == hist
    resp = read_table(tmp_path / "est" / "responses")
    assert resp.num_rows == 40 and set(resp["outcome"].to_pylist()) <= {"correct", "wrong"}
    # the same run again is a no-op
    again = estimate([small_input], tmp_path / "est", cfg, engine=ScriptedEngine(cfg.sampling, _script(4)), progress=False)
    assert again.skipped


def test_killed_run_resumes_without_duplicates_or_losses(tmp_path, small_input):
    cfg = _cfg(tmp_path, store=None)
    full = estimate([small_input], tmp_path / "full", cfg, engine=ScriptedEngine(cfg.sampling, _script(4)), progress=False)
    first = ScriptedEngine(cfg.sampling, _script(4), fail_after=5)
    with pytest.raises(KeyboardInterrupt):
        estimate([small_input], tmp_path / "est", cfg, engine=first, progress=False)
    # 5 problems were sampled before the kill: chunk 0 (rows 0-2) was finished and written, chunk 1 was not
    parts = sorted(p.name for p in (tmp_path / "est" / "kept").glob("*.parquet"))
    assert parts == ["part_000000.parquet"] and not (tmp_path / "est" / "manifest.json").exists()
    assert not list((tmp_path / "est").glob("*/*.tmp"))
    second = ScriptedEngine(cfg.sampling, _script(4))
    m = estimate([small_input], tmp_path / "est", cfg, engine=second, progress=False)
    assert m.stats["this_run"]["chunks_already_done"] == 1
    assert len(second.served) == 7  # rows 3..9; row 10 has no gold
    a = read_table(tmp_path / "est" / "kept").sort_by("id")
    b = read_table(tmp_path / "full" / "kept").sort_by("id")
    assert a.num_rows == 10 and a["id"].to_pylist() == b["id"].to_pylist()
    assert a["correct"].to_pylist() == b["correct"].to_pylist()
    assert m.rows_in == m.rows_kept + m.rows_rejected == full.rows_in


def test_a_run_split_into_shares_scores_what_one_process_scores(tmp_path, small_input):
    """Three shares (chunks 0..3 of 3 rows, dealt round robin) give the rows, pass counts and shard bytes of one run;
    a share killed part way leaves its finished chunks, and its rerun does only the rest."""
    import hashlib

    from curate.difficulty.estimate import EstimateError, Estimator, estimate_shared

    cfg = _cfg(tmp_path, store=None)
    one = estimate([small_input], tmp_path / "one", cfg, engine=ScriptedEngine(cfg.sampling, _script(4)), progress=False)
    out = tmp_path / "shared"
    assert Estimator([small_input], out, cfg, progress=False).begin() is None
    s0 = ScriptedEngine(cfg.sampling, _script(4))
    share0 = Estimator([small_input], out, cfg, s0, progress=False).run_share(0, 3)
    assert sorted(p.name for p in (out / "kept").glob("*.parquet")) == ["part_000000.parquet", "part_000003.parquet"]
    assert len(s0.served) == 4  # chunk 0 (3 rows) and chunk 3 (row 9; row 10 has no gold)
    with pytest.raises(EstimateError, match="2 chunk"):  # shares 1 and 2 have not run
        Estimator([small_input], out, cfg, progress=False).finish_shares([share0])
    s1 = ScriptedEngine(cfg.sampling, _script(4), fail_after=1)
    with pytest.raises(KeyboardInterrupt):  # killed inside its only chunk: nothing of it is on disk
        Estimator([small_input], out, cfg, s1, progress=False).run_share(1, 3)
    shares = [share0] + [Estimator([small_input], out, cfg, ScriptedEngine(cfg.sampling, _script(4)),
                                   progress=False).run_share(w, 3) for w in (1, 2)]
    m = Estimator([small_input], out, cfg, progress=False).finish_shares(shares)
    assert (m.rows_in, m.rows_kept, m.rows_rejected) == (one.rows_in, one.rows_kept, one.rows_rejected) == (11, 10, 1)
    assert m.stats["this_run"]["samples"] == 40 and m.stats["this_run"]["shares"] == 3
    assert m.stats["pass_count_histogram"] == one.stats["pass_count_histogram"]

    def hashes(d):
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((d / "kept").glob("*.parquet"))}

    assert hashes(out) == hashes(tmp_path / "one") and len(hashes(out)) == 4
    # the whole thing in one call, and a second call finds it complete
    m2 = estimate_shared([small_input], tmp_path / "s2", cfg, 2, engine=ScriptedEngine(cfg.sampling, _script(4)))
    assert hashes(tmp_path / "s2") == hashes(tmp_path / "one") and not m2.skipped
    assert estimate_shared([small_input], tmp_path / "s2", cfg, 2, engine=ScriptedEngine(cfg.sampling, _script(4))).skipped


def test_other_settings_in_the_same_folder_are_refused(tmp_path, small_input):
    cfg = _cfg(tmp_path)
    first = ScriptedEngine(cfg.sampling, _script(4), fail_after=2)
    with pytest.raises(KeyboardInterrupt):
        estimate([small_input], tmp_path / "est", cfg, engine=first, progress=False)
    other = _cfg(tmp_path, template="r1")
    with pytest.raises(StageError, match="made with other settings"):
        estimate([small_input], tmp_path / "est", other, engine=ScriptedEngine(other.sampling, _script(4)), progress=False)
    m = estimate([small_input], tmp_path / "est", other, engine=ScriptedEngine(other.sampling, _script(4)),
                 force=True, progress=False)
    assert m.rows_kept == 10


def test_store_skips_problems_already_scored(tmp_path, small_input):
    cfg = _cfg(tmp_path)
    estimate([small_input], tmp_path / "a", cfg, engine=ScriptedEngine(cfg.sampling, _script(4)), progress=False)
    seg = list((tmp_path / "store").rglob("*.parquet"))
    assert sum(pq.ParquetFile(p).metadata.num_rows for p in seg) == 10
    again = ScriptedEngine(cfg.sampling, _script(4))
    m = estimate([small_input], tmp_path / "b", cfg, engine=again, progress=False)
    assert again.served == [] and m.stats["this_run"]["store_hits"] == 10
    a, b = read_table(tmp_path / "a" / "kept").sort_by("id"), read_table(tmp_path / "b" / "kept").sort_by("id")
    assert a.equals(b)
    # nothing was appended twice
    assert sum(pq.ParquetFile(p).metadata.num_rows for p in (tmp_path / "store").rglob("*.parquet")) == 10
    # other sampling parameters miss the store
    cfg2 = _cfg(tmp_path, sampling=SamplingConfig(k=4, temperature=0.7, max_tokens=32, seed=0))
    fresh = ScriptedEngine(cfg2.sampling, _script(4))
    estimate([small_input], tmp_path / "c", cfg2, engine=fresh, progress=False)
    assert len(fresh.served) == 10


def test_truncated_response_without_answer_is_no_answer(tmp_path, small_input):
    cfg = _cfg(tmp_path, store=None)

    def script(r):  # a cut-off response whose last number equals the gold would fool math-verify's fallback
        gold = r.prompt.split("=")[-1].strip()
        return [f"we get {gold} ...", f"\\boxed{{{gold}}} and then ...", f"the answer is {gold}", "no idea"]

    estimate([small_input], tmp_path / "est", cfg, engine=ScriptedEngine(cfg.sampling, script), progress=False)
    for row in read_table(tmp_path / "est" / "kept").to_pylist():
        assert row["outcomes"] == ["no_answer", "correct", "correct", "no_answer"]
        assert row["truncated"] == [True, True, False, False]
        assert row["n_correct"] == 2 and row["n_graded"] == 4
    assert math.isclose(read_table(tmp_path / "est" / "kept")["pass_rate"][0].as_py(), 0.5)


def test_prompt_too_long_is_rejected_with_reason(tmp_path, small_input):
    class WordTokenizer:
        chat_template = None

        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": list(range(len(text.split())))}

    # "Compute qN = M" is 4 words
    cfg = _cfg(tmp_path, store=None, sampling=SamplingConfig(k=4, max_tokens=32, max_prompt_tokens=3))
    sampler = ScriptedEngine(cfg.sampling, _script(4), tokenizer=WordTokenizer())
    m = estimate([small_input], tmp_path / "est", cfg, engine=sampler, progress=False)
    assert m.rejected_by_reason == {"prompt_too_long": 10, "no_gold": 1} and m.rows_kept == 0
    rej = read_table(tmp_path / "est" / "rejected").to_pylist()
    assert all(r["reject_stage"] == "estimate" for r in rej)
    details = [r["reject_detail"] for r in rej if r["reject_reason"] == "prompt_too_long"]
    assert details[0] == "4 prompt tokens > max_prompt_tokens 3"


def test_store_lookup_with_another_gold_samples_again(tmp_path, small_input):
    # Same problem texts (same ids), other gold answers: stored verdicts graded against the old golds say
    # nothing about the new ones. Before rows were keyed by problem + gold, all 10 were copied from the store.
    cfg = _cfg(tmp_path)
    estimate([small_input], tmp_path / "a", cfg, engine=ScriptedEngine(cfg.sampling, _script(4)), progress=False)
    src = tmp_path / "fixed.jsonl"
    src.write_text("".join(f'{{"problem": "Compute q{i} = {i * 7}", "answer": "{i * 7 + 1}"}}\n' for i in range(10)))
    ingest(str(src), tmp_path / "fixed", adapter="generic")
    assert read_table(tmp_path / "fixed" / "kept")["id"].to_pylist() == read_table(small_input / "kept")["id"].to_pylist()[:10]
    again = ScriptedEngine(cfg.sampling, _script(4))
    m = estimate([tmp_path / "fixed"], tmp_path / "b", cfg, engine=again, progress=False)
    assert len(again.served) == 10 and m.stats["this_run"]["store_hits"] == 0
    # the script answers the number in the text, which is no longer the gold: nothing is correct now
    assert set(read_table(tmp_path / "b" / "kept")["n_correct"].to_pylist()) == {0}


def test_a_grader_change_reruns_the_stage_and_misses_the_store(tmp_path, small_input, monkeypatch):
    import curate.difficulty.estimate as est

    cfg = _cfg(tmp_path)
    estimate([small_input], tmp_path / "a", cfg, engine=ScriptedEngine(cfg.sampling, _script(4)), progress=False)
    monkeypatch.setattr(est, "GRADER_VERSION", GRADER_VERSION + ";changed")
    # the finished stage is not "skipped" with the old verdicts: its identity names the grader
    with pytest.raises(StageError, match="made with other settings"):
        estimate([small_input], tmp_path / "a", cfg, engine=ScriptedEngine(cfg.sampling, _script(4)), progress=False)
    fresh = ScriptedEngine(cfg.sampling, _script(4))
    m = estimate([small_input], tmp_path / "a", cfg, engine=fresh, force=True, progress=False)
    assert len(fresh.served) == 10 and m.stats["this_run"]["store_hits"] == 0  # the store key names the grader too
    assert m.config["grader_version"].endswith(";changed")


def test_an_unresolved_model_revision_turns_the_store_off(tmp_path, small_input):
    cfg = _cfg(tmp_path, model_revision=None)  # the scripted model path does not exist: its revision cannot be resolved
    m = estimate([small_input], tmp_path / "a", cfg, engine=ScriptedEngine(cfg.sampling, _script(4)), progress=False)
    assert m.stats["model_revision"] == "unresolved" and m.stats["store"].startswith("off")
    assert not list((tmp_path / "store").rglob("*.parquet"))


def test_timeouts_count_as_failures(tmp_path, small_input, monkeypatch):
    # k = 4: one correct, one answer that math-verify cannot finish within the 1 s budget (a 300-level tower takes
    # it about 4 s to parse), one wrong, one correct. The timeout keeps its label and counts as a failure: pass rate
    # 2/4, not 2/3 of the graded. The second pass runs at the first pass's timeout here (factor 1), so the tower
    # times out there too: what a timeout that stays a timeout scores (the second pass has its own tests).
    import curate.difficulty.estimate as est

    monkeypatch.setattr(est, "REGRADE_FACTOR", 1)
    cfg = _cfg(tmp_path, grader_timeout_s=1, store=None)
    tower = r"\boxed{" + "x^" * 300 + "2}"

    def script(r):
        gold = r.prompt.split("=")[-1].strip()
        return [f"\\boxed{{{gold}}}", tower, "\\boxed{-1}", f"so \\boxed{{{gold}}}"]

    m = estimate([small_input], tmp_path / "est", cfg, engine=ScriptedEngine(cfg.sampling, script), progress=False)
    rows = read_table(tmp_path / "est" / "kept").to_pylist()
    for row in rows:
        assert row["outcomes"] == ["correct", "timeout", "wrong", "correct"]
        assert (row["n_correct"], row["n_graded"]) == (2, 3)
        assert row["pass_rate"] == pytest.approx(0.5)
        lo, hi = wilson(2, 4)
        assert row["pass_rate_low"] == pytest.approx(lo, abs=1e-6) and row["pass_rate_high"] == pytest.approx(hi, abs=1e-6)
    assert m.stats["sample_outcomes"]["timeout"] == 10
    g = m.stats["this_run"]["grading"]
    assert (g["verify_timeouts"], g["regraded"], g["regrade_timeouts"]) == (10, 10, 10)


def test_a_local_models_revision_covers_every_weight_file_and_sees_a_rewrite(tmp_path):
    """pytorch_model.bin counts; weights rewritten with the same size and the old mtime give a new revision (the
    per-file cache is keyed by inode, size, mtime and ctime); an untouched folder keeps its revision."""
    import os
    import time

    from curate.difficulty.models import model_revision

    m = tmp_path / "model"
    m.mkdir()
    (m / "config.json").write_text('{"model_type": "llama"}')
    w = m / "pytorch_model.bin"
    w.write_bytes(b"\x01" * 4096)
    r1 = model_revision(str(m))
    assert r1.startswith("sha256:") and model_revision(str(m)) == r1
    st = w.stat()
    time.sleep(0.01)
    w.write_bytes(b"\x02" * 4096)  # the same size ...
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and the old modification time
    r2 = model_revision(str(m))
    assert r2 != r1 and model_revision(str(m)) == r2
    (m / "model.gguf").write_bytes(b"GGUF")
    assert model_revision(str(m)) not in (r1, r2)


def test_samples_that_time_out_are_graded_again_at_the_end_of_the_stage(tmp_path):
    # One problem whose right answer takes math-verify about 2.3 s to parse (an expanded 8th power): at a 1 s
    # timeout both samples time out; the second pass (6 x 1 s, one at a time) grades them right. The row is
    # written once, with the final verdicts; the manifest counts both passes.
    import sympy

    x, y, z, w = sympy.symbols("x y z w")
    slow = r"so \boxed{" + sympy.latex(sympy.expand((x + y + z + w) ** 8)) + "}"
    src = tmp_path / "in.jsonl"
    src.write_text('{"problem": "Expand (x+y+z+w)^8.", "answer": "(x+y+z+w)^{8}"}\n'
                   '{"problem": "Compute 6 * 7.", "answer": "42"}\n')
    ingest(str(src), tmp_path / "ing", adapter="generic")
    cfg = _cfg(tmp_path, grader_timeout_s=1, sampling=SamplingConfig(k=2, temperature=1.0, max_tokens=32, seed=0),
               grader_workers=1)
    script = lambda r: [slow, slow] if "Expand" in r.prompt else [r"\boxed{42}", r"\boxed{41}"]  # noqa: E731
    m = estimate([tmp_path / "ing"], tmp_path / "est", cfg, engine=ScriptedEngine(cfg.sampling, script), progress=False)
    rows = {r["problem"]: r for r in read_table(tmp_path / "est" / "kept").to_pylist()}
    assert rows["Expand (x+y+z+w)^8."]["outcomes"] == ["correct", "correct"]
    assert rows["Expand (x+y+z+w)^8."]["pass_rate"] == 1.0
    assert rows["Compute 6 * 7."]["outcomes"] == ["correct", "wrong"]
    g = m.stats["this_run"]["grading"]
    assert (g["verify_timeouts"], g["regraded"], g["regrade_timeouts"], g["regrade_changed"]) == (1, 1, 0, 1)
    assert m.stats["sample_outcomes"] == {"correct": 3, "wrong": 1}
