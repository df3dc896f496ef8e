"""The curation commands: ``gradus ingest``, ``filter``, ``decontam``, ``dedup`` and ``curate`` (one stage, or all of
them from a config), and ``gradus demo`` and ``gradus flow`` (the pipeline as a Prefect flow)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from pathlib import Path

from flows.commands.scoring import _print_estimate, _print_export


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
    from flows.flow_config import DIFFICULTY_FOLDER, EXPORT_FOLDER

    stages = out / "stages"
    if "difficulty" in s["stages"] and not s["all_skipped"]:
        m = Manifest.load(stages / DIFFICULTY_FOLDER)
        m.skipped = bool(s["stages"]["difficulty"].get("skipped"))
        print()
        _print_estimate(m, stages / DIFFICULTY_FOLDER)
    if "export" in s["stages"] and not s["all_skipped"]:
        m = Manifest.load(stages / EXPORT_FOLDER)
        m.skipped = bool(s["stages"]["export"].get("skipped"))
        print()
        _print_export(m, stages / EXPORT_FOLDER)
    if s.get("card"):
        from data_cards.render import load_card
        from data_cards.view import show_text

        card = Path(s["card"]["card"]).parent
        if not s["all_skipped"]:
            print()
            print(show_text(load_card(card)))
        print(f"data card: {out / 'latest' / 'card' / 'README.md'} (plots in {out / 'latest' / 'card' / 'plots'})")
    print(f"run record: {out / 'latest'} (summary.json, card/, card_diff.txt); stage outputs: {stages}")
    if "export" in s["stages"] and (stages / EXPORT_FOLDER / "manifest.json").exists() and "train" not in s:
        fmt = Manifest.load(stages / EXPORT_FOLDER).stats.get("format")
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

