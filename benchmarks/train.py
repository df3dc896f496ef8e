"""Seconds per GRPO step and generated tokens/s: this trainer vs TRL's GRPOTrainer, same model, data, batch.

Both sides do identical work (``IDENTICAL``; printed with the figures, and the script stops if either side made
more than one optimizer update per rollout batch). A fourth run gives what gradus runs by default (DAPO's dynamic
sampling with the signal sampler): not identical work, so its figure that compares is the time per *useful* group
(a group whose rewards differ: the only kind that moves the policy), beside TRL's.

Both sides: the bundled SmolLM2-135M-Instruct in fp32 on CPU, the same easy-sum prompts in the model's chat
template, P prompts x G completions per step, the same completion budget, temperature 1.0, lr 1e-6, no KL,
token-mean loss (TRL ``loss_type="dapo"``; ours the ``dapo`` preset with dynamic sampling and overlong
shaping off so both do the same work), one optimizer step per batch, math-verify rewards. TRL generates
with transformers ``generate`` (``use_vllm=False``: TRL does not support this vLLM version); ours is run
with transformers rollouts (like for like) and with in-process vLLM rollouts (its default). Each trainer
runs in its own process; the first step (warm-up) is left out of the medians.

    python benchmarks/train.py --steps 6 --prompts 4 --group 4 --max-tokens 64
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def make_data(d: Path, n: int = 32) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from curate.select.export import ExportConfig, export

    rows = []
    for i in range(n):
        a, b = i + 2, 3 * i + 1
        rows.append({"id": f"p{i:03d}", "source": "synthetic", "source_id": str(i), "subject": "arith", "level": "1",
                     "problem": f"What is ${a} + {b}$?", "answer": str(a + b), "n_correct": 5, "n_graded": 10, "k": 10,
                     "pass_rate": 0.5, "pass_rate_low": 0.0, "pass_rate_high": 1.0, "model": "m"})
    (d / "scored" / "kept").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), d / "scored" / "kept" / "part_000000.parquet")
    export([d / "scored"], d / "export", ExportConfig(format="parquet"))
    return d / "export"


# the work both trainers do, pinned: one optimizer update per rollout batch (TRL: steps_per_generation 1,
# num_iterations 1), token-mean loss (TRL loss_type "dapo"), no KL, no dynamic sampling, no overlong shaping, rewards
# 1/0, clip 0.2 both ways, every prompt drawn uniformly, T = 1.0, top_p 1, the chat template with the boxed
# instruction, fp32 on CPU
IDENTICAL = dict(preset="dapo", mini_batches=1, num_iterations=1, kl_coef=0.0, dynamic_sampling=False,
                 overlong_shaping=False, wrong_reward=0.0, eps_low=0.2, eps_high=0.2, sampler="uniform", template="chat",
                 temperature=1.0, top_p=1.0, lr=1e-6)


def run_ours(a, data: Path, out: Path, backend: str, real: bool = False) -> dict:
    from rl_stage.trainer import TrainConfig, Trainer

    setting = dict(IDENTICAL)
    if real:  # what gradus runs by default: DAPO's dynamic sampling with the signal sampler (not identical work)
        setting.update(dynamic_sampling=True, sampler="signal", short_batch="skip")
    cfg = TrainConfig(data=[str(data)], out=str(out), rollout_backend=backend, prompts_per_step=a.prompts,
                      group_size=a.group, max_tokens=a.max_tokens, steps=a.steps, save_every=10**6,
                      micro_batch_size=a.prompts * a.group, seed=0, **setting)
    t0 = time.perf_counter()
    ms = Trainer(cfg).run(progress=False)
    total = time.perf_counter() - t0
    steps = [m for m in ms if m.get("step", 0) > 0][1:]
    # a step skipped as a short batch (dynamic sampling only) generated and graded but trained nothing: it counts
    # in the time per useful group, not in the medians of a trained step
    trained = [m for m in steps if not m.get("skipped")] or steps
    updates = sorted({m.get("updates", 0) for m in trained})
    useful = sum(m.get("groups_with_signal") or 0 for m in steps)
    return {"trainer": f"gradus ({backend} rollouts{', dynamic sampling + signal sampler' if real else ''})",
            "s_per_step": round(statistics.median(m["time/step_s"] for m in trained), 2),
            "tokens_per_s": round(sum(m.get("tokens_generated", 0) for m in trained)
                                  / sum(m["time/step_s"] for m in trained), 1),
            "gen_s": round(statistics.median(m["time/generate_s"] for m in trained), 2),
            "train_s": round(statistics.median(m.get("time/train_s", 0.0) for m in trained), 2),
            "skipped_steps": sum(1 for m in steps if m.get("skipped")),
            "updates_per_batch": updates, "groups_with_signal_per_step": round(useful / len(steps), 2),
            "s_per_useful_group": round(sum(m["time/step_s"] for m in steps) / max(1, useful), 2),
            "wall_s_incl_setup": round(total, 1)}


def run_trl(a, data: Path, out: Path) -> dict:
    import datasets
    from math_verify import parse, verify
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from curate.difficulty.models import resolve_model
    from curate.difficulty.templates import BOXED_INSTRUCTION
    from curate.select.export import read_export

    rows = read_export(data).to_pylist()
    ds = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": f"{r['problem']}\n{BOXED_INSTRUCTION}"}],
                                      "answer": r["answer"]} for r in rows])
    path, _ = resolve_model(None)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    def accuracy(prompts, completions, answer, **kw):
        out = []
        for c, g in zip(completions, answer, strict=True):
            text = c[0]["content"] if isinstance(c, list) else c
            try:
                out.append(float(verify(parse(f"${g}$"), parse(text))))
            except Exception:  # noqa: BLE001 - TRL users' usual in-process grading
                out.append(0.0)
        return out

    marks = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            marks.append((time.perf_counter(), state.global_step))

    cfg = GRPOConfig(output_dir=str(out), per_device_train_batch_size=a.prompts * a.group, num_generations=a.group,
                     max_completion_length=a.max_tokens, temperature=1.0, top_p=1.0, learning_rate=1e-6, beta=0.0,
                     loss_type="dapo", epsilon=0.2, max_steps=a.steps, logging_steps=1, save_strategy="no",
                     report_to="none", use_cpu=True, bf16=False, seed=0, gradient_accumulation_steps=1, use_vllm=False,
                     steps_per_generation=1, num_iterations=1)
    t0 = time.perf_counter()
    trainer = GRPOTrainer(model=model, reward_funcs=[accuracy], args=cfg, train_dataset=ds, processing_class=tok,
                          callbacks=[Clock()])
    start = time.perf_counter()
    trainer.train()
    total = time.perf_counter() - t0
    times = [start] + [t for t, _ in marks]
    per = [times[i + 1] - times[i] for i in range(len(marks))][1:]
    # generated tokens per step from TRL's own log (mean completion length x completions per step)
    lens = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    tk = [ln * a.prompts * a.group for ln in lens][1:]
    zero = [h["frac_reward_zero_std"] for h in trainer.state.log_history if "frac_reward_zero_std" in h][1:]
    useful = sum((1 - z) * a.prompts for z in zero)
    # one optimizer step per generation batch: TRL's global step counts optimizer steps, one per on_step_end
    steps_done = trainer.state.global_step
    return {"trainer": "TRL GRPOTrainer (transformers generate)", "s_per_step": round(statistics.median(per), 2),
            "tokens_per_s": round(sum(tk) / sum(per), 1), "updates_per_batch": [1] if steps_done == a.steps else [],
            "groups_with_signal_per_step": round(useful / max(1, len(zero)), 2),
            "s_per_useful_group": round(sum(per) / max(1e-9, useful), 2), "wall_s_incl_setup": round(total, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--only", choices=["ours-hf", "ours-vllm", "ours-vllm-real", "trl"])
    ap.add_argument("--data")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.only:
        data = Path(a.data)
        with tempfile.TemporaryDirectory(prefix="gradus-train-bench-") as t:  # checkpoints of ~1.6 GB each
            out = Path(t)
            res = (run_trl(a, data, out) if a.only == "trl"
                   else run_ours(a, data, out / "run", a.only.split("-")[1], real=a.only.endswith("-real")))
        print("RESULT " + json.dumps(res), flush=True)
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="gradus-train-bench-") as t:
        data = make_data(Path(t))
        for which in ("trl", "ours-hf", "ours-vllm", "ours-vllm-real"):
            cmd = [sys.executable, __file__, "--only", which, "--data", str(data), "--steps", str(a.steps),
                   "--prompts", str(a.prompts), "--group", str(a.group), "--max-tokens", str(a.max_tokens)]
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if not line:
                print(p.stdout[-3000:], p.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"{which} failed")
            results.append(json.loads(line[-1][7:]))
    identical = [r for r in results if "dynamic sampling" not in r["trainer"]]
    if any(r["updates_per_batch"] != [1] for r in identical):  # the comparison holds only on identical work
        raise SystemExit(f"not identical work: updates per rollout batch {[r['updates_per_batch'] for r in identical]}")
    base = results[0]["s_per_step"]
    for r in results:
        r["speedup_vs_trl"] = round(base / r["s_per_step"], 2)
    try:
        from benchmarks.machine import describe
    except ImportError:  # run as a file (python benchmarks/NAME.py): its folder is on the path
        from machine import describe  # type: ignore[no-redef]

    fig = {"machine": describe(), "steps": a.steps, "prompts_per_step": a.prompts, "group": a.group, "max_tokens": a.max_tokens,
           "identical_work": {**IDENTICAL, "trl": "GRPOConfig(loss_type='dapo', beta=0, epsilon=0.2, steps_per_generation=1, "
                              "num_iterations=1, temperature=1.0, top_p=1.0, learning_rate=1e-6)"},
           "results": results}
    print(json.dumps(fig, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(fig, indent=2))


if __name__ == "__main__":
    main()
