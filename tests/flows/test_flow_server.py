"""The flow as a Prefect server sees it (a real server with a temporary database): the run's own logs, states that
say what happened, artifacts per output folder, runs killed mid-flow marked Crashed, and the output folder's guard
and lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.runs import FlowFolderError, FlowLock

pytest.importorskip("prefect")
ROOT = Path(__file__).resolve().parents[2]


def _config(tmp_path: Path, sources: list, name: str = "flow.json", **extra) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"sources": sources, "decontam": {"benchmarks": []}, **extra}))
    return p


def _client():
    from prefect.client.orchestration import get_client

    return get_client(sync_client=True)


def _task_runs(client, flow_run_id: str) -> dict:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    return {r.name.rsplit("-", 1)[0]: r for r in runs}  # "filter-e6c": the task's name and a suffix


def test_out_folders_gradus_did_not_write_are_refused_and_a_held_folder_names_its_holder(tmp_path):
    """No server needed: the folder is checked and locked before Prefect starts."""
    from flows.flow import FlowConfig, run_flow

    cfg = FlowConfig.load(_config(tmp_path, [{"spec": "synthetic:n=10,seed=1", "name": "synthetic"}]))
    mine = tmp_path / "userdir"
    mine.mkdir()
    (mine / "thesis.tex").write_text("\\documentclass{article}")
    with pytest.raises(FlowFolderError, match=r"holds files a gradus flow did not write \(thesis.tex\)"):
        run_flow(cfg, mine)
    assert sorted(p.name for p in mine.iterdir()) == ["thesis.tex"]  # nothing written beside it
    (tmp_path / "file.csv").write_text("a,b\n")
    with pytest.raises(FlowFolderError, match="is a file or a link: give a folder"):
        run_flow(cfg, tmp_path / "file.csv")
    out = tmp_path / "out"
    out.mkdir()
    held = FlowLock(out)
    held.acquire()
    try:
        with pytest.raises(FlowFolderError, match=rf"in use by pid {os.getpid()} on .*, started 20\d\d-"):
            run_flow(cfg, out)
    finally:
        held.release()
    assert not (out / "runs").exists()  # the refused run left no run folder


def test_logs_states_and_artifacts_on_the_server(prefect_harness, tmp_path):
    """One run, then an unchanged re-run, into each of two output folders: gradus's own log lines are in the runs'
    logs; a stage that found its complete output ends Cached with the reason, and so does the whole re-run; a source
    that cannot be read ends Failed with one line; each folder keeps its own card and waterfall artifacts, the card
    without its YAML header and with its plots inline."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, LogFilter, LogFilterFlowRunId

    from flows.flow import SKIPPED, FlowConfig, artifact_key, run_flow

    broken = tmp_path / "broken.json"
    broken.write_text('[{"problem": "What is $1+1$?", "answer": "2"},\n{"problem": ')
    cfg = FlowConfig.load(_config(tmp_path, [{"spec": "synthetic:n=40,seed=3", "name": "synthetic"}, {"spec": str(broken)}]))
    a, b = tmp_path / "a", tmp_path / "b"
    first = run_flow(cfg, a)
    again = run_flow(cfg, a)
    other = run_flow(cfg, b)
    assert [m["error"] for m in first["missing_sources"]] == ["malformed JSON (Expecting value at line 2)"]
    assert again["all_skipped"] and first["flow_run_name"] and again["flow_run_id"] != first["flow_run_id"]
    assert first["flow_run_id"] in first["ui_url"]  # the run's page in the UI of the server it ran on
    with _client() as client:
        fr = client.read_flow_run(again["flow_run_id"])
        assert (fr.state.type.value, fr.state.name) == ("COMPLETED", "Cached")
        tasks = _task_runs(client, again["flow_run_id"])
        assert tasks["filter"].state.name == "Cached" and tasks["filter"].state.message == SKIPPED
        assert tasks["ingest 00_synthetic"].state.name == "Cached"
        failed = _task_runs(client, first["flow_run_id"])["ingest 01_broken"].state
        assert failed.type.value == "FAILED" and failed.message.endswith("malformed JSON (Expecting value at line 2)")
        assert _task_runs(client, first["flow_run_id"])["filter"].state.name == "Completed"

        from prefect.logging.handlers import APILogHandler

        APILogHandler().flush()
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[again["flow_run_id"]])))
        ours = [x.message for x in logs if x.name.startswith(("curate", "flows", "data_cards"))]
        assert any("complete output found" in m and "2_filter" in m for m in ours), [x.name for x in logs]
        assert any(x.level >= 40 and "broken.json could not be read: malformed JSON" in x.message for x in logs)
        # gradus's lines sit on the task runs that wrote them: the Cached filter's skip line on the filter task
        skip = [x for x in logs if "complete output found" in x.message and "2_filter" in x.message]
        assert skip[0].task_run_id == tasks["filter"].id
        assert not any(x.message.startswith(x.name) for x in logs)  # the logger's name once, in its own column
        # the run that did the work: every stage's task run has gradus's lines (what it read, kept and wrote)
        did = _task_runs(client, first["flow_run_id"])
        first_logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[first["flow_run_id"]])))
        for name in ("ingest 00_synthetic", "filter", "dedup"):
            lines = [x.message for x in first_logs if x.task_run_id == did[name].id and x.name.startswith("curate")]
            assert any(" kept, " in m and "written to" in m for m in lines), (name, lines)

        keys = {artifact_key(a, "card"), artifact_key(b, "card"), artifact_key(a, "waterfall")}
        assert len(keys) == 3 and all(k.startswith(("gradus-a-", "gradus-b-")) for k in keys)
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=sorted(keys))))
        by_key: dict[str, list] = {}
        for art in arts:
            by_key.setdefault(art.key, []).append(art)
        assert len(by_key[artifact_key(a, "card")]) == 2 and len(by_key[artifact_key(b, "card")]) == 1
        body = by_key[artifact_key(b, "card")][0].data
        assert not body.startswith("---") and "dataset_info" not in body.split("\n## ")[0]
        assert "](data:image/png;base64," in body and "](plots/" not in body
        rows = by_key[artifact_key(a, "waterfall")][0].data
        rows = json.loads(rows) if isinstance(rows, str) else rows
        assert [r["stage"] for r in rows] == ["ingest", "filter", "dedup"]
        filt = rows[1]  # the card's waterfall: counts as the card writes them, and why rows were removed
        assert filt["rows in"] == f"{first['stages']['filter']['rows_in']:,}" and filt["why"]
        assert "<details>" not in body and "#### Two examples of each reason" in body  # no toggle Prefect drops
    assert other["stages"]["dedup"]["rows_kept"] == first["stages"]["dedup"]["rows_kept"]


def test_a_run_killed_mid_flow_is_marked_crashed_by_the_next_run(prefect_harness, tmp_path):
    """``gradus flow run`` killed with SIGKILL while it ingests: the server still has its flow run RUNNING and an
    empty run folder is left. The next run on the folder marks that flow run Crashed, removes the empty folder, and
    finishes."""
    from flows.flow import FlowConfig, run_flow

    path = _config(tmp_path, [{"spec": "synthetic:n=400000,seed=5", "name": "synthetic"}])
    out = tmp_path / "out"
    env = {**os.environ, "PREFECT_API_URL": prefect_harness, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "flow", "run", str(path), "--out", str(out),
                             "--no-progress"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lock = out / ".gradus-flow.lock"
    deadline = time.monotonic() + 120
    record: dict = {}
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            record = json.loads(lock.read_text() or "{}")
        except (FileNotFoundError, json.JSONDecodeError):
            record = {}
        if record.get("flow_run_id") and (out / "stages" / "1_ingest").is_dir():
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
    assert record.get("flow_run_id"), "the run never wrote its flow run into the lock"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    run_folder = out / "runs" / record["run_folder"]
    assert run_folder.is_dir() and not any(run_folder.iterdir())
    with _client() as client:
        assert client.read_flow_run(record["flow_run_id"]).state.type.value == "RUNNING"

    small = FlowConfig.load(_config(tmp_path, [{"spec": "synthetic:n=30,seed=5", "name": "synthetic"}], "small.json"))
    s = run_flow(small, out)
    crashed = s["previous_run_crashed"]
    assert crashed["marked_crashed"] is True and crashed["removed_empty_run_folder"] == record["run_folder"]
    assert crashed["pid"] == proc.pid and not run_folder.exists()
    with _client() as client:
        st = client.read_flow_run(record["flow_run_id"]).state
        assert st.type.value == "CRASHED" and f"pid {proc.pid}" in st.message
    assert (out / "latest" / "summary.json").is_file()
    assert (out / ".gradus-flow.lock").read_text() == ""  # released: the next run finds nothing to settle
    assert "previous_run_crashed" not in run_flow(small, out)


@pytest.mark.engine
def test_an_export_of_zero_rows_fails_the_run_after_the_card_of_what_ran(prefect_harness, tmp_path):
    """The real SmolLM2 with one token per answer solves nothing, so every scored row is a never-solved end and an
    export told to leave the ends out would be empty: the run ends Failed with a hint naming the config keys, and the summary
    and the card of the stages that ran are written, without the export's older output."""
    from flows.cli import main

    path = _config(tmp_path, [{"spec": "synthetic:n=30,seed=4,mix=ladder", "name": "synthetic"}],
                   difficulty={"backend": "hf", "template": "fewshot", "limit": 4, "store": None,
                               "sampling": {"k": 1, "temperature": 1.0, "max_tokens": 1}},
                   export={"include_ends": False})
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        main(["flow", "run", str(path), "--out", str(out), "--no-progress"])
    assert e.value.code == 1
    s = json.loads((out / "latest" / "summary.json").read_text())
    assert s["failed_stages"]["export"].startswith("the export would hold 0 rows (of 4 scored")
    assert s["failed_stages"]["export"].endswith("change export.target, export.buckets or export.include_ends in the config")
    assert "--target" not in s["failed_stages"]["export"] and "export" not in s["stages"]
    card = (out / "latest" / "card" / "README.md").read_text()
    assert "**No export.**" in card and "## Selection and curriculum" not in card
    assert json.loads((out / "latest" / "card" / "card.json").read_text())["difficulty"]["rows"] == 4
    with _client() as client:
        st = client.read_flow_run(s["flow_run_id"]).state
        assert st.type.value == "FAILED" and st.message.startswith("export: the export would hold 0 rows")


def test_a_retried_flow_run_does_not_mark_itself_crashed(tmp_path):
    """Prefect keeps a flow run's id when it is retried: finding its own id in the lock is not a dead run."""
    from flows.runs import settle_crashed

    (tmp_path / "runs" / "old").mkdir(parents=True)
    done = settle_crashed(tmp_path, {"pid": 1, "flow_run_id": "abc", "run_folder": "old"}, current_run="abc")
    assert "marked_crashed" not in done and done["removed_empty_run_folder"] == "old"


def test_the_terminal_stays_quiet_while_the_server_gets_every_line(prefect_harness, tmp_path):
    """``gradus flow run`` without -v: the screen shows the plan and the report, no INFO lines; the server still gets
    Prefect's own lifecycle lines and gradus's lines for the run."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    path = _config(tmp_path, [{"spec": "synthetic:n=50,seed=2", "name": "synthetic"}])
    env = {**os.environ, "PREFECT_API_URL": prefect_harness, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", None)
    p = subprocess.run([sys.executable, "-m", "flows.cli", "flow", "run", str(path), "--out", str(tmp_path / "o"),
                        "--no-progress"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert " | INFO " not in p.stderr and "INFO " not in p.stdout
    run_id = json.loads(next((tmp_path / "o" / "runs").iterdir()).joinpath("summary.json").read_text())["flow_run_id"]
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()
    with _client() as client:
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
    names = {x.name for x in logs}
    assert any(n.startswith("prefect.") for n in names), names  # Prefect's lifecycle lines
    assert any(x.name.startswith("curate") and " kept, " in x.message for x in logs)


def test_a_run_that_overlaps_a_running_one_is_skipped_in_a_line(prefect_harness, tmp_path):
    """A scheduled or deployed run starts while the previous one still holds the folder: it ends Cancelled with the
    reason ("skipped: ... is in use by pid ...") instead of failing with a traceback."""
    from flows.flow import FlowConfig, build_flow
    from flows.runs import claim

    cfg = FlowConfig.load(_config(tmp_path, [{"spec": "synthetic:n=10,seed=1", "name": "synthetic"}]))
    out = tmp_path / "out"
    claim(out)
    held = FlowLock(out)
    held.acquire()
    try:
        state = build_flow(cfg)(str(out), return_state=True)  # as a served run calls it
    finally:
        held.release()
    assert state.type.value == "CANCELLED" and state.message.startswith("skipped: ")
    assert f"in use by pid {os.getpid()}" in state.message
    assert not (out / "runs").exists() or not any((out / "runs").iterdir())


def test_ctrl_c_stops_a_flow_in_a_line_and_sigkill_leaves_no_server(tmp_path):
    """``gradus flow run`` on the embedded server: Ctrl-C ends it within seconds (the stage's worker thread stops
    between batches), exit 130, one line and no traceback, no empty run folder left; SIGKILL takes the embedded
    server down with it instead of leaving uvicorn running."""
    import psutil

    path = _config(tmp_path, [{"spec": "synthetic:n=400000,seed=5", "name": "synthetic"}])
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL")}
    env["PREFECT_HOME"] = str(tmp_path / "prefect_home")

    def start(out):
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "flow", "run", str(path), "--out", str(out),
                                 "--no-progress"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        deadline = time.monotonic() + 180
        while not any((out / "stages" / "1_ingest").glob("*/.gradus-stage.json")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        return proc

    proc = start(tmp_path / "a")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and time.monotonic() - t0 < 30
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("gradus flow: interrupted")
    assert not any((tmp_path / "a" / "runs").iterdir())  # the run folder it had made, empty, is gone
    proc = start(tmp_path / "b")
    children = [c for c in psutil.Process(proc.pid).children(recursive=True) if "uvicorn" in " ".join(c.cmdline())]
    assert children, "no embedded server found"
    proc.kill()
    proc.wait()
    gone, alive = psutil.wait_procs(children, timeout=20)
    assert not alive, [c.cmdline() for c in alive]
