"""Difficulty-estimation throughput, each figure against a baseline measured in the same run.

(a) raw engine: vLLM ``LLM.generate`` on every request at once (the ceiling for this engine and machine);
(b) the estimator end to end on the same requests (same engine object, same seeds): generation, grading,
    shard writing, manifest; reported as (b)/(a), target >= 0.9;
(c) grading: ``GradingPool.grade`` (workers, memo, integer fast path) vs a plain in-process loop of
    ``verify(parse(gold), parse(response))`` over the responses of (b); verdicts must be identical;
(d) the transformers backend's tokens/s on a subset of the same problems, as a ratio to (a).

    python benchmarks/estimate.py --problems 24 --max-tokens 128 --hf-problems 4
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=24)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--hf-problems", type=int, default=4)
    ap.add_argument("--model", default=None)
    ap.add_argument("--json", help="write the figures here too")
    a = ap.parse_args()

    from curate.difficulty import templates
    from curate.difficulty.engines import GenRequest, HFEngine, SamplingConfig, VLLMEngine, sample_seed
    from curate.difficulty.estimate import EstimateConfig, estimate
    from curate.difficulty.grading import GradingPool
    from curate.difficulty.models import resolve_model
    from curate.pipeline import ingest

    tmp = Path(tempfile.mkdtemp(prefix="gradus-bench-"))
    atexit.register(shutil.rmtree, tmp, True)  # scratch: the figures are printed, not kept here
    ingest(f"synthetic:n={a.problems},seed=7,difficulty=1-3,extras=0", tmp / "in")
    path, name = resolve_model(a.model)
    cfg = SamplingConfig(k=a.k, temperature=a.temperature, max_tokens=a.max_tokens, seed=0)
    figures: dict = {"problems": a.problems, "k": a.k, "max_tokens": a.max_tokens, "temperature": a.temperature,
                     "model": name, "cpus": os.cpu_count()}

    t0 = time.perf_counter()
    vs = VLLMEngine(path, cfg, model_name=name)
    figures["vllm_start_s"] = round(time.perf_counter() - t0, 1)
    import pyarrow.parquet as pq
    from vllm import SamplingParams

    rows = pq.read_table(next((tmp / "in" / "kept").glob("*.parquet"))).to_pylist()
    prompts = [vs.prepare("x", templates.render("chat", r["problem"], vs.tokenizer), False).prompt_ids for r in rows]

    # (a) raw engine
    reqs = [({"prompt_token_ids": p}, SamplingParams(n=1, temperature=cfg.temperature, top_p=cfg.top_p,
                                                      max_tokens=cfg.max_tokens, seed=sample_seed(0, r["id"], j)))
            for p, r in zip(prompts, rows, strict=True) for j in range(cfg.k)]
    t0 = time.perf_counter()
    outs = vs.llm.generate([r[0] for r in reqs], [r[1] for r in reqs], use_tqdm=False)
    raw_s = time.perf_counter() - t0
    raw_tokens = sum(len(c.token_ids) for o in outs for c in o.outputs)
    figures["a_raw_tokens"] = raw_tokens
    figures["a_raw_tokens_per_s"] = round(raw_tokens / raw_s, 1)

    # (b) estimator end to end, same engine
    ecfg = EstimateConfig(model=path, backend="vllm", template="chat", sampling=cfg, keep_responses=True, store=None)
    t0 = time.perf_counter()
    m = estimate([tmp / "in"], tmp / "est", ecfg, engine=vs, progress=False)
    est_s = time.perf_counter() - t0
    est_tokens = m.stats["this_run"]["tokens"]
    figures["b_estimator_tokens"] = est_tokens
    figures["b_estimator_tokens_per_s"] = round(est_tokens / est_s, 1)
    figures["b_over_a"] = round(figures["b_estimator_tokens_per_s"] / figures["a_raw_tokens_per_s"], 3)
    figures["b_pass_count_histogram"] = m.stats["pass_count_histogram"]
    figures["b_sample_outcomes"] = m.stats["sample_outcomes"]

    # (c) grading on the responses of (b)
    resp = pq.read_table(tmp / "est" / "responses").to_pylist()
    gold = {r["id"]: r["answer"] for r in rows}
    golds = [gold[r["id"]] for r in resp]
    texts = [r["text"] for r in resp]
    from math_verify import parse, verify

    t0 = time.perf_counter()
    plain = [bool(verify(parse(f"${g}$"), parse(t))) for g, t in zip(golds, texts, strict=True)]
    plain_s = time.perf_counter() - t0
    with GradingPool() as pool:
        pool._ensure()  # workers started outside the timed part, as in a run
        t0 = time.perf_counter()
        ours = pool.grade(golds, texts)
        ours_s = time.perf_counter() - t0
        figures["c_pool_stats"] = pool.stats
    agree = sum((o == "correct") == p for o, p in zip(ours, plain, strict=True))
    figures["c_samples"] = len(texts)
    figures["c_plain_per_s"] = round(len(texts) / plain_s, 1)
    figures["c_pool_per_s"] = round(len(texts) / ours_s, 1)
    figures["c_speedup"] = round(plain_s / ours_s, 2)
    figures["c_identical_verdicts"] = f"{agree}/{len(texts)}"
    diffs = [(g, t[-200:], o, p) for g, t, o, p in zip(golds, texts, ours, plain, strict=True) if (o == "correct") != p]
    figures["c_disagreements"] = diffs[:5]

    # (d) transformers backend on a subset
    vs.llm = vs.engine = None
    import gc

    gc.collect()
    hs = HFEngine(path, cfg, model_name=name)
    sub = [GenRequest(r["id"], "", p, seed_key=r["id"]) for r, p in list(zip(rows, prompts, strict=True))[: a.hf_problems]]
    t0 = time.perf_counter()
    hf_tokens = sum(c.n_tokens for _, comps in hs.stream(sub) for c in comps)
    hf_s = time.perf_counter() - t0
    figures["d_hf_tokens_per_s"] = round(hf_tokens / hf_s, 1)
    figures["d_vllm_over_hf"] = round(figures["a_raw_tokens_per_s"] / figures["d_hf_tokens_per_s"], 2)

    try:
        from benchmarks.machine import describe
    except ImportError:  # run as a file (python benchmarks/NAME.py): its folder is on the path
        from machine import describe  # type: ignore[no-redef]

    figures["machine"] = describe()
    print(json.dumps(figures, indent=2, default=str))
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=2, default=str))


if __name__ == "__main__":
    main()
