"""Does curated difficulty make RL training better? Prompt samplers against uniform at an equal completion budget.

SmolLM2-135M-Instruct on CPU, preset ``dapo`` with one update per rollout batch (4 prompts x 8 completions a step,
128 tokens, lr 1e-5, template ``fewshot``, T = 1.0, dynamic sampling with at most 10 generation batches a step, short
batches skipped and counted). Every arm trains until it has generated the same number of completions (``--budget``; dropped
groups counted) and is evaluated on the same held-out prompts at fixed points of that budget (``--evals``: greedy
pass@1 and mean@2 at T = 1.0, per prompt in eval.jsonl).

Two task families, four levels each:

- ``ladder``: the bundled generator (``synthetic:mix=ladder``), levels 1-4, held-out and training problems
  distinct;
- ``rg``: procedural tasks of the ``reasoning-gym`` package, read through gradus's own source
  (``reasoning_gym:task=...``), one task setting per level (``RG_LEVELS``), held-out seeds far from the
  training ones and any problem text shared with the held-out set removed from training.

The training problems are scored once by ``gradus estimate`` (the same model and template, ``--k`` samples at
T = 1.0); that cost in completions is reported beside the arms. Arms, on the same scored pool:

- ``uniform``: every prompt alike (one pool, epoch-free uniform draws), no difficulty used;
- ``kimi``: gradus's curriculum as it was (export ``--curriculum`` without the never- and always-solved rows,
  stages easy to hard over the expected number of steps, Kimi k1.5's ``max(floor, 1 - s)`` weights);
- ``signal``: the default sampler (``rl_stage.samplers.signal``): Thompson draws where a group carries a signal, the
  offline estimate as prior;
- ``signal_flat``: the same with every prompt flat (what the offline estimate adds).

Reported, per family: completions per trained group (the waste of dynamic sampling), final held-out mean@2
and greedy accuracy at the budget with paired 95% intervals against ``uniform`` over prompts (seeds averaged
first), per level and overall, and seed by seed; the completions each arm needed to reach uniform's final
mean@2 (linear between evaluation points); and the offline estimate's own cost. Every run's metrics.jsonl and
eval.jsonl are kept under ``--keep``.

    python -P benchmarks/learn.py --family ladder --data /tmp/learn-ladder --jobs 2
    python -P benchmarks/learn.py --family rg --data /tmp/learn-rg --jobs 2
    python -P benchmarks/learn.py --report /tmp/learn-ladder /tmp/learn-rg --json benchmarks/results/learn_ab.json

A run that is stopped loses nothing finished: prepared sets and finished runs are kept in DATA and not run again.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

LEVELS = ("1", "2", "3", "4")
ARMS = ("uniform", "kimi", "signal", "signal_flat", "signal_screen")
SCREEN = 4  # signal_screen: completions of a candidate's screen (of group_size 8), the rest only where worth it
# reasoning-gym task settings, one per level, easiest first. SmolLM2-135M with fewshot at T = 1.0 (16 problems x 8
# samples each): chain_sum 2 x 1 digit 0.14, products 1 x 1 digit 0.12, basic_arithmetic 2 x 1 digit 0.03 (chat 0.04
# and qwen_math 0.02 on chain_sum); leg_counting, lcm, simple_equations and 3-term sums were at 0.00-0.02: no
# reasoning-gym task found reaches the 0.1-0.9 span for this model (the scored pool's means are in the results)
RG_LEVELS = {
    "1": "task=chain_sum,min_terms=2,max_terms=2,min_digits=1,max_digits=1",
    "2": "task=products,min_terms=2,max_terms=2,min_digits=1,max_digits=1",
    "3": "task=chain_sum,min_terms=2,max_terms=2,min_digits=1,max_digits=2",
    "4": "task=basic_arithmetic,min_terms=2,max_terms=2,min_digits=1,max_digits=1,allow_parentheses=true",
}
# one optimizer update per rollout batch (mini_batches=1, as the CPU learning setting in shared/ENGINES.md): the dapo
# preset's 4 updates a batch cost 4x the training time for the same completions
SETTING = dict(preset="dapo", mini_batches=1, rollout_backend="vllm", template="fewshot", prompts_per_step=4,
               group_size=8, max_tokens=128, lr=1e-5, temperature=1.0, micro_batch_size=16, short_batch="skip", eval_k=4)


def problem_key(text: str) -> str:
    """What makes two problems the same task, whatever the wording: the numbers and operators in order (``What is
    3 + 5?`` and ``Calculate 3+5.`` share ``3 + 5``)."""
    import re

    return " ".join(re.findall(r"\d+(?:\.\d+)?|[-+*/×÷^()=<>]", text.replace("\\times", "*").replace("\\cdot", "*")))


def distinct_held(rows: list[dict], per_level: int) -> tuple[list[dict], set[str]]:
    """``per_level`` held-out rows a level whose tasks (``problem_key``) appear once across every level, lower
    levels first; and the keys they hold (no training row may share one)."""
    seen: set[str] = set()
    out = []
    for lv in LEVELS:
        n = 0
        for r in rows:
            k = problem_key(r["problem"])
            if str(r["level"]) == lv and n < per_level and k not in seen:
                seen.add(k)
                out.append(r)
                n += 1
    return out, seen


def _write_jsonl(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _sources(family: str, d: Path, a) -> None:
    """The held-out and training problems as ingested stage folders ``held_in`` and ``train_in``."""
    from curate.core.shards import read_table
    from curate.pipeline import ingest

    if family == "ladder":
        from curate.sources.synthetic import generate

        want = 3 * a.held_per_level + a.train_per_level
        picked, seen, per = [], set(), defaultdict(int)
        for r in generate(400 * want, a.data_seed, difficulty=(1, 4), mix="ladder"):
            if r["problem"] not in seen and per[str(r["level"])] < want:
                seen.add(r["problem"])
                per[str(r["level"])] += 1
                picked.append(r)
        held, keys = distinct_held(picked, a.held_per_level)
        per_train: dict = defaultdict(int)
        train = []
        for r in picked:
            if problem_key(r["problem"]) not in keys and per_train[str(r["level"])] < a.train_per_level:
                per_train[str(r["level"])] += 1
                train.append(r)
        for name, rows in (("held", held), ("train", train)):
            _write_jsonl(rows, d / "src" / f"{name}.jsonl")
            ingest(str(d / "src" / f"{name}.jsonl"), d / f"{name}_in", adapter="generic")
        return
    # reasoning-gym: each level its own source; held-out seeds 10^6 away from the training ones
    for name, n, base in (("held", 3 * a.held_per_level, 10**6), ("train", a.train_per_level, 0)):
        for lv, spec in RG_LEVELS.items():
            ingest(f"reasoning_gym:{spec},n={n},seed={base + a.data_seed * 10**4},level={lv}",
                   d / "rg" / f"{name}_{lv}", source_name=f"rg{lv}")
    held_rows, keys = distinct_held([r for lv in LEVELS for r in read_table(d / "rg" / f"held_{lv}" / "kept").to_pylist()],
                                    a.held_per_level)
    train_rows = [r for lv in LEVELS for r in read_table(d / "rg" / f"train_{lv}" / "kept").to_pylist()
                  if problem_key(r["problem"]) not in keys]
    for name, rows in (("held", held_rows), ("train", train_rows)):
        plain = [{"id": r["source_id"], "problem": r["problem"], "answer": r["answer"], "level": r["level"],
                  "subject": r["subject"]} for r in rows]
        _write_jsonl(plain, d / "src" / f"{name}.jsonl")
        ingest(str(d / "src" / f"{name}.jsonl"), d / f"{name}_in", adapter="generic")


def prepare(family: str, d: Path, a) -> dict:
    """Sets, the offline estimate of the training pool and the kimi arm's curriculum export; their figures."""
    from curate.core.shards import read_table
    from curate.difficulty.engines import SamplingConfig
    from curate.difficulty.estimate import EstimateConfig, estimate
    from curate.select.export import ExportConfig, export

    _sources(family, d, a)
    cfg = EstimateConfig(template="fewshot", store=None, chunk_rows=32,
                         sampling=SamplingConfig(k=a.k, temperature=1.0, max_tokens=a.max_tokens, seed=0))
    t0 = time.time()
    estimate([d / "train_in"], d / "scored", cfg)
    est_s = time.time() - t0
    export([d / "scored"], d / "kimi", ExportConfig(curriculum=True, include_ends=False, card=False))
    scored = read_table(d / "scored" / "kept", columns=["id", "level", "pass_rate", "n_correct", "k"]).to_pylist()
    held = read_table(d / "held_in" / "kept", columns=["id", "level"]).to_pylist()
    by_level = defaultdict(list)
    for r in scored:
        by_level[str(r["level"])].append(r["pass_rate"])
    rates = [r["pass_rate"] for r in scored]
    return {"family": family, "estimate_k": a.k, "levels": {r["id"]: str(r["level"]) for r in held},
            "train_rows": len(scored), "heldout_rows": len(held),
            "heldout_by_level": {lv: sum(str(r["level"]) == lv for r in held) for lv in LEVELS},
            "scored_mean_pass_rate": round(statistics.mean(rates), 3),
            "scored_mean_by_level": {lv: round(statistics.mean(v), 3) for lv, v in sorted(by_level.items())},
            "never_solved_rows": sum(x == 0 for x in rates), "always_solved_rows": sum(x == 1 for x in rates),
            "offline_estimate_completions": sum(int(r["k"]) for r in scored), "offline_estimate_s": round(est_s, 1)}


def arm_config(arm: str, seed: int, d: Path, out: Path, a, sets: dict):
    from rl_stage.trainer import TrainConfig

    kw = dict(SETTING, max_tokens=a.max_tokens, seed=seed, out=str(out), eval_data=[str(d / "held_in")],
              eval_prompts=10**6, budget_completions=a.budget, eval_every_completions=a.budget // a.evals,
              eval_at_start=True, steps=10**6, save_every=a.save_every)
    if arm == "kimi":  # the stages share the steps the budget is expected to buy at uniform's waste; the last one
        # goes on until the budget is spent
        expected = max(3, round(a.budget / (SETTING["prompts_per_step"] * SETTING["group_size"] * 3.5)))
        return TrainConfig(data=[str(d / "kimi")], sampler="kimi", stage_steps=max(1, expected // 3), **kw)
    if arm == "uniform":
        return TrainConfig(data=[str(d / "scored")], sampler="uniform", **kw)
    return TrainConfig(data=[str(d / "scored")], sampler="signal", offline_prior=arm != "signal_flat",
                       screen=SCREEN if arm == "signal_screen" else 0, **kw)


def one(a, arm: str, seed: int, d: Path) -> None:
    """One (arm, seed) run into DATA/runs/ARM_SEED (resumed where a checkpoint is)."""
    from rl_stage.trainer import Trainer

    sets = json.loads((d / "sets.json").read_text())
    out = d / "runs" / f"{arm}_{seed}"
    cfg = arm_config(arm, seed, d, out, a, sets)
    resume = (out / "metrics.jsonl").exists()
    Trainer(cfg, resume=resume).run(progress=True)
    (out / "DONE").write_text("")
    # a finished run needs its checkpoints no more (1.6 GB each for SmolLM2-135M: model and optimizer state)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)


def run_all(a, d: Path) -> None:
    """Every (arm, seed) not yet done, each in a child process; exits 1 after the others if any run failed. A run
    done here or already kept under ``--keep`` (as a folder or in its runs.parquet, say by another machine's
    session) is not run again."""
    dest, kept = kept_runs(a)
    jobs = []
    for arm, seed in asked(a):
        if f"{arm}_{seed}" in kept:
            print(f"{arm} seed {seed}: kept before in {dest}, not run again", flush=True)
        elif not (d / "runs" / f"{arm}_{seed}" / "DONE").exists():
            jobs.append((arm, seed))
    env = dict(os.environ, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 2) // a.jobs)))

    def go(job) -> bool:
        arm, seed = job
        cmd = [sys.executable, "-P", __file__, "--one", f"{arm}:{seed}", "--data", str(d), "--budget", str(a.budget),
               "--evals", str(a.evals), "--max-tokens", str(a.max_tokens), "--save-every", str(a.save_every)]
        log = d / "runs" / f"{arm}_{seed}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as f:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
        if p.returncode == 0 and a.keep:  # each finished run kept as it lands (a stopped session loses nothing done)
            keep_run(d / "runs" / f"{arm}_{seed}", Path(a.keep) / json.loads((d / "sets.json").read_text())["family"], a)
        print(f"{arm} seed {seed}: {'done' if p.returncode == 0 else f'FAILED (exit {p.returncode}, see {log})'}",
              flush=True)
        return p.returncode == 0

    with ThreadPoolExecutor(a.jobs) as ex:
        failed = [f"{arm}_{seed}" for (arm, seed), ok in zip(jobs, ex.map(go, jobs), strict=True) if not ok]
    if failed:  # a driver that goes on to the next runs must not count these as done
        sys.exit(f"{len(failed)} of {len(jobs)} runs failed: {', '.join(failed)} (their logs in {d / 'runs'})")


def asked(a) -> list[tuple[str, int]]:
    """The (arm, seed) pairs of ``--arms`` and ``--seeds``, seed by seed."""
    return [(arm, seed) for seed in map(int, a.seeds.split(",")) for arm in a.arms.split(",")]


def kept_folders(d: Path) -> list[Path]:
    """The run folders ``keep_run`` wrote into a family folder (those with their eval.jsonl)."""
    return [x for x in sorted(d.glob("*_*")) if x.is_dir() and (x / "eval.jsonl").exists()]


def kept_runs(a) -> tuple[Path | None, set[str]]:
    """The family's folder under ``--keep`` and the names of the runs kept there (folders with their eval.jsonl,
    and those packed into its runs.parquet)."""
    if not a.keep:
        return None, set()
    dest = Path(a.keep) / a.family
    return dest, set(packed_runs(dest)) | {x.name for x in kept_folders(dest)}


def keep_run(run: Path, dest: Path, a) -> None:
    """A finished run's metrics, evaluations and settings into ``dest/RUN`` (and the family's sets once)."""
    (dest / run.name).mkdir(parents=True, exist_ok=True)
    for name in ("metrics.jsonl", "eval.jsonl", "config.json"):
        if (run / name).exists():
            shutil.copy(run / name, dest / run.name / name)
    sets = run.parent.parent / "sets.json"
    if not (dest / "sets.json").exists():
        shutil.copy(sets, dest / "sets.json")


# ---- the report ------------------------------------------------------------------------------------------
def paired(diffs: list[float]) -> tuple[float, float, float]:
    """Mean of paired differences and its normal 95% interval (nan bounds for one difference)."""
    n = len(diffs)
    m = statistics.mean(diffs)
    if n < 2:
        return m, math.nan, math.nan
    h = 1.96 * statistics.stdev(diffs) / math.sqrt(n)
    return m, m - h, m + h


def _fmt(t: tuple[float, float, float]) -> str:
    return f"{t[0]:+.3f}" + ("" if math.isnan(t[1]) else f" [{t[1]:+.3f}, {t[2]:+.3f}]")


PACKED = "runs.parquet"  # a family's kept runs in one file: a row per line of each run's jsonl files (config: one)
RUN_FILES = ("metrics.jsonl", "eval.jsonl", "config.json")


def packed_runs(d: Path) -> dict[str, dict[str, str]]:
    """``d/runs.parquet`` as {run folder name: {file name: text}} (empty without one)."""
    import pyarrow.parquet as pq

    if not (d / PACKED).exists():
        return {}
    files: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in sorted(pq.read_table(d / PACKED).to_pylist(), key=lambda r: (r["run"], r["file"], r["line"])):
        files[r["run"]][r["file"]].append(r["text"])
    return {run: {f: "".join(x + "\n" for x in lines) if f.endswith(".jsonl") else lines[0] for f, lines in fs.items()}
            for run, fs in files.items()}


def pack(d: Path) -> int:
    """The kept run folders of a family folder into ``d/runs.parquet`` (with the runs packed before; a run packed
    again replaces its rows), then those folders removed: they are the runs ``--keep`` copied there. Returns the
    runs packed now."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    runs = packed_runs(d)
    folders = kept_folders(d)
    for x in folders:
        other = sorted(p.name for p in x.iterdir() if p.name not in RUN_FILES)
        if other:
            raise RuntimeError(f"{x}: holds {', '.join(other)}, not a run kept by this script; nothing packed")
    for x in folders:
        runs[x.name] = {f: (x / f).read_text() for f in RUN_FILES if (x / f).exists()}
    rows = [{"run": run, "file": f, "line": i, "text": line} for run, fs in sorted(runs.items())
            for f, text in sorted(fs.items()) for i, line in enumerate(text.splitlines() if f.endswith(".jsonl") else [text])]
    t = pa.table({k: [r[k] for r in rows] for k in ("run", "file", "line", "text")},
                 schema=pa.schema([("run", pa.string()), ("file", pa.string()), ("line", pa.int32()), ("text", pa.string())]))
    tmp = d / f".{PACKED}.tmp"
    pq.write_table(t, tmp, compression="zstd")
    os.replace(tmp, d / PACKED)
    if packed_runs(d) != runs:
        raise RuntimeError(f"{d / PACKED}: what was written does not read back as the runs; nothing removed")
    for x in folders:
        for f in RUN_FILES:
            (x / f).unlink(missing_ok=True)
        x.rmdir()
    return len(folders)


def unpack(d: Path, dest: Path) -> None:
    """The runs of ``d/runs.parquet`` as run folders under ``dest`` (what earlier versions of this script read)."""
    for run, fs in packed_runs(d).items():
        (dest / run).mkdir(parents=True, exist_ok=True)
        for f, text in fs.items():
            (dest / run / f).write_text(text)


def load_runs(d: Path) -> list[dict]:
    """The finished runs of a family: ``d/runs`` (a working folder), or the runs kept in ``d`` (packed in
    ``runs.parquet`` and in run folders not yet packed)."""
    runs = []
    root = d / "runs" if (d / "runs").is_dir() else d
    texts = {} if root != d else packed_runs(d)
    for out in sorted(root.glob("*_*")):
        if not out.is_dir() or not (out / "eval.jsonl").exists() or (root == d / "runs" and not (out / "DONE").exists()):
            continue
        texts[out.name] = {f: (out / f).read_text() for f in ("metrics.jsonl", "eval.jsonl")}
    for name, fs in sorted(texts.items()):
        arm, _, seed = name.rpartition("_")
        ms = [json.loads(x) for x in fs["metrics.jsonl"].splitlines()]
        ev = [json.loads(x) for x in fs["eval.jsonl"].splitlines()]
        runs.append({"arm": arm, "seed": int(seed), "metrics": ms, "eval": ev})
    return runs


T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def t_interval(xs: list[float]) -> tuple[float, float, float]:
    """Mean and Student's t 95% interval over seeds (nan bounds for one seed)."""
    m = statistics.mean(xs)
    if len(xs) < 2:
        return m, math.nan, math.nan
    h = T95.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, m - h, m + h


def at_budget(points: dict[int, list[dict]], budget: int, keys: tuple[str, ...]) -> dict[str, tuple]:
    """Per prompt, each metric of ``keys`` at exactly ``budget`` completions: linear between the last evaluation
    before the budget and the first at or after it (the run stops after the step that crosses it)."""
    xs = sorted(points)
    hi = next((x for x in xs if x >= budget), xs[-1])
    lo = max((x for x in xs if x < hi), default=hi)
    w = 0.0 if hi == lo else min(1.0, (budget - lo) / (hi - lo))
    a = {e["id"]: e for e in points[lo]}
    return {e["id"]: tuple((1 - w) * float(a[e["id"]][k]) + w * float(e[k]) for k in keys)
            for e in points[hi] if e["id"] in a}


def halves(steps: list[dict], budget: int) -> list[list[int]]:
    """[completions, trained groups] of the steps that started in the budget's first half and of the rest (a step
    starts at the run's completions before it; a skipped step trains nothing)."""
    out = [[0, 0], [0, 0]]
    for m in steps:
        c = m.get("completions") or 0
        part = out[0 if (m.get("completions_total") or 0) - c < budget / 2 else 1]
        part[0] += c
        part[1] += 0 if m.get("skipped") else m.get("groups") or 0
    return out


def report(d: Path, budget: int) -> dict:
    sets = json.loads((d / "sets.json").read_text())
    levels = sets["levels"]
    runs = load_runs(d)
    out: dict = {"data": {k: v for k, v in sets.items() if k != "levels"}, "arms": {}, "vs_uniform": {}}
    k = next((e["k"] for r in runs for e in r["eval"]), 2)
    mk = f"mean@{k}"
    keys = (mk, "greedy_correct", "boxed")
    # uniform's step-0 evaluation stands in for runs from before every arm evaluated at step 0 (the same policy)
    start = {r["seed"]: [e for e in r["eval"] if e["step"] == 0] for r in runs if r["arm"] == "uniform"}
    final: dict = {}  # (arm, seed) -> {id: (mean@k, greedy, boxed)} at exactly the budget
    curve: dict = defaultdict(list)  # arm -> [(completions, seed, mean@k overall)]
    estimate_cost = sets.get("offline_estimate_completions", 0)
    for r in runs:
        steps = [m for m in r["metrics"] if m.get("step", 0) > 0]
        trained = sum(m.get("groups") or 0 for m in steps if not m.get("skipped"))
        completions = sum(m.get("completions") or 0 for m in steps)
        in_trained = sum(m.get("completions_trained") or 0 for m in steps if not m.get("skipped"))
        points = defaultdict(list)
        own0 = [e for e in r["eval"] if e["step"] == 0]
        for e in (own0 or start.get(r["seed"], [])) + [e for e in r["eval"] if e["step"] > 0]:
            points[e.get("completions", 0) if e["step"] > 0 else 0].append(e)
        final[r["arm"], r["seed"]] = at_budget(points, budget, keys)
        for c, es in sorted(points.items()):
            curve[r["arm"]].append((c, r["seed"], statistics.mean(e[mk] for e in es)))
        f = final[r["arm"], r["seed"]]
        row = out["arms"].setdefault(r["arm"], {"runs": []})
        row["runs"].append({"seed": r["seed"], "steps": len(steps), "trained_groups": trained, "completions": completions,
                            "halves": halves(steps, budget),
                            "completions_per_group": round(completions / trained, 2) if trained else None,
                            "trained_share": round(in_trained / completions, 3) if completions and in_trained else None,
                            "screened_out": sum(m.get("screened_out") or 0 for m in steps),
                            "skipped_steps": sum(1 for m in steps if m.get("skipped")),
                            f"final_{mk}": round(statistics.mean(v[0] for v in f.values()), 4),
                            "final_greedy": round(statistics.mean(v[1] for v in f.values()), 4),
                            "final_boxed": round(statistics.mean(v[2] for v in f.values()), 4),
                            "curve": [(c, round(statistics.mean(e[mk] for e in es), 4)) for c, es in sorted(points.items())]})
    for arm, row in out["arms"].items():
        rs = row["runs"]
        row["completions_per_group"] = round(sum(x["completions"] for x in rs) / max(1, sum(x["trained_groups"] for x in rs)), 2)
        # waste over the run: completions per trained group in the budget's first half and in the rest
        made, trained = ([sum(x["halves"][i][j] for x in rs) for i in (0, 1)] for j in (0, 1))
        row["completions_per_group_by_half"] = [round(c / g, 2) if g else None for c, g in zip(made, trained, strict=True)]
        shares = [x["trained_share"] for x in rs if x["trained_share"] is not None]
        row["trained_share"] = round(statistics.mean(shares), 3) if shares else None
        row["completions_used"] = [x["completions"] for x in rs]
        row["offline_estimate_completions"] = estimate_cost if arm in ("signal", "signal_screen", "kimi") else 0
        for name in (f"final_{mk}", "final_greedy", "final_boxed"):
            row[name] = round(statistics.mean(x[name] for x in rs), 4)
    out["budget"], out["metric"] = budget, mk
    uni = out["arms"].get("uniform")
    if uni:  # uniform's final mean@k unrounded
        target = statistics.mean(statistics.mean(v[0] for v in final["uniform", x["seed"]].values()) for x in uni["runs"])
        for arm, row in out["arms"].items():
            row["completions_per_group_vs_uniform"] = round(row["completions_per_group"] / uni["completions_per_group"], 3)
            reach = _reach(curve[arm], target)
            row["completions_to_uniform_final"] = reach
            row["completions_to_uniform_final_with_estimate"] = (None if reach is None
                                                                 else reach + row["offline_estimate_completions"])
    for arm in out["arms"]:
        if arm == "uniform":
            continue
        seeds = sorted(s for (x, s) in final if x == arm and ("uniform", s) in final)
        if not seeds:
            continue
        res: dict = {"seeds": seeds}
        for mi, metric in enumerate((mk, "greedy", "boxed")):
            for lv in (*LEVELS, "all"):
                ids = [i for i in final["uniform", seeds[0]] if (lv == "all" or levels.get(i) == lv)
                       and all(i in final[arm, s] and i in final["uniform", s] for s in seeds)]
                if not ids:
                    continue
                per_prompt = [statistics.mean(final[arm, s][i][mi] - final["uniform", s][i][mi] for s in seeds)
                              for i in ids]
                per_seed = [statistics.mean(final[arm, s][i][mi] - final["uniform", s][i][mi] for i in ids)
                            for s in seeds]
                res.setdefault(metric, {})[lv] = {"seeds_t": _fmt(t_interval(per_seed)),
                                                  "prompts_paired": _fmt(paired(per_prompt)), "prompts": len(ids)}
                if lv == "all":
                    res.setdefault("by_seed", {})[metric] = {str(s): round(x, 4) for s, x in zip(seeds, per_seed, strict=True)}
        out["vs_uniform"][arm] = res
    return out


def markdown(figs: dict) -> str:
    """The report's tables as docs/benchmarks.md shows them."""
    out = []
    for family, fig in figs.items():
        data, mk = fig["data"], fig["metric"]
        out.append(f"**{family}** ({data['train_rows']} training problems scored at k = {data.get('estimate_k', 8)}: "
                   f"mean pass rate {data['scored_mean_pass_rate']}, by level {data['scored_mean_by_level']}; "
                   f"{data['never_solved_rows']} never and {data['always_solved_rows']} always solved; the offline "
                   f"estimate cost {data['offline_estimate_completions']:,} completions; {data['heldout_rows']} distinct "
                   f"prompts held out; every figure at exactly {fig['budget']} completions, interpolated)\n")
        out.append(f"| arm | seeds | completions per trained group (vs uniform) | in trained groups | held-out {mk} | "
                   f"greedy | boxed | {mk} vs uniform: over seeds (t) | over prompts (paired) | greedy vs uniform (t) "
                   f"| completions to uniform's final {mk} (+ estimate) |")
        out.append("|---|---:|---:|---:|---:|---:|---:|---|---|---|---:|")
        for arm in ARMS:
            r = fig["arms"].get(arm)
            if not r:
                continue
            vs = fig["vs_uniform"].get(arm, {})
            m = vs.get(mk, {}).get("all", {})
            g = vs.get("greedy", {}).get("all", {})
            reach, reach_e = r.get("completions_to_uniform_final"), r.get("completions_to_uniform_final_with_estimate")
            share = "-" if r.get("trained_share") is None else f"{r['trained_share']:.0%}"
            reach_s = "not reached" if reach is None else f"{reach:,}" + (f" ({reach_e:,})" if reach_e != reach else "")
            ratio = r.get("completions_per_group_vs_uniform")
            out.append(f"| {arm} | {len(r['runs'])} | {r['completions_per_group']} ({ratio}x) "
                       f"| {share} | {r[f'final_{mk}']:.3f} | {r['final_greedy']:.3f} | {r['final_boxed']:.3f} | "
                       f"{m.get('seeds_t', '-')} | {m.get('prompts_paired', '-')} | {g.get('seeds_t', '-')} | {reach_s} |")
        levels = [lv for lv in LEVELS if any(lv in v.get(mk, {}) for v in fig["vs_uniform"].values())]
        if levels:
            out.append(f"\n{mk} against uniform by level (t over seeds); per seed, all levels:\n")
            out.append("| arm | " + " | ".join(f"level {lv}" for lv in levels) + " | per seed |")
            out.append("|---|" + "---|" * len(levels) + "---|")
            for arm, vs in fig["vs_uniform"].items():
                cells = [vs[mk].get(lv, {}).get("seeds_t", "-") for lv in levels]
                seeds = ", ".join(f"{v:+.3f}" for v in vs.get("by_seed", {}).get(mk, {}).values())
                out.append(f"| {arm} | " + " | ".join(cells) + f" | {seeds} |")
        out.append("")
    return "\n".join(out)


def _reach(points: list[tuple[int, int, float]], target: float) -> int | None:
    """Completions at which the seed-averaged curve first reaches ``target``.

    Each seed's curve is linear between its evaluations, which fall at slightly different completions (each after the
    step that crosses a point of the budget); their average is taken at every seed's evaluation points, between which
    it is linear too. So an arm's own final figure, interpolated to exactly the budget, is reached at the budget."""
    import numpy

    by_seed: dict = defaultdict(list)
    for c, s, v in points:
        by_seed[s].append((c, v))
    runs = [sorted(v) for v in by_seed.values()]
    low, top = max(r[0][0] for r in runs), min(r[-1][0] for r in runs)
    xs = sorted({c for r in runs for c, _ in r if low <= c <= top} | {low, top})
    ys = [statistics.mean(float(numpy.interp(x, *zip(*r, strict=True))) for r in runs) for x in xs]
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        if y >= target - 1e-12:
            if i == 0:
                return round(x)
            x0, y0 = xs[i - 1], ys[i - 1]
            return round(x0 + (target - y0) / (y - y0) * (x - x0)) if y != y0 else round(x)
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--family", choices=("ladder", "rg"))
    ap.add_argument("--data", help="the family's working folder (sets, scored pool, runs)")
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (each gets cores / jobs threads)")
    # 384: 4 arms x 3 seeds of one family in about an hour on 2 cores (two runs at a time, about 10 minutes each)
    ap.add_argument("--budget", type=int, default=384, help="completions each run generates (dropped groups counted)")
    ap.add_argument("--evals", type=int, default=2, help="held-out evaluations along the budget (at budget / evals, ...)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=4, help="samples per training problem for the offline estimate (the "
                    "sampler weighs an estimate as at most prior_strength = 4 samples: more is not used)")
    ap.add_argument("--held-per-level", type=int, default=40)
    ap.add_argument("--train-per-level", type=int, default=60)
    ap.add_argument("--data-seed", type=int, default=3)
    ap.add_argument("--save-every", type=int, default=4, help="checkpoint every N steps (a stopped run resumes there)")
    ap.add_argument("--prepare-only", action="store_true", help="make the sets and the offline estimate, run nothing")
    ap.add_argument("--one", help="internal: ARM:SEED")
    ap.add_argument("--report", nargs="*", help="family folders to report on")
    ap.add_argument("--keep", help="copy each run's metrics.jsonl and eval.jsonl here (per family)")
    ap.add_argument("--json")
    ap.add_argument("--markdown", action="store_true", help="with --report: the tables of docs/benchmarks.md")
    ap.add_argument("--pack", nargs="*", help="family folders of kept runs: their run folders into runs.parquet")
    ap.add_argument("--unpack", nargs=2, metavar=("FOLDER", "DEST"), help="runs.parquet of FOLDER as run folders in DEST")
    a = ap.parse_args()
    if a.pack is not None:
        for folder in map(Path, a.pack):
            print(f"{folder}: {pack(folder)} runs packed into {folder / PACKED}")
        return
    if a.unpack:
        unpack(Path(a.unpack[0]), Path(a.unpack[1]))
        return
    if a.one:
        arm, seed = a.one.split(":")
        one(a, arm, int(seed), Path(a.data))
        return
    if a.report is not None:
        figs = {}
        for folder in map(Path, a.report):
            fig = report(folder, a.budget)
            figs[fig["data"]["family"]] = fig
            if a.keep:
                for run in (folder / "runs").glob("*_*"):
                    if (run / "DONE").exists():
                        keep_run(run, Path(a.keep) / fig["data"]["family"], a)
        setting = {**SETTING, "budget": a.budget, "evals": a.evals, "estimate_k": a.k}
        print(markdown(figs) if a.markdown else json.dumps({"setting": setting, **figs}, indent=2))
        if a.json:
            Path(a.json).write_text(json.dumps({"setting": setting, **figs}, indent=2) + "\n")
        return
    if not a.family or not a.data:
        ap.error("--family and --data (or --report)")
    d = Path(a.data)
    _, kept = kept_runs(a)
    if not a.prepare_only and {f"{arm}_{seed}" for arm, seed in asked(a)} <= kept:
        print(f"every run asked for is kept before in {Path(a.keep) / a.family}: nothing to prepare or run", flush=True)
        return
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "sets.json").exists() and not a.prepare_only:
        # prepared in a child process: the estimator's engine (about 3 GB) is not kept beside the runs
        subprocess.run([sys.executable, "-P", __file__, *sys.argv[1:], "--prepare-only"], check=True)
    if not (d / "sets.json").exists():
        for sub in ("src", "rg", "held_in", "train_in", "scored", "kimi"):
            shutil.rmtree(d / sub, ignore_errors=True)  # a preparation cut short starts over
        sets = prepare(a.family, d, a)
        (d / "sets.json").write_text(json.dumps(sets))
    sets = json.loads((d / "sets.json").read_text())
    print(json.dumps({k: v for k, v in sets.items() if k != "levels"}), flush=True)
    if a.prepare_only:
        return
    run_all(a, d)


if __name__ == "__main__":
    main()
