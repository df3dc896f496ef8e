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
    gradus demo [--out DIR]                 (the bundled sample through every stage, as a Prefect flow)
    gradus show DIR                         (a stage output's counts and reasons)
    gradus flow run|serve|plan CONFIG --out DIR [--cron "0 3 * * *"]   (the pipeline as a Prefect flow)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from pathlib import Path

from curate.core.errors import GradusError


def _print_manifest(m, out: Path) -> None:
    state = "already complete (skipped)" if m.skipped else f"done in {m.seconds}s"
    print(f"{m.stage}: {state}: {m.rows_in} in, {m.rows_kept} kept, {m.rows_rejected} rejected")
    for reason, n in m.rejected_by_reason.items():
        print(f"  rejected {reason}: {n}")
    print(f"  kept shards: {out / 'kept'}  rejected shards: {out / 'rejected'}  stats: {out / 'manifest.json'}")


def cmd_ingest(a: argparse.Namespace) -> None:
    from curate.pipeline import ingest

    m = ingest(a.source, Path(a.out), a.format, a.adapter, a.mapping, a.name, a.force, revision=a.revision)
    _print_manifest(m, Path(a.out))
    if m.stats.get("revision"):
        r = m.stats["revision"]
        print(f"  hub commit: {r['commit']} (from the {r['resolved_by']})")
    print(f"  adapter: {m.stats.get('adapter')} (format {m.config.get('format')})")
    if m.rows_in and not m.rows_kept:
        raise ValueError(f"kept 0 of {m.rows_in} rows ({', '.join(m.rejected_by_reason)}): wrong --format or --adapter?")


def cmd_filter(a: argparse.Namespace) -> None:
    from curate.clean.filters import FilterConfig
    from curate.core.config import from_args
    from curate.pipeline import filter_stage

    m = filter_stage([Path(d) for d in a.inputs], Path(a.out), from_args(FilterConfig, a), a.force)
    _print_manifest(m, Path(a.out))


def cmd_decontam(a: argparse.Namespace) -> None:
    from curate.clean.decontam import DecontamConfig
    from curate.core.config import from_args
    from curate.pipeline import decontam_stage

    m = decontam_stage([Path(d) for d in a.inputs], Path(a.out), from_args(DecontamConfig, a), a.force)
    _print_manifest(m, Path(a.out))
    print(f"  benchmark items indexed: {m.stats.get('benchmark_items')}")


def cmd_dedup(a: argparse.Namespace) -> None:
    from curate.clean.dedup import DedupConfig
    from curate.core.config import from_args
    from curate.pipeline import dedup_stage

    m = dedup_stage([Path(d) for d in a.inputs], Path(a.out), from_args(DedupConfig, a), a.force)
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
    cfg = CurateConfig.load(Path(a.config))
    if a.dry_run:
        print(f"config {a.config} is valid; the run would do, into {out}:")
        for line in cfg.check():
            print(f"  {line}")
        return
    _print_summary(curate_all(cfg, out, a.force), out)


def cmd_demo(a: argparse.Namespace) -> None:
    """The bundled sample through every stage: the flow of ``flows/demo.toml`` on the embedded Prefect."""
    import dataclasses

    from flows.flow import DEMO_CONFIG, FlowConfig

    _quiet_prefect(a)
    cfg = FlowConfig.load(DEMO_CONFIG)
    if a.estimate_rows is not None and a.estimate_rows <= 0:
        cfg = dataclasses.replace(cfg, difficulty=None, export=None)
    elif a.estimate_rows is not None and cfg.difficulty is not None:
        cfg = dataclasses.replace(cfg, difficulty=dataclasses.replace(cfg.difficulty, limit=a.estimate_rows))
    _run_flow(cfg, Path(os.path.abspath(a.out)), progress=not a.no_progress)  # a link stays a link, and is refused


def _quiet_prefect(a: argparse.Namespace) -> None:
    """Unless -v: Prefect's console shows warnings only (the command prints the flow's report), while the server still
    gets every line at INFO, Prefect's and gradus's (their levels stay INFO: only the console handler is raised); and no
    usage telemetry (the embedded server cannot reach its host offline and logs an error at each start)."""
    if not getattr(a, "verbose", False):
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")
        os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def _run_flow(cfg, out: Path, progress: bool = False) -> None:
    """Run the flow of ``cfg`` into ``out``; print its plan, what it did, the card and the export's paths. Exits 1
    when a stage could not be made (the summary and the card of what ran are written first)."""
    from flows.flow import run_flow

    for i, step in enumerate(cfg.plan(), 1):
        print(f"{i}. {step}")
    _console_for_reports()
    s = run_flow(cfg, out, progress=progress)
    state = ("unchanged, skipped: every stage's inputs, config and code are as its manifest records them"
             if s["all_skipped"] else f"done in {s['seconds']}s")
    print(f"\nflow run {s['run']}" + (f" ({s['flow_run_name']})" if s.get("flow_run_name") else "") + f": {state}")
    if s.get("ui_url"):
        print(f"  in the Prefect UI: {s['ui_url']}")
    crashed = s.get("previous_run_crashed")
    if crashed:
        print(f"  the previous run (pid {crashed['pid']}, started {crashed['started']}) died before it finished: "
              + ("marked Crashed on the server" if crashed.get("marked_crashed") else "not on this server")
              + (f", its empty run folder {crashed['removed_empty_run_folder']} removed"
                 if crashed.get("removed_empty_run_folder") else ""))
    for st in s["stages"].values():
        print(f"  {Path(st['folder']).name}: " + (f"unchanged, skipped ({st['rows_kept']:,} kept)" if st.get("skipped")
                                                 else f"{st['rows_in']:,} in, {st['rows_kept']:,} kept"))
    for miss in s["missing_sources"]:
        print(f"  missing source {miss['source']}: {miss['error'][:200]}")
    for stage, msg in s.get("failed_stages", {}).items():
        print(f"  {stage} failed: {msg}")
    from curate.core.manifest import Manifest

    stages = out / "stages"
    if "difficulty" in s["stages"] and not s["all_skipped"]:
        m = Manifest.load(stages / "5_difficulty")
        m.skipped = bool(s["stages"]["difficulty"].get("skipped"))
        print()
        _print_estimate(m, stages / "5_difficulty")
    if "export" in s["stages"] and not s["all_skipped"]:
        m = Manifest.load(stages / "6_export")
        m.skipped = bool(s["stages"]["export"].get("skipped"))
        print()
        _print_export(m, stages / "6_export")
    if s.get("card"):
        from data_cards.render import load_card
        from data_cards.view import show_text

        card = Path(s["card"]["card"]).parent
        if not s["all_skipped"]:
            print()
            print(show_text(load_card(card)))
        print(f"data card: {out / 'latest' / 'card' / 'README.md'} (plots in {out / 'latest' / 'card' / 'plots'})")
    print(f"run record: {out / 'latest'} (summary.json, card/, card_diff.txt); stage outputs: {stages}")
    if "export" in s["stages"] and (stages / "6_export" / "manifest.json").exists() and "train" not in s:
        fmt = Manifest.load(stages / "6_export").stats.get("format")
        if fmt == "parquet":
            print(f"train on it: gradus train --data {stages / '6_export'} --out {out / 'train'} --steps 10 "
                  "--prompts-per-step 4 --max-tokens 128")
    if s.get("failed_stages"):
        raise SystemExit(1)


def _console_for_reports() -> None:
    """The command prints its own report of every task: Prefect's task-run lines (a source that cannot be read, as
    a traceback and two more lines) stay in the run's logs on the server, off the screen. Flow-level lines, gradus's
    warnings and any error that stops the run still show."""
    import logging

    import prefect  # noqa: F401 - sets up Prefect's logging (its console handler on the root logger)

    quiet = os.environ.get("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "").upper() == "WARNING"  # _quiet_prefect, unless -v

    class NoTaskRuns(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:  # INFO lines go to the server's logs only
            return not record.name.startswith("prefect.task_runs") and (not quiet or record.levelno >= logging.WARNING)

    for h in logging.getLogger().handlers:
        if not any(isinstance(f, NoTaskRuns) for f in h.filters):
            h.addFilter(NoTaskRuns())


def cmd_estimate(a: argparse.Namespace) -> None:
    from curate.core.config import from_args
    from curate.difficulty.estimate import EstimateConfig, estimate

    cfg = from_args(EstimateConfig, a, **({"store": None} if a.no_store else {}))
    _warn_uncurated(a.inputs)
    if cfg.backend != "openai":  # a wrong engine argument or a GPU asked for and not there: before any work
        from curate.difficulty.devices import check_engine_args, engine_device

        if cfg.engine_args:
            check_engine_args(cfg.engine_args)
        engine_device(cfg.device, "gradus estimate", cfg.engine_args)
    if a.dry_run:
        print(json.dumps(cfg.as_dict(), indent=2))
        return
    m = estimate([Path(d) for d in a.inputs], Path(a.out), cfg, force=a.force, progress=not a.no_progress)
    _print_estimate(m, Path(a.out))


def _warn_uncurated(inputs: list[str]) -> None:
    from curate.core.manifest import Manifest

    for d in map(Path, inputs):
        if d.name == "rejected" or d.parent.name == "rejected":
            print(f"warning: {d} holds REJECTED rows", file=sys.stderr)
            continue
        m = Manifest.find(d) if d.is_dir() else None
        if m is not None and m.stage in ("ingest", "filter"):
            print(f"warning: {d} is a {m.stage} output: not yet decontaminated and deduplicated", file=sys.stderr)


def _print_estimate(m, out: Path) -> None:
    st = m.stats
    state = "already complete (skipped)" if m.skipped else f"done in {m.seconds}s"
    print(f"estimate: {state}: {m.rows_in} in, {m.rows_kept} scored, {m.rows_rejected} rejected")
    for reason, n in m.rejected_by_reason.items():
        print(f"  rejected {reason}: {n}")
    print(f"  model {st['model']} ({st['model_revision']}), k={st['k']}, store: {st.get('store')}")
    hist = dict(sorted(st["pass_count_histogram"].items(), key=lambda kv: int(kv[0])))  # JSON sorts the keys as text
    print(f"  pass-count histogram (n_correct: problems): {hist}")
    print(f"  sample outcomes: {st['sample_outcomes']}  truncation rate: {st['truncation_rate']}")
    run = st["this_run"]
    if m.skipped:
        print(f"  this run: unchanged, skipped (the figures above are those of the run that made it, {m.created})")
    elif run.get("tokens_per_s"):
        print(f"  this run: {run['samples']} samples, {run['tokens']} tokens, {run['tokens_per_s']} tokens/s, "
              f"{run['store_hits']} from the store, {run['chunks_already_done']} chunks already done")
    print(f"  scored shards: {out / 'kept'}  stats: {out / 'manifest.json'}")


def cmd_export(a: argparse.Namespace) -> None:
    from curate.core.config import from_args
    from curate.select.export import ExportConfig, export

    cfg = from_args(ExportConfig, a)
    if a.dry_run:
        print(json.dumps(dataclasses.asdict(cfg), indent=2))
        return
    m = export([Path(d) for d in a.inputs], Path(a.out), cfg, force=a.force)
    if cfg.card and (not m.skipped or not (Path(a.out) / "README.md").is_file()):
        from data_cards.render import write_card

        write_card(Path(a.out))  # the card to publish with the data: the whole story, upstream stages included
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
    from curate.core.config import given
    from rl_stage.trainer import TrainConfig, Trainer, TrainError, updates_line

    if a.nproc_per_node > 1 and not a.dry_run and "WORLD_SIZE" not in os.environ:
        _torchrun(a.nproc_per_node)
        return
    if a.config:
        cfg = TrainConfig.load(Path(a.config), **given(TrainConfig, a))
    else:  # every setting from the command line (--data EXPORT --out RUN ...)
        from curate.core.config import from_dict

        cfg = from_dict(TrainConfig, {k: v for k, v in given(TrainConfig, a).items() if v is not None}, where="options")
    t = Trainer(cfg, resume=a.resume)
    main = os.environ.get("RANK", "0") == "0"
    if a.dry_run:
        if main:
            print(f"train: preset {cfg.preset} ({t.alg['cite']}); {updates_line(cfg, t.alg)}")
            print(json.dumps({**dataclasses.asdict(t.cfg), "resolved": t.alg}, indent=2, default=str))
        return
    # the process group ends only after a run that finished on every rank: a rank that failed alone must not wait
    # in destroy_process_group while the others wait in a collective (it exits, and torchrun stops the rest)
    if not main:  # under torchrun: rank 0 speaks for the run
        t.run(progress=False)
        t.close()
        return
    print(f"train: preset {cfg.preset} ({t.alg['cite']}); {updates_line(cfg, t.alg)}")
    ms = t.run(progress=not a.quiet)
    t.close()
    steps = [m for m in ms if m.get("step", 0) > 0]
    print(f"train: {len(steps)} steps this run, now at step {t.step}; metrics: {Path(cfg.out) / 'metrics.jsonl'}; "
          f"checkpoints: {Path(cfg.out) / 'checkpoints'}")
    if steps:
        from rl_stage.online import completions_line, read_metrics

        print("train: " + completions_line([m for m in read_metrics(Path(cfg.out)) if m.get("step", 0) > 0]))
    if steps and all(m.get("skipped") for m in steps):
        raise TrainError(f"every step of this run was skipped ({steps[-1]['skipped']}): nothing was trained")


def _torchrun(n: int) -> None:
    """``gradus train ... --nproc-per-node N``: the same command on N ranks of this machine under torchrun
    (``--standalone``). Several machines: run ``torchrun --nnodes M --node-rank R --rdzv-endpoint HOST:PORT
    --nproc-per-node N -m flows.cli train CONFIG`` on each (torchrun's own flags)."""
    import subprocess

    argv, skip = [], False
    for x in sys.argv[1:]:
        if skip:
            skip = False
        elif x == "--nproc-per-node":
            skip = True
        elif not x.startswith("--nproc-per-node="):
            argv.append(x)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", "-m", "flows.cli", *argv]
    rc = subprocess.run(cmd).returncode
    if rc:
        raise GradusError(f"torchrun with {n} ranks exited with code {rc} (each rank's error is above)")


def cmd_model(a: argparse.Namespace) -> None:
    from curate.difficulty.models import convert_default, default_model_dir

    if a.action == "path":
        print(default_model_dir())
    else:
        print(convert_default(force=a.force))


def cmd_flow(a: argparse.Namespace) -> None:
    from flows.flow import FlowConfig, build_flow

    _quiet_prefect(a)
    cfg = FlowConfig.load(a.config)
    if a.dry_run or a.action == "plan":
        for i, step in enumerate(cfg.plan(), 1):
            print(f"{i}. {step}")
        return
    out = Path(os.path.abspath(a.out))  # not resolved: a link stays a link, and is refused
    if a.action == "run":
        _run_flow(cfg, out, progress=not a.no_progress)
    else:  # serve: a deployment on a schedule, served from this process (Prefect's serve)
        from prefect.settings import get_current_settings

        from curate.core.errors import GradusError
        from flows.runs import claim

        if not get_current_settings().api.url:
            raise GradusError("flow serve: a schedule needs a Prefect server that outlives this command: start one with "
                              "`prefect server start` and set PREFECT_API_URL=http://127.0.0.1:4200/api (the embedded "
                              "server of `gradus flow run` stops with its run)")
        cfg.plan()
        claim(out, cfg.local_sources())
        _stop_on_signals()
        print(f"serving {a.name} on cron {a.cron!r} (UTC) into {out}; runs appear in the UI of "
              f"{get_current_settings().api.url.removesuffix('/api')}", flush=True)
        import httpx

        try:
            build_flow(cfg).serve(name=a.name, cron=a.cron, parameters={"out": str(out)})
        except httpx.HTTPError as e:
            raise GradusError(f"flow serve: the Prefect server at {get_current_settings().api.url} does not answer "
                              f"({type(e).__name__}: {e}); is it running?") from e


def _stop_on_signals() -> None:
    """A served flow stops at once on SIGTERM or SIGINT, as a service manager expects: one line, exit 128 + signal.
    Prefect's own handling pauses the deployment through the API first, and with its server gone it retried for
    over 30 s. A run already started goes on in its own process and ends as usual; the schedule resumes when the
    flow is served again."""
    import signal

    def stop(signum, frame=None):
        print(f"gradus flow serve: stopped ({signal.Signals(signum).name})", file=sys.stderr, flush=True)
        os._exit(128 + signum)

    from prefect.runner import runner

    runner.Runner.handle_sigterm = lambda self, *a, **k: stop(signal.SIGTERM)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def cmd_show(a: argparse.Namespace) -> None:
    from curate.core.manifest import MANIFEST, Manifest, stage_outputs

    d = Path(a.dir)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such folder")
    if not (d / MANIFEST).exists():
        if (d / "metrics.jsonl").exists() and (d / "config.json").exists():  # a training run
            from rl_stage.online import summary_lines

            print("\n".join(summary_lines(d)))
            return
        _show_run(d, stage_outputs(d))
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
    print(f"{d}: a run of {len(stages)} stage outputs")
    print(f"  {'stage':<9} {'in':>9} {'kept':>9} {'rejected':>9}  folder")
    kept_by_path = {str(p.resolve()): m.rows_kept for p, m in stages}
    for p, m in stages:
        flow = ""
        ups = [kept_by_path.get(str(Path(e["path"]).resolve())) for e in m.inputs if "path" in e]
        known = [u for u in ups if u is not None]
        if ups and len(known) == len(ups) and m.stage != "estimate":
            flow = "" if sum(known) == m.rows_in else f"  (inputs kept {sum(known)}: MISMATCH)"
        print(f"  {m.stage:<9} {m.rows_in:>9} {m.rows_kept:>9} {m.rows_rejected:>9}  {p.relative_to(d)}{flow}")
        top = ", ".join(f"{r} {n}" for r, n in list(m.rejected_by_reason.items())[:4])
        if top:
            print(f"  {'':<9} rejected: {top}{' ...' if len(m.rejected_by_reason) > 4 else ''}")
    print(f"  details: gradus show {d}/<folder>")


def _show_samples(d: Path, m, reason: str, n: int) -> None:
    """A few rejected rows of one reason: the problem's start, the gold and why."""
    import pyarrow.compute as pc

    from curate.core.shards import iter_batches

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


def cmd_card(a: argparse.Namespace) -> None:
    from data_cards.render import load_card, write_card
    from data_cards.view import diff_cards, diff_text, show_text

    if a.action == "build":
        for d in a.dirs:
            print(f"card: {write_card(Path(d), Path(a.out) if a.out else None)}")
    elif a.action == "show":
        for d in a.dirs:
            print(show_text(load_card(Path(d))))
    else:
        if len(a.dirs) != 2:
            raise ValueError("card diff takes two folders: OLD NEW")
        d = diff_cards(Path(a.dirs[0]), Path(a.dirs[1]))
        print(json.dumps(d, indent=2) if a.json else diff_text(d))


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
        from curate.sources.adapters import ADAPTERS

        for name, ad in ADAPTERS.items():
            print(f"{name:<12} recognised by columns: {', '.join(sorted(ad.detect))}")
    elif a.what == "benchmarks":
        from curate.clean.decontam import KNOWN_BENCHMARKS, resolve_benchmark

        for name in KNOWN_BENCHMARKS:
            where = resolve_benchmark(name)[1]
            print(f"{name:<8} {where}{'' if Path(where).is_file() else '  (hub id: needs network or the HF cache)'}")
        print("any other: NAME=PATH to a jsonl/json/csv/parquet file with a problem column")
    elif a.what == "filters":
        from curate.clean.filters import STEPS, FilterConfig

        flag_only = FilterConfig().flag_only
        for step in STEPS:
            note = "  [flag only by default: sets its signal, rejects nothing]" if step.name in flag_only else ""
            print(f"{step.name:<26} {step.doc}{note}")
        print(f"{'answer_unparseable':<26} the gold gate: math-verify cannot parse the gold answer")
    elif a.what == "presets":
        from rl_stage.algorithms import PRESETS

        for name, pr in PRESETS.items():
            print(f"{name:<8} {pr.cite}")
    elif a.what == "templates":
        from curate.difficulty.templates import TEMPLATES

        print("\n".join(TEMPLATES))
    else:
        from curate.core.manifest import STAGE_KINDS

        for k in sorted(STAGE_KINDS.values(), key=lambda k: k.order):
            print(f"{k.name:<9} {k.description}")


COMMANDS = ("ingest", "filter", "decontam", "dedup", "curate", "estimate", "export", "train", "model", "demo", "list", "show",
            "card", "flow")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; options derived from config classes are built for ``only`` (the command given) alone, so
    ``gradus --help`` imports nothing heavy. ``only=None`` builds every command's options."""

    def add_options(parser, cls_path: str, **kw) -> None:
        name = parser.prog.split()[-1] if isinstance(parser, argparse.ArgumentParser) else kw.pop("cmd")
        if only is not None and name != only:
            return
        import importlib

        from curate.core.config import add_options as add

        mod, _, cls = cls_path.rpartition(".")
        add(parser, getattr(importlib.import_module(mod), cls), **kw)

    p = argparse.ArgumentParser(prog="gradus", description="Difficulty-scored math RL curricula: curate, estimate, "
                                "export, train.")
    p.add_argument("-v", "--verbose", action="store_true", help="engine logs and INFO messages")
    p.add_argument("--version", action="version", version=f"gradus {_version()}")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("ingest", help="read a source into record shards")
    s.add_argument("source", help="a file (jsonl/json/csv/parquet), a folder of shards, a quoted glob, a datasets "
                   "save_to_disk folder, a hub id (owner/name[:config][@split]) or synthetic[:n=..]")
    s.add_argument("--out", required=True)
    s.add_argument("--format", choices=["jsonl", "json", "csv", "parquet", "arrow", "hf", "synthetic", "reasoning_gym"])
    s.add_argument("--revision", help="hub sources: the commit, branch or tag to read (default: main's commit now)")
    s.add_argument("--adapter", help="force a source adapter (default: detected from the columns)")
    s.add_argument("--mapping", "--map", help="column mapping, e.g. problem=question,answer=final or answer=boxed(solution)")
    s.add_argument("--name", help="source name stored in the 'source' column")
    s.add_argument("--force", action="store_true", help="re-run even if a complete output exists")
    s.set_defaults(fn=cmd_ingest)

    for name, fn, config, text, aliases in (
        ("filter", cmd_filter, "curate.clean.filters.FilterConfig",
         "drop unverifiable items (MCQ, proofs, yes/no, ...) and ungradable golds", {}),
        ("decontam", cmd_decontam, "curate.clean.decontam.DecontamConfig", "drop rows that match evaluation benchmarks",
         {"benchmarks": ["--against"]}),
        ("dedup", cmd_dedup, "curate.clean.dedup.DedupConfig", "exact and near-duplicate removal", {}),
    ):
        s = sub.add_parser(name, help=text)
        s.add_argument("inputs", nargs="+")
        s.add_argument("--out", required=True)
        add_options(s, config, aliases=aliases)
        s.add_argument("--force", action="store_true")
        s.set_defaults(fn=fn)

    s = sub.add_parser("curate", help="run every stage from a JSON/TOML config")
    s.add_argument("config")
    s.add_argument("--out", required=True)
    s.add_argument("--force", action="store_true")
    s.add_argument("--dry-run", action="store_true", help="check the config, sources and benchmarks; print the plan")
    s.set_defaults(fn=cmd_curate)

    s = sub.add_parser("estimate", help="difficulty: k samples per problem from a real engine, graded by math-verify")
    s.add_argument("inputs", nargs="+", help="stage outputs (e.g. runs/demo/4_dedup) or shard folders")
    s.add_argument("--out", required=True)
    add_options(s, "curate.difficulty.estimate.EstimateConfig",
                aliases={"model_revision": ["--revision"], "grader_timeout_s": ["--grader-timeout"]})
    s.add_argument("--no-store", action="store_true", help="neither read nor write the difficulty store")
    s.add_argument("--no-progress", action="store_true")
    s.add_argument("--dry-run", action="store_true", help="check the settings and print them")
    s.add_argument("--force", action="store_true", help="start again even if the folder holds a (partial) run")
    s.set_defaults(fn=cmd_estimate)

    s = sub.add_parser("export", help="balanced / curriculum prompt sets from scored rows: parquet, jsonl or hf")
    s.add_argument("inputs", nargs="+", help="estimate outputs (scored shards)")
    s.add_argument("--out", required=True)
    add_options(s, "curate.select.export.ExportConfig")
    s.add_argument("--dry-run", action="store_true", help="check the settings and print them")
    s.add_argument("--force", action="store_true")
    s.set_defaults(fn=cmd_export)

    s = sub.add_parser("train", help="GRPO / Dr. GRPO / DAPO / RLOO on exported prompt sets (rl_stage)")
    s.add_argument("config", nargs="?", help="JSON or TOML with rl_stage.trainer.TrainConfig fields (data, preset, "
                   "steps, ...); or give them all as options (--data EXPORT --out RUN ...)")
    s.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    s.add_argument("--quiet", action="store_true")
    s.add_argument("--dry-run", action="store_true", help="check the config, resolve the preset and print it")
    s.add_argument("--nproc-per-node", type=int, default=1, metavar="N",
                   help="data parallel on N ranks of this machine (torchrun, FSDP2: one GPU each, or gloo on CPU)")
    add_options(s.add_argument_group("overrides of config fields"), "rl_stage.trainer.TrainConfig", cmd="train")
    s.set_defaults(fn=cmd_train)

    s = sub.add_parser("model", help="the bundled default model: convert it once, or print its folder")
    s.add_argument("action", choices=["convert", "path"])
    s.add_argument("--force", action="store_true")
    s.set_defaults(fn=cmd_model)

    s = sub.add_parser("flow", help="the whole pipeline as a Prefect flow from one config (run once, or serve on a schedule)")
    s.add_argument("action", choices=["run", "serve", "plan"])
    s.add_argument("config", help="TOML or JSON: sources, filters, decontam, dedup, difficulty, export, card, runner")
    s.add_argument("--out", default="runs/flow", help="stage data under OUT/stages, one record per run under OUT/runs")
    s.add_argument("--cron", default="0 3 * * *", help="serve: the schedule (cron syntax, UTC)")
    s.add_argument("--name", default="gradus-nightly", help="serve: the deployment's name")
    s.add_argument("--dry-run", action="store_true", help="check the config and print the plan")
    s.add_argument("--no-progress", action="store_true", help="run: no estimation progress bar")
    s.set_defaults(fn=cmd_flow)

    s = sub.add_parser("demo", help="the bundled sample through every stage, as the Prefect flow of flows/demo.toml")
    s.add_argument("--out", default="runs/demo")
    s.add_argument("--estimate-rows", type=int, default=None,
                   help="rows to score with the bundled model (default: the config's 60; 0: no estimation or export)")
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(fn=cmd_demo)

    s = sub.add_parser("card", help="data cards: build (README.md + card.json + plots), show in the terminal, diff two runs")
    s.add_argument("action", choices=["build", "show", "diff"])
    s.add_argument("dirs", nargs="+", help="run folders, stage outputs or exports (diff: OLD NEW)")
    s.add_argument("--out", help="build: write the card here instead of into the folder")
    s.add_argument("--json", action="store_true", help="diff: the figures as JSON")
    s.set_defaults(fn=cmd_card)

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

    for k, v in (("VLLM_LOGGING_LEVEL", "ERROR"), ("TORCH_CPP_LOG_LEVEL", "ERROR"), ("TORCH_LOGS", "-all"),
                 ("TRANSFORMERS_VERBOSITY", "error"),
                 ("HF_HUB_DISABLE_PROGRESS_BARS", "1"), ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(k, v)
    for cat in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=cat)


def _stop_threads_on_interrupt() -> None:
    """Ctrl-C reaches the main thread only: tell the worker threads too (``curate.core.stop``), then interrupt."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum, frame):
        from curate.core.stop import STOP

        STOP.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(next((x for x in argv if x in COMMANDS), "")).parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if not args.verbose:
        _quiet_engines()
    _stop_threads_on_interrupt()
    try:
        args.fn(args)
    except BrokenPipeError:  # piped into head: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (OSError, ValueError, GradusError) as e:  # bad input, an unusable model/engine, a file system refusal
        print(f"gradus {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: what was written is whole (shards and manifests land by rename); it resumes
        print(f"gradus {args.cmd}: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
