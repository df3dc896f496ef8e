"""A learning run on CPU with the real SmolLM2: held-out accuracy before and after, per preset, across seeds.

Data: easy generated sums and differences (``synthetic:kinds=arith,difficulty=1``): of 600 generated, the
distinct problems, 32 held out and the rest for training, all in one curriculum stage. Each (preset, seed)
run trains ``--steps`` steps with vLLM rollouts and evaluates greedy pass@1 and mean@4 on the held-out
prompts before the first and after the last step. Prints per-run figures and mean +- std across seeds.

    python benchmarks/learn.py --presets dapo,dr_grpo --seeds 0,1 --steps 20
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def make_sets(d: Path) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.compute as pc

    from curate.core.shards import read_table
    from curate.pipeline import ingest
    from curate.select.export import ExportConfig, export

    ingest("synthetic:n=600,seed=21,difficulty=1-1,kinds=arith,extras=0", d / "ing")
    t = read_table(d / "ing" / "kept")
    first = {}
    for i, pid in enumerate(t["id"].to_pylist()):
        first.setdefault(pid, i)  # small numbers repeat: keep each problem once
    t = t.take(pa.array(sorted(first.values()), pa.int64()))
    n = t.num_rows
    t = t.set_column(t.column_names.index("n_correct"), "n_correct", pa.array([1] * n, pa.int32()))
    t = t.set_column(t.column_names.index("n_graded"), "n_graded", pa.array([2] * n, pa.int32()))
    t = t.set_column(t.column_names.index("pass_rate"), "pass_rate", pa.array([0.5] * n, pa.float32()))
    idx = pc.indices_nonzero(pc.greater_equal(pa.array(range(n)), 0))
    train, held = t.take(idx[: n - 32]), t.take(idx[n - 32 :])
    out = []
    for name, part in (("train", train), ("heldout", held)):
        import pyarrow.parquet as pq

        (d / name / "kept").mkdir(parents=True)
        pq.write_table(part, d / name / "kept" / "part_000000.parquet")
        export([d / name], d / f"{name}_export", ExportConfig(format="parquet"))
        out.append(d / f"{name}_export")
    return out[0], out[1]


def one(a, preset: str, seed: int, train: Path, held: Path, out: Path) -> dict:
    from rl_stage.trainer import TrainConfig, Trainer

    cfg = TrainConfig(data=[str(train)], eval_data=[str(held)], eval_prompts=32, eval_k=4, out=str(out), preset=preset,
                      rollout_backend="vllm", prompts_per_step=a.prompts, group_size=a.group, max_tokens=a.max_tokens,
                      steps=a.steps, save_every=10**6, lr=a.lr, micro_batch_size=16, seed=seed, temperature=1.0)
    ms = Trainer(cfg).run(progress=True)
    first, last = ms[0], ms[-1]
    steps = [m for m in ms if m.get("step", 0) > 0]
    return {"preset": preset, "seed": seed,
            "pass@1_before": first["eval/pass@1_greedy"], "pass@1_after": last["eval/pass@1_greedy"],
            "mean@4_before": first["eval/mean@4"], "mean@4_after": last["eval/mean@4"],
            "train_accuracy_first5": statistics.mean(m["accuracy"] or 0 for m in steps[:5]),
            "train_accuracy_last5": statistics.mean(m["accuracy"] or 0 for m in steps[-5:]),
            "s_per_step": statistics.median(m["time/step_s"] for m in steps),
            "skipped_steps": sum(1 for m in steps if m.get("skipped")),
            "updates": sum(m.get("updates") or 0 for m in steps)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="dapo,dr_grpo")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--one", help="internal: PRESET:SEED:TRAIN:HELD")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.one:
        preset, seed, train, held = a.one.split(":")
        r = one(a, preset, int(seed), Path(train), Path(held), Path(tempfile.mkdtemp(prefix="gradus-learn-")) / "run")
        print("RESULT " + json.dumps(r), flush=True)
        return
    tmp = Path(tempfile.mkdtemp(prefix="gradus-learn-"))
    train, held = make_sets(tmp)
    runs = []
    for preset in a.presets.split(","):
        for seed in map(int, a.seeds.split(",")):
            cmd = [sys.executable, __file__, "--one", f"{preset}:{seed}:{train}:{held}", "--steps", str(a.steps),
                   "--prompts", str(a.prompts), "--group", str(a.group), "--max-tokens", str(a.max_tokens), "--lr", str(a.lr)]
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if not line:
                print(p.stdout[-3000:], p.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"{preset} seed {seed} failed")
            runs.append(json.loads(line[-1][7:]))
            print(json.dumps(runs[-1]), flush=True)
    summary = {}
    for preset in a.presets.split(","):
        rs = [r for r in runs if r["preset"] == preset]
        summary[preset] = {}
        for k in ("pass@1_before", "pass@1_after", "mean@4_before", "mean@4_after"):
            v = [r[k] for r in rs]
            summary[preset][k] = f"{statistics.mean(v):.3f} +- {statistics.stdev(v) if len(v) > 1 else 0:.3f}"
    fig = {"steps": a.steps, "prompts_per_step": a.prompts, "group": a.group, "max_tokens": a.max_tokens, "lr": a.lr,
           "runs": runs, "summary": summary}
    print(json.dumps(fig, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(fig, indent=2))


if __name__ == "__main__":
    main()
