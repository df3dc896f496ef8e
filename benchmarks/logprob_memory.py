"""Peak memory of one micro-batch's log-probs, entropy and backward: one vocabulary projection vs chunks.

The trainer's ``token_logps`` projects only completion tokens onto the vocabulary. In one pass, autograd keeps
several fp32 [tokens x vocab] tensors (logits, tempered logits, log-softmax, and the entropy's temporaries);
with ``logprob_chunk`` each chunk is checkpointed and recomputed in backward, so one chunk's are alive at a
time. Each mode runs in a fresh process; on CPU the figure is the growth of peak RSS over the process's
peak after loading the model and building the batch, on CUDA ``max_memory_allocated`` over the same point.

    python benchmarks/logprob_memory.py                       # SmolLM2-135M (vocab 49,152), 16 x 256 tokens
    python benchmarks/logprob_memory.py --seqs 16 --tokens 1024 --random-init qwen2-1.5b --bf16 --grad-ckpt   # on a GPU
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def one(a) -> dict:
    import resource
    import time

    import torch
    from transformers import AutoModelForCausalLM

    from curate.difficulty.models import resolve_model
    from rl_stage.policy import token_logps

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if a.random_init:
        from transformers import LlamaConfig

        from benchmarks.estimate_gpu import SHAPES

        h, n_layers, heads, kv, inter, vocab = SHAPES[a.random_init]
        cfg = LlamaConfig(vocab_size=a.vocab or vocab or 49152, hidden_size=h, num_hidden_layers=n_layers,  # tiny: 49,152
                          num_attention_heads=heads, num_key_value_heads=kv, intermediate_size=inter,
                          max_position_embeddings=8192)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).to(dev)
    else:
        model = AutoModelForCausalLM.from_pretrained(resolve_model(None)[0], dtype=torch.float32).to(dev)
    g = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    L = a.prompt + a.tokens
    ids = torch.randint(0, vocab, (a.seqs, L), generator=g).to(dev)
    mask = torch.zeros(a.seqs, L - 1, device=dev)
    mask[:, a.prompt - 1 :] = 1
    if a.grad_ckpt:
        model.gradient_checkpointing_enable()
    model.train()
    if dev == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0 = time.perf_counter()
    lp, ent = token_logps(model, ids, torch.ones_like(ids), mask, 1.0, a.bf16, dev, want_entropy=True, chunk=a.chunk)
    (lp * mask).sum().backward()
    if dev == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {"chunk": a.chunk, "device": dev, "vocab": vocab, "tokens": int(mask.sum()), "peak_gb": round(peak / 2**30, 3),
            "seconds": round(time.perf_counter() - t0, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=256, help="completion tokens per sequence")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--chunks", default="0,1024", help="0: one pass")
    ap.add_argument("--random-init", help="a shape from benchmarks/estimate_gpu.py instead of the bundled model")
    ap.add_argument("--vocab", type=int, help="with --random-init: another vocabulary than the shape's (qwen2-1.5b: 151,936)")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--grad-ckpt", action="store_true", help="gradient checkpointing of the decoder layers")
    ap.add_argument("--chunk", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.chunk is not None:
        print("RESULT " + json.dumps(one(a)), flush=True)
        return
    res = []
    for c in map(int, a.chunks.split(",")):
        cmd = [sys.executable, __file__, "--chunk", str(c), "--seqs", str(a.seqs), "--tokens", str(a.tokens),
               "--prompt", str(a.prompt)] + (["--vocab", str(a.vocab)] if a.vocab else [])
        cmd += (["--random-init", a.random_init] if a.random_init else []) + (["--bf16"] if a.bf16 else [])
        cmd += ["--grad-ckpt"] if a.grad_ckpt else []
        p = subprocess.run(cmd, capture_output=True, text=True)
        line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
        if not line:
            raise SystemExit(p.stdout[-2000:] + p.stderr[-3000:])
        res.append(json.loads(line[0][7:]))
        print(json.dumps(res[-1]), flush=True)
    one_pass = next((r for r in res if r["chunk"] == 0), None)
    if one_pass:
        for r in res:
            r["peak_vs_one_pass"] = round(r["peak_gb"] / max(one_pass["peak_gb"], 1e-9), 3)
    fig = {"seqs": a.seqs, "tokens_per_seq": a.tokens, "runs": res}
    print(json.dumps(fig, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(fig, indent=2))


if __name__ == "__main__":
    main()
