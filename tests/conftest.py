"""Shared fixtures: the real data folder (skip when absent) and small record tables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REAL = Path(os.environ.get("GRADUS_REAL_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
# On a GPU machine the trainer tests run on CUDA (device auto). Bit-exact resume needs cuBLAS's fixed workspace and
# torch's deterministic kernels (index_select's backward adds with atomics otherwise); set before CUDA starts.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def cuda() -> bool:
    """Whether this run's tests compute on a CUDA device (the trainer's and engines' ``device = "auto"``)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def pytest_configure(config):
    if cuda():
        import torch

        torch.use_deterministic_algorithms(True, warn_only=True)  # a kernel without a deterministic form warns


def pytest_collection_modifyitems(config, items):
    """``gpu`` tests run where CUDA is, and are skipped (saying so) elsewhere."""
    gpu = [i for i in items if i.get_closest_marker("gpu")]
    if gpu and not cuda():
        skip = pytest.mark.skip(reason="needs a CUDA device (benchmarks/gpu_check.sh is the prepared check for a lent GPU)")
        for i in gpu:
            i.add_marker(skip)


def write_easy_sums(folder: Path, n: int = 12) -> Path:
    """``n`` scored rows of easy sums (pass counts 2, 5, 8 of 10 in turn) as ``folder/kept/part_000000.parquet``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for i in range(n):
        a, b, c = i + 2, 3 * i + 1, [2, 5, 8][i % 3]
        rows.append({"id": f"p{i:02d}", "source": "synthetic", "source_id": str(i), "subject": "arith", "level": "1",
                     "problem": f"What is ${a} + {b}$?", "answer": str(a + b), "n_correct": c, "n_graded": 10, "k": 10,
                     "pass_rate": c / 10, "pass_rate_low": 0.0, "pass_rate_high": 1.0, "model": "m"})
    (folder / "kept").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "kept" / "part_000000.parquet")
    return folder


@pytest.fixture(scope="session")
def real_data() -> Path:
    if not REAL.is_dir():
        pytest.skip(f"real data folder {REAL} is absent")
    return REAL


@pytest.fixture(scope="session")
def prefect_harness():
    """A real Prefect server (a temporary database) for the session's flow tests; yields its API URL."""
    pytest.importorskip("prefect")
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield PREFECT_API_URL.value()


def free_port() -> int:
    """A free TCP port on the loopback interface (for a server a test starts)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
