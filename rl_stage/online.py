"""What a training run learns about its data: the pool's pass rates under the policy being trained.

Every group the trainer generates is a graded sample of its prompt, so a run is also a fresh difficulty
estimate of the pool. At each checkpoint and at its end a run folder holds ``online_difficulty.parquet``: one
row per prompt of the pool with the estimate stage's columns for the prompt's latest group (``n_correct`` of
``k`` at ``step``, its pass rate and Wilson bounds, the model, template and sampling that made it), the run's
totals over all its groups, the offline estimate it started from (``offline_pass_rate``, ``offline_bucket``)
and the sampler's current expected pass rate. Rows the run never drew keep nulls where a count would be.
``moved_by_bucket`` summarises how pass rates moved per offline bucket (``gradus show RUN`` prints it).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from curate.core.shards import atomic_path

SCHEMA = pa.schema([
    pa.field("id", pa.string()),
    pa.field("offline_bucket", pa.string()),
    pa.field("offline_pass_rate", pa.float32()),
    pa.field("n_correct", pa.int32()),
    pa.field("n_graded", pa.int32()),
    pa.field("k", pa.int32()),
    pa.field("pass_rate", pa.float32()),
    pa.field("pass_rate_low", pa.float32()),
    pa.field("pass_rate_high", pa.float32()),
    pa.field("step", pa.int32()),
    pa.field("total_correct", pa.int32()),
    pa.field("total_graded", pa.int32()),
    pa.field("expected_pass_rate", pa.float32()),
    pa.field("model", pa.string()),
    pa.field("template", pa.string()),
    pa.field("temperature", pa.float32()),
    pa.field("max_tokens", pa.int32()),
    pa.field("run_step", pa.int32()),
])


def online_table(sampler, online: dict[str, list], *, model: str, template: str, temperature: float,
                 max_tokens: int, step: int) -> pa.Table:
    """One row per prompt of ``sampler``'s pool, every stage's (``online``: id -> [last correct, last graded, last
    step, total correct, total graded], as the trainer records them)."""
    from curate.difficulty.estimate import wilson
    from rl_stage.data import load_rows

    if hasattr(sampler, "mean"):  # one pool, with a belief about every prompt
        rows, expected = sampler.rows, sampler.mean()
    else:
        rows, expected = load_rows([f for _, fs in sampler.stages for f in fs]), None
    n = len(rows["id"])
    cols: dict[str, list] = {f.name: [] for f in SCHEMA}
    for i in range(n):
        k_off = rows["k"][i]
        rec = online.get(rows["id"][i])
        lo, hi = wilson(rec[0], rec[1]) if rec else (None, None)
        cols["id"].append(rows["id"][i])
        cols["offline_bucket"].append(rows["bucket"][i])
        cols["offline_pass_rate"].append(rows["n_correct"][i] / k_off if k_off else None)
        cols["n_correct"].append(rec[0] if rec else None)
        cols["n_graded"].append(rec[1] if rec else None)
        cols["k"].append(rec[1] if rec else None)
        cols["pass_rate"].append(rec[0] / rec[1] if rec and rec[1] else None)
        cols["pass_rate_low"].append(lo)
        cols["pass_rate_high"].append(hi)
        cols["step"].append(rec[2] if rec else None)
        cols["total_correct"].append(rec[3] if rec else 0)
        cols["total_graded"].append(rec[4] if rec else 0)
        cols["expected_pass_rate"].append(float(expected[i]) if expected is not None else None)
    cols["model"] = [model] * n
    cols["template"] = [template] * n
    cols["temperature"] = [temperature] * n
    cols["max_tokens"] = [max_tokens] * n
    cols["run_step"] = [step] * n
    return pa.table(cols, schema=SCHEMA)


def write_table(table: pa.Table, path: Path) -> Path:
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path


def moved_by_bucket(table: pa.Table) -> list[dict]:
    """Per offline bucket: prompts, how many the run drew, their mean offline pass rate and their mean pass rate in
    the run's latest group of each (both over the drawn prompts), hardest bucket first."""
    order = ["unsolved", "hard", "medium", "easy", "solved", "ungraded", None]
    d = table.select(["offline_bucket", "offline_pass_rate", "pass_rate"]).to_pydict()
    out = []
    buckets = sorted(set(d["offline_bucket"]), key=lambda b: order.index(b) if b in order else len(order) - 1)
    for b in buckets:
        idx = [i for i, x in enumerate(d["offline_bucket"]) if x == b]
        seen = [i for i in idx if d["pass_rate"][i] is not None]
        off = [d["offline_pass_rate"][i] for i in seen if d["offline_pass_rate"][i] is not None]
        out.append({"bucket": b or "unscored", "prompts": len(idx), "drawn": len(seen),
                    "offline": float(np.mean(off)) if off else None,
                    "online": float(np.mean([d["pass_rate"][i] for i in seen])) if seen else None})
    return out


BUCKET_ORDER = ("unsolved", "hard", "medium", "easy", "solved", "ungraded", "unscored")


def read_metrics(run: Path) -> list[dict]:
    path = Path(run) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def plot_run(run: Path) -> Path | None:
    """``plots/training.png`` in a run folder: the pass rate of every generated group by its prompt's offline bucket,
    step by step; the rollouts' reward and accuracy; and the held-out evaluations against completions generated."""
    ms = read_metrics(run)
    steps = [m for m in ms if m.get("step", 0) > 0]
    if not steps:
        return None
    from curate.core.plotting import pyplot

    plt = pyplot()
    evals = [m for m in ms if m.get("eval/prompts")]
    fig, axes = plt.subplots(1, 3 if evals else 2, figsize=(15 if evals else 10, 3.8))
    ax = axes[0]
    buckets = sorted({b for m in steps for b in m.get("accuracy_by_bucket", {})},
                     key=lambda b: BUCKET_ORDER.index(b) if b in BUCKET_ORDER else len(BUCKET_ORDER))
    for b in buckets:
        pts = [(m["step"], m["accuracy_by_bucket"][b]) for m in steps if b in m.get("accuracy_by_bucket", {})]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=b)
    ax.set(title="pass rate by offline bucket", xlabel="step", ylabel="correct / completions", ylim=(-0.02, 1.02))
    if buckets:
        ax.legend(fontsize=8)
    ax = axes[1]
    for key in ("accuracy", "reward", "accuracy_kept"):
        pts = [(m["step"], m[key]) for m in steps if m.get(key) is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=key)
    ax.set(title="rollouts", xlabel="step")
    ax.legend(fontsize=8)
    if evals:
        ax = axes[2]
        for key in sorted(k for k in evals[0] if k.startswith("eval/") and k not in ("eval/prompts", "eval/boxed_rate")):
            pts = [(m.get("completions_total", 0), m[key]) for m in evals if m.get(key) is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=key[5:])
        ax.set(title="held-out", xlabel="completions generated", ylim=(-0.02, 1.02))
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(run) / "plots" / "training.png"
    out.parent.mkdir(exist_ok=True)
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    return out


def completions_line(steps: list[dict]) -> str:
    """Where a run's completions went: generated (screens included), groups trained, completions per trained group,
    the share of completions in trained groups, and what screening and dynamic sampling set aside."""
    trained = sum(m.get("groups") or 0 for m in steps if not m.get("skipped"))
    made = sum(m.get("completions") or 0 for m in steps)
    used = sum(m.get("completions_trained") or 0 for m in steps if not m.get("skipped"))
    screened = sum(m.get("screened_out") or 0 for m in steps)
    dropped = sum(m.get("dropped_groups") or 0 for m in steps)
    skipped = sum(1 for m in steps if m.get("skipped"))
    line = f"completions generated {made:,}, groups trained {trained:,}"
    if trained:
        line += f", {made / trained:.1f} completions per trained group"
    if made and any("completions_trained" in m for m in steps):
        line += f", {used / made:.0%} of completions in trained groups"
    parts = [f"{screened} groups screened out" if screened else "", f"{dropped} groups dropped" if dropped else "",
             f"{skipped} steps skipped" if skipped else ""]
    return line + ("; " + ", ".join(x for x in parts if x) if any(parts) else "")


def summary_lines(run: Path) -> list[str]:
    """What ``gradus show RUN`` prints for a training run: progress, the waste of dynamic sampling, the held-out
    figures, and how pass rates moved per offline bucket."""
    ms = read_metrics(run)
    steps = [m for m in ms if m.get("step", 0) > 0]
    cfg = json.loads((Path(run) / "config.json").read_text()) if (Path(run) / "config.json").exists() else {}
    out = [f"{run}: a training run ({cfg.get('preset', '?')}, sampler {cfg.get('sampler', '?')}, "
           f"template {cfg.get('template', '?')}), {len(steps)} steps of {cfg.get('steps', '?')}"]
    if steps:
        out.append("  " + completions_line(steps))
    evals = [m for m in ms if m.get("eval/prompts")]
    for m in (evals[:1] + evals[-1:]) if len(evals) > 1 else evals:
        figs = ", ".join(f"{k[5:]} {v:.3f}" for k, v in m.items() if k.startswith("eval/") and isinstance(v, float))
        out.append(f"  held-out at step {m['step']}: {figs}")
    table_path = Path(run) / "online_difficulty.parquet"
    if table_path.exists():
        rows = moved_by_bucket(pq.read_table(table_path))
        out.append("  pass rates by offline bucket (prompts the run drew; offline estimate -> the run's latest group):")
        out.append(f"    {'bucket':<10} {'prompts':>8} {'drawn':>7} {'offline':>8} {'online':>8}")
        for r in rows:
            off = "-" if r["offline"] is None else f"{r['offline']:.3f}"
            on = "-" if r["online"] is None else f"{r['online']:.3f}"
            out.append(f"    {r['bucket']:<10} {r['prompts']:>8} {r['drawn']:>7} {off:>8} {on:>8}")
        out.append(f"  the pool's pass rates as this run measured them: {table_path}")
    plot = Path(run) / "plots" / "training.png"
    if plot.exists():
        out.append(f"  plot: {plot}")
    return out
