"""GRPO steps on a GPU: vLLM on CUDA in bf16 for rollouts, the trainer in bf16 with gradient checkpointing.

Runs as is on a machine with a GPU, `pip install vllm` and this project:

    python -m benchmarks.train_gpu --model Qwen/Qwen2.5-Math-1.5B --steps 10 --prompts 32 --group 8 --max-tokens 1024
    python -m benchmarks.train_gpu --random-init llama-1b --steps 5      # no download: random weights, real shape

Prints JSON: seconds per step, generated tokens/s, and the split of step time between generation, reward,
training and the weight push (medians over the steps after the first).
"""

from __future__ import annotations

import argparse
import atexit
import json
import shutil
import statistics
import tempfile
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--random-init", help="random weights of a shape from benchmarks/estimate_gpu.py")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--preset", default="dapo")
    ap.add_argument("--json")
    a = ap.parse_args()

    import torch

    from benchmarks.estimate_gpu import random_model
    from benchmarks.train import make_data
    from curate.difficulty.models import resolve_model
    from rl_stage.trainer import TrainConfig, Trainer

    tmp = Path(tempfile.mkdtemp(prefix="gradus-train-gpu-"))
    atexit.register(shutil.rmtree, tmp, True)  # scratch: the figures are printed, not kept here
    model = a.model
    if a.random_init:
        model = random_model(a.random_init, resolve_model(a.model)[0], tmp / "model")
    data = make_data(tmp, n=max(64, a.prompts * (a.steps + 1)))
    cfg = TrainConfig(data=[str(data)], out=str(tmp / "run"), model=model, preset=a.preset, dynamic_sampling=False,
                      rollout_backend="vllm", prompts_per_step=a.prompts, group_size=a.group, max_tokens=a.max_tokens,
                      steps=a.steps, save_every=10**6, micro_batch_size=16, bf16=True, gradient_checkpointing=True)
    ms = [m for m in Trainer(cfg).run(progress=True) if m.get("step", 0) > 0][1:]
    med = {k: round(statistics.median(m[k] for m in ms), 3)
           for k in ("time/step_s", "time/generate_s", "time/reward_s", "time/train_s", "time/push_s")}
    fig = {"gpu": torch.cuda.get_device_name(0), "model": model or "smollm2", "prompts": a.prompts, "group": a.group,
           "max_tokens": a.max_tokens, **med,
           "generate_share": round(med["time/generate_s"] / med["time/step_s"], 3),
           "train_share": round(med["time/train_s"] / med["time/step_s"], 3),
           "tokens_per_s": round(sum(m["tokens_generated"] for m in ms) / sum(m["time/step_s"] for m in ms), 1),
           "max_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2)}
    print(json.dumps(fig, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(fig, indent=2))


if __name__ == "__main__":
    main()
