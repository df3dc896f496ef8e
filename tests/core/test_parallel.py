"""The CPU stages' worker processes (``curate.core.parallel``): results in input order, the initializer run in each
worker, and pandas refused there while pyarrow works as it does with it."""

from __future__ import annotations

import os
import sys

import pyarrow as pa
import pyarrow.compute as pc

from curate.core.parallel import ordered_map, worker_pool

_STATE: dict[str, int] = {}


def _set(base: int) -> None:
    _STATE["base"] = base


def _add(x: int) -> tuple[int, int]:
    return _STATE["base"] + x, os.getpid()


def _probe(words: list[str]) -> tuple[str, list[int], bool]:
    try:
        import pandas  # noqa: F401

        refused = "imported"
    except ModuleNotFoundError as e:
        refused = str(e)
    arr = pa.array(words)  # pyarrow asks its pandas shim here: it must read "no pandas" and go on
    return refused, pc.utf8_length(arr).to_pylist(), "pandas" in sys.modules


def test_ordered_map_runs_the_initializer_in_each_worker_and_keeps_the_order():
    got = list(ordered_map(_add, range(40), workers=2, initializer=_set, initargs=(100,)))
    assert [v for v, _ in got] == list(range(100, 140))
    assert len({pid for _, pid in got} - {os.getpid()}) >= 1  # done in worker processes, not here


def test_worker_processes_refuse_pandas_and_pyarrow_goes_on_without_it():
    with worker_pool(2) as pool:
        refused, lengths, loaded = pool.submit(_probe, ["ab", "", "xyz\u00e9"]).result()
    assert "do not load pandas" in refused
    assert lengths == [2, 0, 4]
    assert loaded is False


def _loaded(_: int) -> tuple[bool, bool]:
    return "curate.clean.decontam" in sys.modules, "pandas" in sys.modules


def test_an_initializers_arguments_are_loaded_after_pandas_is_refused():
    # decontam's initializer and its index come from curate.clean.decontam, whose import (through curate.clean.text)
    # makes an arrow array: loaded before the refusal, that imported pandas in every worker (0.5 s of its start)
    from curate.clean.decontam import BenchmarkIndex, DecontamConfig, init_matcher

    got = list(ordered_map(_loaded, range(4), workers=2, initializer=init_matcher,
                           initargs=(BenchmarkIndex(ngram=8), DecontamConfig())))
    assert got == [(True, False)] * 4


def test_dedups_pool_forks_its_workers_from_a_server_that_loaded_the_compiled_loops(tmp_path):
    """``worker_pool(..., preload=MODULE)``: the workers come from a fork server that imported dedup's modules and
    loaded numba's loops once (``curate.clean.fork_server``), pandas refused there, and set how they take memory.
    Run in a fresh interpreter: a process has one fork server, and an earlier test's grading pool may have started
    it without that list."""
    import ast
    import importlib.util
    import subprocess
    from pathlib import Path

    import pytest

    if importlib.util.find_spec("numba") is None:  # not imported here: numba in this process breaks vLLM's later tests
        pytest.skip("numba is not installed here")
    (tmp_path / "probe_mod.py").write_text(
        "import gc, sys\n"
        "import numpy as np\n"
        "def probe(_):\n"
        "    from curate.clean import kernels\n"
        "    huge = np._core.multiarray._set_madvise_hugepage(False)  # returns the setting it found\n"
        "    return ('numba' in sys.modules, kernels._FORK_SERVER, sorted(k for k, v in kernels._BUILT.items() if v),\n"
        "            'pandas' in sys.modules, huge, gc.get_freeze_count(), gc.isenabled())\n")
    code = ("import os, sys\n"
            f"sys.path.insert(0, {str(tmp_path)!r})\n"
            "from curate.core.parallel import worker_pool\n"
            "import probe_mod\n"
            "if __name__ == '__main__':\n"
            "    with worker_pool(2, preload='curate.clean.fork_server') as pool:\n"
            "        got = pool.submit(probe_mod.probe, 0).result()\n"
            "    print(repr(got))\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-2000:]
    numba_in, forked, built, pandas_in, huge, frozen, gc_on = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    assert (numba_in, forked, pandas_in) == (True, True, False)
    # numpy's huge-page advice off, the modules' objects frozen for the collector, which is on again
    assert (huge, gc_on) == (False, True) and frozen > 100_000
    from curate.clean.kernels import _TRY

    assert built == sorted(_TRY)  # every loop loaded in the server, none left to the worker
