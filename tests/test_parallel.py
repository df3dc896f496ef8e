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
