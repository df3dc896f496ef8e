"""Difficulty estimation on a GPU: vLLM on CUDA in bf16, the same estimator code path as on CPU.

Runs as is on a machine with a GPU and `pip install vllm` (plus this project):

    python benchmarks/estimate_gpu.py --model Qwen/Qwen2.5-Math-1.5B --problems 512 --k 10 --max-tokens 1024
    python benchmarks/estimate_gpu.py --random-init llama-1b --problems 256   # no download: random weights, real shape

Prints JSON: engine start seconds, raw vLLM tokens/s on all requests at once, the estimator's end-to-end
tokens/s on the same requests (grading and writing included) and their ratio, and GPU memory.
With ``--random-init`` the weights are random (the output is noise, grading finds nothing), which is
what tokens/s depends on: the shapes.
"""

from __future__ import annotations

import argparse
import atexit
import json
import shutil
import tempfile
import time
from pathlib import Path

SHAPES = {  # hidden, layers, heads, kv heads, intermediate, vocabulary (None: the tokenizer's)
    "tiny": (64, 2, 4, 2, 128, None),  # a smoke run of the GPU scripts on CPU
    "llama-135m": (576, 30, 9, 3, 1536, 49152),  # SmolLM2-135M
    "qwen2-0.5b": (896, 24, 14, 2, 4864, 151936),  # Qwen2.5-0.5B
    "llama-1b": (2048, 16, 32, 8, 8192, 128256),  # Llama 3.2 1B
    "qwen2-1.5b": (1536, 28, 12, 2, 8960, 151936),  # Qwen2.5(-Math)-1.5B
}


def random_model(shape: str, tokenizer_dir: str, out: Path) -> str:
    """Random bf16 weights of ``shape`` (tied embeddings, as all four have) with the tokenizer of ``tokenizer_dir``.
    The vocabulary is the real model's (or the tokenizer's, if that is larger): the [tokens x vocabulary] log-prob
    tensors are what the trainer's memory depends on. Sampled ids past the tokenizer's decode to nothing
    (transformers and vLLM both)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    h, n_layers, heads, kv, inter, vocab = SHAPES[shape]
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    cfg = LlamaConfig(vocab_size=max(vocab or 0, len(tok)), hidden_size=h, num_hidden_layers=n_layers, num_attention_heads=heads,
                      num_key_value_heads=kv, intermediate_size=inter, max_position_embeddings=4096,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="model folder or hub id (default: the bundled SmolLM2)")
    ap.add_argument("--random-init", choices=sorted(SHAPES), help="random weights of this shape (tokenizer of --model)")
    ap.add_argument("--problems", type=int, default=256)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--json")
    a = ap.parse_args()

    import torch
    from vllm import SamplingParams

    from curate.difficulty import templates
    from curate.difficulty.engines import SamplingConfig, VLLMEngine, sample_seed
    from curate.difficulty.estimate import EstimateConfig, estimate
    from curate.difficulty.models import resolve_model
    from curate.pipeline import ingest

    tmp = Path(tempfile.mkdtemp(prefix="gradus-gpu-"))
    atexit.register(shutil.rmtree, tmp, True)  # scratch: the figures are printed, not kept here
    path, name = resolve_model(a.model)
    if a.random_init:
        path = name = random_model(a.random_init, path, tmp / "model")
    ingest(f"synthetic:n={a.problems},seed=11,difficulty=1-5,extras=0", tmp / "in")
    cfg = SamplingConfig(k=a.k, temperature=a.temperature, max_tokens=a.max_tokens, seed=0)
    fig = {"gpu": torch.cuda.get_device_name(0), "model": name, "random_init": a.random_init, "problems": a.problems,
           "k": a.k, "max_tokens": a.max_tokens}
    t0 = time.perf_counter()
    vs = VLLMEngine(path, cfg, model_name=name, dtype="bfloat16", max_inflight=max(64, a.problems))
    fig["start_s"] = round(time.perf_counter() - t0, 1)

    import pyarrow.parquet as pq

    rows = pq.read_table(next((tmp / "in" / "kept").glob("*.parquet"))).to_pylist()
    tmpl = "chat" if getattr(vs.tokenizer, "chat_template", None) else "qwen_math"
    prompts = [vs.prepare("x", templates.render(tmpl, r["problem"], vs.tokenizer), tmpl != "chat").prompt_ids for r in rows]
    reqs = [({"prompt_token_ids": p}, SamplingParams(n=1, temperature=cfg.temperature, max_tokens=cfg.max_tokens,
                                                      seed=sample_seed(0, r["id"], j)))
            for p, r in zip(prompts, rows, strict=True) for j in range(cfg.k)]
    t0 = time.perf_counter()
    outs = vs.llm.generate([r[0] for r in reqs], [r[1] for r in reqs], use_tqdm=False)
    dt = time.perf_counter() - t0
    toks = sum(len(c.token_ids) for o in outs for c in o.outputs)
    fig["raw_tokens_per_s"] = round(toks / dt, 1)

    ecfg = EstimateConfig(model=path, backend="vllm", template=tmpl, sampling=cfg, store=None, chunk_rows=64)
    t0 = time.perf_counter()
    m = estimate([tmp / "in"], tmp / "est", ecfg, engine=vs, progress=False)
    dt = time.perf_counter() - t0
    fig["estimator_tokens_per_s"] = round(m.stats["this_run"]["tokens"] / dt, 1)
    fig["estimator_over_raw"] = round(fig["estimator_tokens_per_s"] / fig["raw_tokens_per_s"], 3)
    fig["max_memory_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    fig["pass_count_histogram"] = m.stats["pass_count_histogram"]
    print(json.dumps(fig, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(fig, indent=2))


if __name__ == "__main__":
    main()
