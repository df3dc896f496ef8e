"""Schedules on a real ``prefect server start`` (a subprocess on a free loopback port, its own PREFECT_HOME): a flow
served on a one-minute cron fires and completes by itself, and ``prefect.yaml`` deploys and runs from a folder that
holds no gradus checkout. Slow (a server start and a cron tick: about 3 minutes); ``make test-server`` runs them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import free_port

pytest.importorskip("prefect")
pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``prefect server start`` as a user starts it; yields (API URL, environment for commands that talk to it)."""
    import httpx

    home = tmp_path_factory.mktemp("prefect_home")
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}
    env.pop("GRADUS_CHECKOUT", None)
    log = open(home / "server.log", "w")  # open for the server's whole life
    proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    url = env["PREFECT_API_URL"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, (home / "server.log").read_text()[-3000:]
        time.sleep(1)
    else:
        pytest.fail("prefect server start did not answer in 120 s")
    yield url, env, home / "server.log"
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def _small_config(tmp_path: Path) -> Path:
    p = tmp_path / "small.json"
    p.write_text(json.dumps({"sources": [{"spec": "synthetic:n=200,seed=1", "name": "synthetic"}],
                             "decontam": {"benchmarks": []}}))
    return p


def _runs_of(url: str, deployment: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
        return client.read_flow_runs(deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[deployment])))


def _wait_completed(url: str, deployment: str, seconds: float, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done = [r for r in _runs_of(url, deployment) if r.state and r.state.is_final()]
        if done:
            return done[0]
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the serving process exited: {proc.stdout.read().decode()[-3000:]}")
        time.sleep(3)
    pytest.fail(f"no run of {deployment} finished in {seconds:.0f} s")


def _estimating_config(tmp_path: Path) -> Path:
    """What users schedule: curation, difficulty on the default engine (vLLM in process, the bundled model, few-shot),
    an export and a training task; small enough for a one-minute cron on this machine."""
    p = tmp_path / "nightly.json"
    p.write_text(json.dumps({
        "sources": [{"spec": "synthetic:n=200,seed=1,mix=ladder", "name": "synthetic"}], "decontam": {"benchmarks": []},
        "difficulty": {"backend": "vllm", "template": "fewshot", "limit": 4, "store": None,
                       "sampling": {"k": 2, "temperature": 1.0, "max_tokens": 32}},
        "export": {"format": "parquet"},
        "train": {"steps": 1, "prompts_per_step": 2, "group_size": 2, "max_tokens": 16, "short_batch": "skip",
                  "save_every": 1}}))
    return p


def test_a_flow_served_on_a_one_minute_cron_fires_and_completes(server, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.flow import artifact_key

    url, env, server_log = server
    out = tmp_path / "nightly"
    proc = subprocess.Popen([str(BIN / "gradus"), "flow", "serve", str(_estimating_config(tmp_path)), "--out", str(out),
                             "--cron", "* * * * *", "--name", "every-minute"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        run = _wait_completed(url, "every-minute", 400, proc)  # the next minute's tick, then the run itself
    finally:
        t0 = time.monotonic()
        proc.terminate()  # SIGTERM, as a service manager stops it: at once, in a line
        proc.wait(30)
        stopped_in = time.monotonic() - t0
    assert run.state.type.value == "COMPLETED" and run.auto_scheduled, run.state
    summary = json.loads((out / "latest" / "summary.json").read_text())
    assert summary["flow_run_id"] == str(run.id) and summary["stages"]["dedup"]["rows_kept"] > 0
    # the difficulty task ran on vLLM in the served process after dedup had loaded numba; training followed
    assert summary["stages"]["difficulty"]["rows_kept"] == 4 and summary["train"]["steps"] == 1
    assert stopped_in < 10 and "gradus flow serve: stopped (SIGTERM)" in proc.stdout.read().decode()
    with temporary_settings({PREFECT_API_URL: url}), get_client(sync_client=True) as client:
        arts = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[artifact_key(out, "card")])))
        assert arts and arts[0].flow_run_id == run.id and "## Filter waterfall" in arts[0].data
    assert "bulk DML" not in server_log.read_text()  # the scheduler's loop (Prefect 3.7.7 on SQLAlchemy 2.1 fails here)


def test_prefect_yaml_deploys_and_runs_from_a_folder_without_a_checkout(server, tmp_path):
    """The README's steps: the repository's prefect.yaml copied to an empty folder, a process work pool, ``prefect
    deploy --all``, a run of the deployment and a worker started from yet another folder. No GRADUS_CHECKOUT."""
    url, env, _ = server
    here = tmp_path / "deploy"
    here.mkdir()
    out = tmp_path / "deployed_out"
    text = (ROOT / "prefect.yaml").read_text()
    assert "GRADUS_CHECKOUT" not in text
    text = text.replace("config: demo", f"config: {_small_config(tmp_path)}").replace("out: runs/nightly", f"out: {out}")
    (here / "prefect.yaml").write_text(text)
    prefect = str(BIN / "prefect")

    def sh(*args, cwd=here, timeout=120):
        r = subprocess.run([prefect, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        return r.stdout

    sh("work-pool", "create", "gradus", "--type", "process")
    sh("--no-prompt", "deploy", "--all")
    sh("deployment", "run", "gradus-pipeline/gradus-nightly")
    elsewhere = tmp_path / "worker"
    elsewhere.mkdir()
    sh("worker", "start", "--pool", "gradus", "--run-once", cwd=elsewhere, timeout=300)
    run = _wait_completed(url, "gradus-nightly", 60)
    assert run.state.type.value == "COMPLETED", run.state
    summary = json.loads((out / "latest" / "summary.json").read_text())
    assert summary["stages"]["dedup"]["rows_kept"] > 0 and shutil.which("gradus", path=str(BIN))
