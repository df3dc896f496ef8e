"""The whole pipeline as one Prefect flow, driven by one config file (TOML or JSON).

    gradus flow run flow.toml --out runs/nightly          # embedded Prefect: no server, no account
    gradus flow serve flow.toml --out runs/nightly --cron "0 3 * * *"

Each library stage is a task: one ingest task per source (they run concurrently), then filter, decontam,
dedup, difficulty, export and the card. Tasks pass folder paths and counts, never data frames: Prefect keeps
task states in memory, the data stays in the stage folders. The stage runner is the cache: a stage whose
inputs (fingerprints), config and code version are unchanged is skipped by the runner whatever Prefect does,
so a re-run costs a fingerprint check per stage, and rows already scored by the same model with the same
parameters come from the difficulty store (only new rows are sampled).

Layout of ``--out``::

    stages/1_ingest/<nn_source>/ 2_filter/ 3_decontam/ 4_dedup/ 5_difficulty/ 6_export/   (updated in place)
    runs/<UTC time>/summary.json, card/ (README.md, card.json, plots/), card_diff.txt     (one per run)
    latest -> runs/<UTC time>
    .gradus-flow.json (this folder is a flow's), .gradus-flow.lock (held by the run in progress: ``flows.runs``)

A source that fails to load fails its own task (one line, no traceback); the others finish, the flow goes on with
them and the summary and card name the missing source. A stage that found its complete output ends ``Cached``. A
bad config is refused before any task runs, a folder with a user's files or one another run holds before Prefect
starts.

One job, in one module of more than 500 lines: the Prefect flow (its config: ``flows.flow_config``; what each
task runs: ``flows.tasks``; run folders: ``flows.runs``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from curate.core.errors import GradusError, SourceError
from curate.core.shards import write_text_atomic
from flows import tasks as work
from flows.flow_config import DEMO_CONFIG, DIFFICULTY_FOLDER, EXPORT_FOLDER, TRAIN_FOLDER, FlowConfig
from flows.runs import FlowFolderError, FlowLock, claim, point_latest, previous_run, run_dir, settle_crashed
from flows.tasks import train_artifact

# --------------------------------------------------------------------------------------------- the tasks
# Plain functions first (testable and reusable without Prefect), wrapped as tasks in ``build_flow``.


SKIPPED = "unchanged (inputs, config and code as the stage's manifest records them): skipped"
LIBRARY_LOGGERS = ("curate", "data_cards", "rl_stage", "flows")  # gradus's own loggers, sent to the run's logs


def _task(fn, source: bool = False):
    """``fn`` as a task body whose final state tells the truth in the UI: a stage that found its complete output
    ends ``Cached`` with the reason; for an ingest (``source``), an error ends the task ``Failed`` with its one-line
    message and no traceback (a source that cannot be read is an expected outcome, named in the summary and card)."""
    import functools

    @functools.wraps(fn)
    def body(*args, **kwargs):
        from prefect.states import Completed, Failed

        try:
            r = fn(*args, **kwargs)
        except Exception as e:
            if not source:
                raise
            import logging

            logging.getLogger(__name__).debug("source failed", exc_info=True)
            msg = str(e).splitlines()[0] if str(e) else ""
            return Failed(message=(msg if isinstance(e, GradusError) else f"{type(e).__name__}: {msg}")[:500])
        if isinstance(r, dict) and r.get("skipped"):
            return Completed(data=r, name="Cached", message=SKIPPED)
        return r

    return body


def artifact_key(out: Path, what: str) -> str:
    """A Prefect artifact key of one output folder's pipeline (lowercase letters, digits and dashes): the folder's name
    and a hash of its absolute path, so every output folder has its own history of cards and waterfalls."""
    import hashlib
    import re

    p = Path(out).resolve()
    slug = re.sub(r"[^a-z0-9]+", "-", p.name.lower()).strip("-")[:40] or "out"
    return f"gradus-{slug}-{hashlib.sha1(str(p).encode()).hexdigest()[:8]}-{what}"


def card_artifact(readme: Path, inline_limit: int = 400_000) -> str:
    """The card's body as the Prefect UI shows it: no YAML header (the UI would list it as bullets), and each plot
    inline as PNG data (the UI cannot load a path on this machine), or as the plot's path when it is too large."""
    import base64
    import re

    text = readme.read_text()
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        text = text[end + 5:].lstrip("\n") if end > 0 else text

    def inline(m: re.Match) -> str:
        p = readme.parent / m.group(2)
        if p.is_file() and p.stat().st_size <= inline_limit:
            return f"![{m.group(1)}](data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()})"
        return f"{m.group(1)}: `{p}`"

    text = re.sub(r"!\[([^\]]*)\]\(([^)]+\.png)\)", inline, text)
    # Prefect's renderer drops <details>: its table would show, and the toggle reveal nothing. A heading instead, and
    # the table's long cells cut so that it fits the page (the whole text is in the card's README.md)
    def section(m: re.Match) -> str:
        rows = [_cut_cells(line, UI_CELL) if line.startswith("|") else line for line in m.group(2).splitlines()]
        return f"#### {m.group(1)}\n\n" + "\n".join(rows) + f"\n\n(cells cut at {UI_CELL} characters: the card's README.md " \
            "has them whole)\n"

    return re.sub(r"<details><summary>(.*?)</summary>\n(.*?)\n</details>", section, text, flags=re.S)


UI_CELL = 60  # characters of a table cell shown in the Prefect UI's card


def _cut_cells(row: str, n: int) -> str:
    cells = row.strip().strip("|").split(" | ")
    return "| " + " | ".join(c if len(c) <= n else c[: n - 1].rstrip() + "…" for c in cells) + " |"


class _RunLogs:
    """While a flow runs: gradus's own loggers at INFO, each record also sent to the run's logs on the Prefect
    server, on the task run it came from (the run context of the thread that logged it); records from the library's
    own worker threads carry no run context and go on the flow run."""

    def __init__(self, flow_run_id: str | None):
        import logging

        from prefect.context import TaskRunContext
        from prefect.logging.handlers import APILogHandler

        class Handler(APILogHandler):
            def emit(self, record: logging.LogRecord) -> None:
                if not getattr(record, "flow_run_id", None):
                    ctx = TaskRunContext.get()
                    if ctx is not None and ctx.task_run is not None:  # a task's own thread: the line is the task's
                        record.task_run_id = ctx.task_run.id
                        record.flow_run_id = ctx.task_run.flow_run_id
                    elif flow_run_id:
                        record.flow_run_id = flow_run_id
                super().emit(record)

        self.handler = Handler()
        self.handler.setFormatter(logging.Formatter("%(message)s"))  # the UI shows the logger's name in its own column
        self.loggers = [logging.getLogger(n) for n in LIBRARY_LOGGERS]
        self.levels = [lg.level for lg in self.loggers]

    def __enter__(self):
        import logging

        for lg in self.loggers:
            lg.addHandler(self.handler)
            if lg.getEffectiveLevel() > logging.INFO:
                lg.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc) -> None:
        for lg, level in zip(self.loggers, self.levels, strict=True):
            lg.removeHandler(self.handler)
            lg.setLevel(level)


_HELD: dict[str, FlowLock] = {}  # output folders whose lock ``run_flow`` took for the flow it starts in this process


def build_flow(cfg: FlowConfig, api_url: str | None = None, progress: bool = False):
    """The Prefect flow for ``cfg`` (its task runner chosen by ``cfg.runner``); ``api_url``: the Prefect API the
    Ray workers report to (``run_flow`` passes the one the flow uses); ``progress``: the estimation's progress bar
    on stderr (one engine in this process)."""
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE

    def t(fn, name, source=False, **kw):
        return task(_task(fn, source), name=name, cache_policy=NO_CACHE, **kw)

    retry = {"retries": cfg.sampler_retries, "retry_delay_seconds": list(cfg.retry_delays_s)}
    tasks = {"ingest": t(work.ingest, "ingest", source=True), "stage": t(work.stage, "stage"),
             "dedup_jobs": t(work.dedup_jobs, "dedup shards"), "dedup_ids": t(work.dedup_ids, "dedup ids"),
             "dedup_groups": t(work.dedup_groups, "dedup groups"), "dedup_shard": t(work.dedup_shard, "dedup shard"),
             "difficulty": t(work.difficulty, "difficulty", **retry), "begin": t(work.difficulty_begin, "difficulty begin"),
             "share": t(work.difficulty_share, "difficulty share", **retry),
             "finish": t(work.difficulty_finish, "difficulty finish"), "export": t(work.export, "export"),
             "card": t(work.card, "card"), "train": t(work.train, "train")}

    if cfg.runner == "ray":
        from prefect_ray import RayTaskRunner

        # the workers report their task states to this process's Prefect API (without it each one would start a
        # temporary server of its own); the project's modules come with the worker's Python environment
        init = {"runtime_env": {"env_vars": {"PREFECT_API_URL": api_url}}} if api_url else None
        runner = RayTaskRunner(address=cfg.ray_address, init_kwargs=init)
    else:
        from prefect.task_runners import ThreadPoolTaskRunner

        runner = ThreadPoolTaskRunner(max_workers=max(2, len(cfg.curate.sources)))

    @flow(name="gradus", task_runner=runner, log_prints=True)
    def gradus_flow(out: str):
        import sys

        from prefect import get_run_logger
        from prefect.runtime import flow_run
        from prefect.settings import get_current_settings
        from prefect.states import Cancelled, Completed, Failed

        root = Path(out)
        held = _HELD.get(str(root.resolve()))  # run_flow took the lock; a served or deployed run takes its own
        if held is None:
            claim(root, cfg.local_sources())
        lock = held or FlowLock(root)
        try:
            crashed = held.crashed if held is not None else lock.acquire()
        except FlowFolderError as e:  # a scheduled run that overlaps the one still running: skipped, said in a line
            get_run_logger().warning("skipped: %s", e)
            return Cancelled(message=f"skipped: {e}")
        run = None
        try:
            run = run_dir(root)
            info = {"flow_run_id": str(flow_run.id) if flow_run.id else None, "flow_run_name": flow_run.name,
                    "run_folder": run.name}
            lock.update(info)
            if get_current_settings().api.url:  # a server: say where its UI shows this run (on the screen only)
                from prefect.context import FlowRunContext
                from prefect.utilities.urls import url_for

                info["ui_url"] = url_for(FlowRunContext.get().flow_run)
                sys.stderr.write(f"flow run {flow_run.name}: {info['ui_url']}\n")
            with _RunLogs(info["flow_run_id"]):
                if crashed:
                    info["previous_run_crashed"] = settle_crashed(root, crashed, info["flow_run_id"])
                try:
                    summary = _pipeline(cfg, tasks, root, run, info, progress, get_run_logger())
                except GradusError as e:  # bad input: the run fails with its one line, not a traceback
                    get_run_logger().error("%s", e)
                    return Failed(message=str(e), data={"error": str(e), "error_type": type(e).__name__})
        finally:
            if run is not None and run.is_dir() and not any(run.iterdir()):
                run.rmdir()  # stopped before it wrote anything (Ctrl-C, a crash): no empty run folder left behind
            if held is None:
                lock.release()
        if summary["failed_stages"]:
            return Failed(message="; ".join(f"{k}: {v}" for k, v in summary["failed_stages"].items()), data=summary)
        if summary["all_skipped"]:
            return Completed(data=summary, name="Cached", message="every stage " + SKIPPED)
        return summary

    return gradus_flow


def _pipeline(cfg: FlowConfig, tasks: dict, root: Path, run: Path, info: dict, progress: bool, log) -> dict:
    """The flow's body once the folder is held: ingest every source, the curation stages in the pipeline's order
    (``curate.pipeline.STAGES``), difficulty, export and training where configured, then the card, the artifacts and
    the summary."""
    stages = root / "stages"
    previous = previous_run(root)
    t0 = time.monotonic()
    ingested, missing = _ingest_sources(cfg, tasks, stages, log)
    summary: dict = {"run": run.name, **{k: v for k, v in info.items() if k != "run_folder"}, "ingest": ingested,
                     "missing_sources": missing, "failed_stages": {}, "stages": {}}
    ran = [r["folder"] for r in ingested]  # every stage folder this run wrote or found complete, in order
    last = _curation(cfg, tasks, stages, list(ran), summary, ran)
    if cfg.difficulty is not None:
        _difficulty_export_train(cfg, tasks, stages, last, summary, ran, progress, root, run, log)
    summary["seconds"] = round(time.monotonic() - t0, 2)
    summary["all_skipped"] = all(r.get("skipped") for r in ingested) and all(
        r.get("skipped") for r in summary["stages"].values()) and not summary["failed_stages"]
    _publish(cfg, tasks, stages, root, run, previous, missing, ran, summary)
    write_text_atomic(run / "summary.json", json.dumps(summary, indent=2, default=str) + "\n")
    point_latest(root, run)
    return summary


def _ingest_sources(cfg: FlowConfig, tasks: dict, stages: Path, log) -> tuple[list[dict], list[dict]]:
    """One ingest task per source, side by side; a source that fails is listed (``missing``) and the others go on.
    No source read at all stops the run."""
    from curate.pipeline import INGEST_FOLDER, source_dirname

    futures = [(s, tasks["ingest"].with_options(name=f"ingest {source_dirname(i, s)}").submit(
        {"spec": s.spec, "format": s.format, "adapter": s.adapter, "mapping": s.mapping, "name": s.name,
         "revision": s.revision},
        str(stages / INGEST_FOLDER / source_dirname(i, s)))) for i, s in enumerate(cfg.curate.sources)]
    ingested, missing = [], []
    for s, fut in futures:
        fut.wait()
        if fut.state.is_completed():
            ingested.append(fut.result())
        else:  # one source that fails to load does not stop the others
            msg = str(fut.state.message or fut.state.name)
            msg = msg.removeprefix(f"{s.spec}: ")  # the reader's message names the file too
            missing.append({"source": s.spec, "error": msg[:500]})
            log.error("source %s could not be read: %s", s.spec, msg)
    if not ingested:
        raise SourceError("no source could be read: " + "; ".join(f"{m['source']}: {m['error']}" for m in missing))
    return ingested, missing


def _curation(cfg: FlowConfig, tasks: dict, stages: Path, last: list[str], summary: dict, ran: list[str]) -> list[str]:
    """The curation stages in order, each a task on the previous one's folder; returns the last folder."""
    from curate.pipeline import stages_of

    for stage, settings in stages_of(cfg.curate):
        out = str(stages / stage.folder)
        if stage.name == "dedup" and cfg.runner == "ray":
            summary["dedup_shard_tasks"] = _dedup_across_cluster(tasks, last, out, settings)
        r = tasks["stage"].with_options(name=stage.name).submit(stage.name, last, out, settings).result()
        summary["stages"][stage.name] = r
        last = [r["folder"]]
        ran.append(r["folder"])
    return last


def _dedup_across_cluster(tasks: dict, last: list[str], out: str, settings) -> int:
    """Ray: dedup's per-shard steps as tasks across the cluster (the shards' ids, the groups, each shard's
    signatures); the stage task then finds them done and writes the result. Returns the shard tasks run."""
    jobs = tasks["dedup_jobs"].submit(last, out, settings).result()
    [f.result() for f in [tasks["dedup_ids"].with_options(name=f"dedup ids {j.index}").submit(j) for j in jobs]]
    if jobs:
        tasks["dedup_groups"].submit(jobs).result()
    return len([f.result() for f in [tasks["dedup_shard"].with_options(name=f"dedup shard {j.index}").submit(j)
                                     for j in jobs]])


def _difficulty_export_train(cfg: FlowConfig, tasks: dict, stages: Path, last: list[str], summary: dict,
                             ran: list[str], progress: bool, root: Path, run: Path, log) -> None:
    """Difficulty (one task, or shares fanned out), then the export and the training run where configured. An export
    that cannot be made (0 rows) is recorded as failed: the card of what did run is still written, and the run fails
    after it."""
    from prefect.artifacts import create_markdown_artifact

    from curate.select.curriculum import SelectionError

    folder = str(stages / DIFFICULTY_FOLDER)
    if cfg.estimate_workers == 1:
        r = tasks["difficulty"].submit(last, folder, cfg.difficulty, progress).result()
    else:
        r = tasks["begin"].submit(last, folder, cfg.difficulty).result() or _fan_out(
            tasks["share"], tasks["finish"], last, folder, cfg, log)
    summary["stages"]["difficulty"] = r
    ran.append(r["folder"])
    if cfg.export is None:
        return
    try:
        r = tasks["export"].submit([r["folder"]], str(stages / EXPORT_FOLDER), cfg.export, cfg.card_name).result()
    except SelectionError as e:
        summary["failed_stages"]["export"] = e.in_config()
        log.error("export: %s", e.in_config())
        return
    summary["stages"]["export"] = r
    ran.append(r["folder"])
    if cfg.train is not None:  # the mission's "feed the trainer", as the pipeline's last task
        summary["train"] = tasks["train"].submit(str(stages / EXPORT_FOLDER), str(stages / TRAIN_FOLDER), cfg.train).result()
        log.info("train: %s", summary["train"]["last"])
        create_markdown_artifact(train_artifact(Path(summary["train"]["folder"])), key=artifact_key(root, "train"),
                                 description=f"the training run on the export of run {run.name}")


def _publish(cfg: FlowConfig, tasks: dict, stages: Path, root: Path, run: Path, previous, missing: list[dict],
             ran: list[str], summary: dict) -> None:
    """The card (and what changed since the previous run) and the waterfall, as Prefect artifacts."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    if cfg.card:
        summary["card"] = tasks["card"].submit(stages, run, previous, missing, summary["failed_stages"], ran,
                                               cfg.card_name).result()
        create_markdown_artifact(card_artifact(Path(summary["card"]["card"])), key=artifact_key(root, "card"),
                                 description=f"data card of run {run.name} of {root.resolve()}")
        if summary["card"].get("diff"):
            create_markdown_artifact(f"```\n{summary['card']['diff']}\n```", key=artifact_key(root, "card-diff"),
                                     description=f"what changed since the previous run of {root.resolve()}")
    create_table_artifact(_waterfall(summary), key=artifact_key(root, "waterfall"),
                          description=f"rows through the stages of run {run.name} of {root.resolve()}")


def _fan_out(share_t, finish_t, inputs: list[str], folder: str, cfg: FlowConfig, log) -> dict:
    """One share task per worker, each with its own engine (and a GPU from Ray when the cluster has them)."""
    from prefect_ray.context import remote_options

    gpus = cfg.gpus_per_worker
    if gpus is None:
        import ray

        gpus = 1.0 if ray.is_initialized() and ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
    n = cfg.estimate_workers
    log.info("difficulty: %d workers, %s GPU each", n, gpus)
    with remote_options(num_gpus=gpus) if gpus else remote_options():
        futures = [share_t.with_options(name=f"difficulty share {w}/{n}").submit(inputs, folder, cfg.difficulty, w, n)
                   for w in range(n)]
    shares = [f.result() for f in futures]
    return finish_t.submit(inputs, folder, cfg.difficulty, shares).result()


def _waterfall(summary: dict) -> list[dict]:
    """The waterfall artifact: the card's waterfall (rows in and out of each stage, what it removed and why), counts
    written as the card writes them; from the run's summary where no card was made."""
    card = summary.get("card") or {}
    steps = None
    if card.get("card"):
        try:
            steps = json.loads((Path(card["card"]).parent / "card.json").read_text()).get("waterfall")
        except (OSError, ValueError):
            steps = None
    if steps is None:
        steps = [{"stage": "ingest", "rows_in": sum(r["rows_in"] for r in summary["ingest"]),
                  "rows_out": sum(r["rows_kept"] for r in summary["ingest"]), "removed": {}}]
        steps += [{"stage": name, "rows_in": r["rows_in"], "rows_out": r["rows_kept"], "removed": {}}
                  for name, r in summary["stages"].items()]
    done = {"ingest": all(r["skipped"] for r in summary["ingest"]),
            **{k: bool(v.get("skipped")) for k, v in summary["stages"].items()}}
    return [{"stage": st["stage"], "rows in": f"{st['rows_in']:,}", "rows out": f"{st['rows_out']:,}",
             "removed": f"{st['rows_in'] - st['rows_out']:,}",
             "why": ", ".join(f"{r} {n:,}" for r, n in sorted(st.get("removed", {}).items(), key=lambda kv: -kv[1])),
             "skipped": "yes" if done.get(st["stage"]) else "no"} for st in steps]


def run_flow(cfg: FlowConfig, out: Path, progress: bool = False) -> dict:
    """Run the flow once (embedded Prefect unless ``PREFECT_API_URL`` points at a server) and return its summary.

    The output folder is checked and locked before Prefect starts, so a folder gradus did not write or one another
    run holds is refused at once. A run whose export could not be made returns its summary with ``failed_stages``
    (the card of the stages that ran is written); any other failure raises."""
    cfg.plan()  # sources, benchmarks and settings checked before any task runs
    out = Path(out)
    claim(out, cfg.local_sources())  # checks the folder (flows.runs.check_out) before anything is written
    lock = FlowLock(out)
    lock.acquire()  # a run that died holding this folder is settled by the flow, which knows the server
    key = str(out.resolve())
    _HELD[key] = lock
    try:
        return _run_flow_held(cfg, out, progress)
    finally:
        _HELD.pop(key, None)
        lock.release()


def _run_flow_held(cfg: FlowConfig, out: Path, progress: bool) -> dict:
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    url = get_current_settings().api.url
    if url:
        return _result(build_flow(cfg, url, progress=progress)(str(out), return_state=True))
    server = embedded_server()  # started here to share its address (Ray's workers) and to die with this process
    try:
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            try:
                result = build_flow(cfg, server.api_url, progress=progress)(str(out), return_state=True)
            finally:
                from prefect.logging.handlers import APILogHandler

                APILogHandler().flush()  # the run's last log lines reach the server before it stops, Ctrl-C or not
            return _result(result)
    finally:
        server.stop()


def embedded_server():
    """The embedded Prefect server Prefect would start for a run without one, started so that it dies with this
    process: a flow run killed with SIGKILL left its uvicorn running, reparented to init (Linux: the server is told
    to get SIGTERM when its parent dies)."""
    import subprocess

    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    popen = subprocess.Popen

    def with_parent(*args, **kwargs):
        if sys.platform.startswith("linux"):
            kwargs.setdefault("preexec_fn", _die_with_parent)
        return popen(*args, **kwargs)

    subprocess.Popen = with_parent  # type: ignore[misc,assignment]  # only while the server starts, in this thread
    try:
        server.start()
    finally:
        subprocess.Popen = popen  # type: ignore[misc]
    return server


def _die_with_parent() -> None:
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _result(state) -> dict:
    """The summary a flow run ended with: its data when it failed on purpose (``failed_stages``), else its result
    (which raises the error of a run that failed otherwise)."""
    data = state.result(raise_on_failure=False)
    if state.is_failed() and isinstance(data, dict) and data.get("failed_stages"):
        return data
    if state.is_failed() and isinstance(data, dict) and data.get("error"):
        raise FlowError(data["error"])
    return state.result()


class FlowError(GradusError):
    """A flow run that failed on bad input (its one-line reason)."""


def _deployment_entrypoint():
    from prefect import flow

    @flow(name="gradus-pipeline")
    def pipeline(config: str = "demo", out: str = "runs/flow") -> dict:
        """The deployment's entrypoint (``prefect.yaml``): load ``config`` (a path, or ``demo`` for the bundled demo
        config) and run the gradus flow into ``out`` as a subflow; relative paths are the worker's working folder's."""
        return run_flow(FlowConfig.load(DEMO_CONFIG if config == "demo" else config), Path(out).resolve())

    return pipeline


def __getattr__(name: str):  # ``flows/flow.py:pipeline`` for Prefect workers, without importing Prefect for the rest
    if name == "pipeline":
        return _deployment_entrypoint()
    raise AttributeError(name)
