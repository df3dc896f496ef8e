"""Does the trainer learn, and does the curriculum help? SmolLM2-135M on CPU, held-out accuracy per level.

Data: distinct problems of levels 1-3 of the bundled ladder (``synthetic:mix=ladder``), 24 per level held
out (72) and 56 per level to train (168). The training problems are scored once by ``gradus estimate``
(the same model and template, ``--k`` samples at T = 1.0), which gives three arms of the same budget:

- ``curriculum``: the gradus curriculum export of the scored set (balanced buckets, never- and
  always-solved rows left out, stages easy to hard, Kimi k1.5's weighted sampling on the pass counts);
- ``uniform``: the same clean set, every scored row, one stage, drawn uniformly (no difficulty);
- ``solved``: only the rows the model already solves (estimated pass rate >= 0.75), uniformly.

Each (arm, seed) trains ``--steps`` steps (``dapo``, 4 prompts x 8 completions, 128 tokens, lr 1e-5,
template ``fewshot``, short batches skipped and counted) and is evaluated on the same 72 held-out prompts
before the first and after the last step (greedy pass@1 and mean@4 at T = 1.0, per prompt in eval.jsonl).
Reported: per level and overall, before -> after with a paired 95% interval over prompts (and over seeds
pooled), entropy and boxed rate, and each arm's final accuracy against ``uniform``'s per level: over
(prompt, seed) pairs, over prompts with the seeds averaged first, and seed by seed. The figures say whether the
curriculum wins; the script does not decide it.

    python benchmarks/learn.py --data DIR                         # 3 arms x 3 seeds (about 3 hours on 2 cores)
    python benchmarks/learn.py --arms curriculum --seeds 0 --steps 5   # a shorter look
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
LEVELS = ("1", "2", "3")


def _write(rows: list[dict], folder: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (folder / "kept").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "kept" / "part_000000.parquet")
    return folder


def make_sets(d: Path, a) -> dict:
    """The held-out and training problems, the training set scored, and each arm's data folder."""
    from curate.core.shards import read_table
    from curate.difficulty.engines import SamplingConfig
    from curate.difficulty.estimate import EstimateConfig, estimate
    from curate.pipeline import ingest
    from curate.select.export import ExportConfig, export
    from curate.sources.synthetic import generate

    want = a.held_per_level + a.train_per_level
    picked, seen, per = [], set(), defaultdict(int)
    for r in generate(200 * want, a.data_seed, difficulty=(1, 3), mix="ladder"):
        if r["problem"] not in seen and per[str(r["level"])] < want:
            seen.add(r["problem"])
            per[str(r["level"])] += 1
            picked.append(r)
    held = [r for lv in LEVELS for r in [x for x in picked if str(x["level"]) == lv][: a.held_per_level]]
    train = [r for r in picked if r not in held]
    (d / "src").mkdir(parents=True)
    for name, rows in (("held", held), ("train", train)):
        (d / "src" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        ingest(str(d / "src" / f"{name}.jsonl"), d / f"{name}_in", adapter="generic")
    cfg = EstimateConfig(template="fewshot", store=None, chunk_rows=32,
                         sampling=SamplingConfig(k=a.k, temperature=1.0, max_tokens=a.max_tokens, seed=0))
    estimate([d / "train_in"], d / "scored", cfg)
    scored = read_table(d / "scored" / "kept").to_pylist()
    export([d / "scored"], d / "curriculum", ExportConfig(curriculum=True, template="fewshot", card=False))
    plain = [{"id": r["id"], "problem": r["problem"], "answer": r["answer"], "level": r["level"]} for r in scored]
    _write(plain, d / "uniform")
    _write([p for p, r in zip(plain, scored, strict=True) if r["pass_rate"] >= 0.75], d / "solved")
    levels = {r["id"]: str(r["level"]) for r in read_table(d / "held_in" / "kept", columns=["id", "level"]).to_pylist()}
    rates = [r["pass_rate"] for r in scored]
    return {"levels": levels, "train_rows": len(scored), "heldout_rows": len(held),
            "scored_mean_pass_rate": round(statistics.mean(rates), 3),
            "solved_rows": sum(x >= 0.75 for x in rates), "never_solved_rows": sum(x == 0 for x in rates),
            "always_solved_rows": sum(x == 1 for x in rates)}


def one(a, arm: str, seed: int, d: Path) -> dict:
    from rl_stage.trainer import TrainConfig, Trainer

    out = Path(tempfile.mkdtemp(prefix="gradus-learn-")) / "run"
    cfg = TrainConfig(data=[str(d / arm)], eval_data=[str(d / "held_in")], eval_prompts=10**6, eval_k=4, out=str(out),
                      preset="dapo", rollout_backend="vllm", template="fewshot", prompts_per_step=a.prompts,
                      group_size=a.group, max_tokens=a.max_tokens, steps=a.steps, save_every=10**6, lr=a.lr,
                      micro_batch_size=16, seed=seed, temperature=1.0, short_batch="skip",
                      prioritized=arm == "curriculum")
    Trainer(cfg).run(progress=True)
    return summarise(out, arm, seed)


def summarise(out: Path, arm: str, seed: int) -> dict:
    """One finished run folder's figures (its metrics.jsonl and eval.jsonl)."""
    ms = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in ms if m.get("step", 0) > 0]
    evals = [json.loads(x) for x in (out / "eval.jsonl").read_text().splitlines()]
    return {"arm": arm, "seed": seed, "eval": evals,
            "entropy_first": steps[0].get("entropy"), "entropy_last": next((m["entropy"] for m in reversed(steps)
                                                                            if m.get("entropy") is not None), None),
            "boxed_first": steps[0].get("boxed_rate"), "boxed_last": steps[-1].get("boxed_rate"),
            "skipped_steps": sum(1 for m in steps if m.get("skipped")),
            "gen_rounds": sum(m.get("gen_rounds") or 0 for m in steps),
            "s_per_step": statistics.median(m["time/step_s"] for m in steps)}


def paired(diffs: list[float]) -> tuple[float, float, float]:
    """Mean of paired differences and its normal 95% interval (no interval from one difference: nan bounds)."""
    n = len(diffs)
    m = statistics.mean(diffs)
    if n < 2:
        return m, math.nan, math.nan
    h = 1.96 * statistics.stdev(diffs) / math.sqrt(n)
    return m, m - h, m + h


def _fmt(t: tuple[float, float, float]) -> str:
    if math.isnan(t[1]):
        return f"{t[0]:+.3f} [one pair: no interval]"
    return f"{t[0]:+.3f} [{t[1]:+.3f}, {t[2]:+.3f}]"


def report(runs: list[dict], levels: dict[str, str], last_step: int) -> dict:
    """Per arm and level, before -> after with the paired difference over (prompt, seed) pairs; each arm against
    ``uniform`` per level, two ways: over (prompt, seed) pairs, and over prompts with each prompt's difference
    averaged over the seeds first (the 72 held-out prompts are the same in every seed, so this interval does not
    count one prompt's seeds as independent); and each seed's own difference, to see the spread between seeds."""
    out: dict = {"per_run": [], "per_arm": {}, "vs_uniform": {}, "vs_uniform_by_prompt": {}, "vs_uniform_by_seed": {}}
    by = {}  # (arm, seed, id) -> (before row, after row)
    for r in runs:
        ev = {(e["step"], e["id"]): e for e in r["eval"]}
        for (step, pid), e in ev.items():
            if step == 0 and (last_step, pid) in ev:
                by[r["arm"], r["seed"], pid] = (e, ev[last_step, pid])

    def in_level(k, lv):
        return lv == "all" or levels[k[2]] == lv

    for metric in ("mean@4", "greedy_correct"):
        for arm in sorted({r["arm"] for r in runs}):
            keys = [k for k in by if k[0] == arm]
            row = {}
            for lv in (*LEVELS, "all"):
                ks = [k for k in keys if in_level(k, lv)]
                if not ks:
                    continue
                before = statistics.mean(float(by[k][0][metric]) for k in ks)
                after = statistics.mean(float(by[k][1][metric]) for k in ks)
                diff = paired([float(by[k][1][metric]) - float(by[k][0][metric]) for k in ks])
                row[lv] = f"{before:.3f} -> {after:.3f}  diff {_fmt(diff)}"
            out["per_arm"].setdefault(arm, {})[metric] = row
            if arm == "uniform":
                continue
            common = [k for k in keys if ("uniform", k[1], k[2]) in by]
            if not common:
                continue

            d = {k: float(by[k][1][metric]) - float(by["uniform", k[1], k[2]][1][metric]) for k in common}
            pooled, by_prompt, by_seed = {}, {}, {}
            for lv in (*LEVELS, "all"):
                ks = [k for k in common if in_level(k, lv)]
                if not ks:
                    continue
                pooled[lv] = f"{_fmt(paired([d[k] for k in ks]))} over {len(ks)} (prompt, seed) pairs"
                prompts: dict[str, list[float]] = defaultdict(list)
                seeds: dict[int, list[float]] = defaultdict(list)
                for k in ks:
                    prompts[k[2]].append(d[k])
                    seeds[k[1]].append(d[k])
                few, most = min(map(len, prompts.values())), max(map(len, prompts.values()))
                by_prompt[lv] = (f"{_fmt(paired([statistics.mean(v) for v in prompts.values()]))} over {len(prompts)} "
                                 f"prompts ({few if few == most else f'{few}-{most}'} seeds averaged each)")
                by_seed[lv] = {str(sd): round(statistics.mean(v), 3) for sd, v in sorted(seeds.items())}
            out["vs_uniform"].setdefault(arm, {})[metric] = pooled
            out["vs_uniform_by_prompt"].setdefault(arm, {})[metric] = by_prompt
            out["vs_uniform_by_seed"].setdefault(arm, {})[metric] = by_seed
    for r in runs:
        out["per_run"].append({k: v for k, v in r.items() if k != "eval"})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arms", default="curriculum,uniform,solved")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--k", type=int, default=8, help="samples per training problem for the difficulty estimate")
    ap.add_argument("--held-per-level", type=int, default=24)
    ap.add_argument("--train-per-level", type=int, default=56)
    ap.add_argument("--data-seed", type=int, default=3)
    ap.add_argument("--data", help="internal: a prepared data folder")
    ap.add_argument("--one", help="internal: ARM:SEED")
    ap.add_argument("--collect", help="RUN_FOLDER:ARM:SEED: file a finished run's figures into DATA/results")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.one:
        arm, seed = a.one.split(":")
        print("RESULT " + json.dumps(one(a, arm, int(seed), Path(a.data))), flush=True)
        return
    d = Path(a.data) if a.data else Path(tempfile.mkdtemp(prefix="gradus-learn-data-"))
    (d / "results").mkdir(parents=True, exist_ok=True)
    if a.collect:
        run, arm, seed = a.collect.split(":")
        (d / "results" / f"{arm}_{seed}.json").write_text(json.dumps(summarise(Path(run), arm, int(seed))))
        return
    if not (d / "sets.json").exists():
        sets = make_sets(d, a)
        (d / "sets.json").write_text(json.dumps(sets))
    sets = json.loads((d / "sets.json").read_text())
    print(json.dumps({k: v for k, v in sets.items() if k != "levels"}), flush=True)
    runs = []
    # seed by seed, every arm in turn: a run cut short still leaves comparable arms; finished runs are kept in
    # DATA/results and not run again
    for seed in map(int, a.seeds.split(",")):
        for arm in a.arms.split(","):
            done = d / "results" / f"{arm}_{seed}.json"
            if done.exists():
                runs.append(json.loads(done.read_text()))
                continue
            cmd = [sys.executable, __file__, "--one", f"{arm}:{seed}", "--data", str(d), "--steps", str(a.steps),
                   "--prompts", str(a.prompts), "--group", str(a.group), "--max-tokens", str(a.max_tokens), "--lr", str(a.lr)]
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if not line:
                print(p.stdout[-3000:], p.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"{arm} seed {seed} failed")
            runs.append(json.loads(line[-1][7:]))
            done.write_text(json.dumps(runs[-1]))
            print(json.dumps({k: v for k, v in runs[-1].items() if k != "eval"}), flush=True)
    fig = {"setting": {"steps": a.steps, "prompts_per_step": a.prompts, "group": a.group, "max_tokens": a.max_tokens,
                       "lr": a.lr, "preset": "dapo", "template": "fewshot", "estimate_k": a.k},
           "data": {k: v for k, v in sets.items() if k != "levels"}, **report(runs, sets["levels"], a.steps)}
    print(json.dumps(fig, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps({**fig, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
