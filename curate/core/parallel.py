"""Batch work in worker processes, results in input order: how the CPU stages use more than one core.

A stage reads its batches in the main process, sends each to a worker (``spawn``: no fork of a process that may
hold threads, a Prefect engine or an open engine), and writes the results in the order read, so the output is
byte-identical to a one-process run. At most ``2 x workers`` batches are in flight: memory stays bounded by the
batch size whatever the input size. A worker does not load pandas (``start_worker``), which no worker function
uses and which pyarrow would otherwise import on its first call: 0.3-0.4 s of a worker's start. Dedup's pool
forks its workers from a fork server instead (``worker_pool(..., preload=MODULE)``): a single-threaded process of its
own that loads dedup's modules and numba's compiled loops once, where a spawned worker paid about 1.2 s of CPU each.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import multiprocessing as mp
import os
import pickle
import sys
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

PARALLEL_MIN_ROWS = 200_000  # below this, starting the workers (about a second each) costs more than it saves


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def workers_for(rows: int | None, workers: int = 0) -> int:
    """How many worker processes to use: ``workers`` when set, else the usable cores for inputs of at least
    ``PARALLEL_MIN_ROWS`` rows (1: in this process)."""
    if workers:
        return max(1, workers)
    return usable_cores() if rows is not None and rows >= PARALLEL_MIN_ROWS else 1


_LIBC: list = []  # glibc, once looked up (empty list inside: not glibc)


def trim_memory() -> None:
    """Give this process's free heap memory back to the system: glibc's (``malloc_trim``; elsewhere nothing) and
    pyarrow's memory pool's (mimalloc). Both keep what is freed for the next allocations (glibc what numpy frees:
    dedup's workers are told to keep up to 1 GB, ``fork_server``; mimalloc kept 180 MB of five shards' reads and
    string kernels with nothing allocated), so a long step's resident memory is its largest past step's; called
    between such steps, it is what the next holds."""
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.default_memory_pool().release_unused()
    if not _LIBC:
        try:
            _LIBC.append(ctypes.CDLL("libc.so.6").malloc_trim)
        except (OSError, AttributeError):
            _LIBC.append(None)
    if _LIBC[0] is not None:
        _LIBC[0](0)


class _NoPandas(importlib.abc.MetaPathFinder):
    """Refuses to import pandas (``find_spec`` raises ModuleNotFoundError, which pyarrow's pandas shim reads as
    "pandas is not installed"). No worker function of gradus uses pandas, but pyarrow imports it on its first call
    that asks whether an object is a pandas one (``pa.array`` of a list, for one), and that import is 0.3-0.4 s
    of the 0.5 s a worker takes to start."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"{name}: gradus's worker processes do not load pandas (curate.core.parallel)",
                                      name=name)
        return None


def start_worker(init: bytes | None = None) -> None:
    """Runs first in each worker process (the pools' ``initializer``): pandas is refused (``_NoPandas``), then
    ``initializer(*initargs)`` from ``init``, their pickle. They travel pickled as bytes and are loaded only here,
    after the refusal: loading them imports their modules (gradus's text module makes an arrow array at import,
    which would import pandas: 0.5 s of each decontam worker's start when they came as objects)."""
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())
    if init is not None:
        initializer, initargs = pickle.loads(init)
        initializer(*initargs)


@contextmanager
def worker_pool(workers: int, preload: str | None = None) -> Iterator[ProcessPoolExecutor | None]:
    """``workers`` spawned processes that several ``ordered_map`` calls share (each process starts once: about
    0.3 s); None for one worker (work in this process). Leaving the block does not wait for the processes to
    exit. ``preload`` (a module name; dedup's pool, on POSIX): the processes are forked from a fork server that has
    loaded that module (``curate.clean.fork_server``: dedup's modules and compiled loops) once, instead of each
    loading them; the server starts loading now, in the background. A process has one fork server (the grading
    pool's too): one started earlier keeps its own preload list, and each worker then loads what it lacks."""
    if workers <= 1:
        yield None
        return
    ctx: Any = mp.get_context("spawn")
    if preload and os.name == "posix":
        from multiprocessing import forkserver

        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload([preload])
        forkserver.ensure_running()
    ex = ProcessPoolExecutor(workers, mp_context=ctx, initializer=start_worker)
    try:
        yield ex
    finally:
        # every result is in by now: the processes wind down (about 0.3 s: the interpreter's teardown, numba's
        # included) while this process goes on, and are joined at its exit at the latest
        ex.shutdown(wait=False, cancel_futures=True)


def ordered_map(fn: Callable[[Any], Any], items: Iterable[Any], workers: int = 1,
                initializer: Callable[..., None] | None = None, initargs: tuple = (),
                pool: ProcessPoolExecutor | None = None, in_flight: int | None = None) -> Generator[Any, None, None]:
    """``fn`` over ``items`` in ``workers`` processes (or in ``pool``'s, from ``worker_pool``), yielded in input
    order. ``initializer(*initargs)`` runs once in each worker (and here when ``workers`` is 1): per-worker state
    such as an index. ``fn`` and ``initializer`` must be module-level functions. ``in_flight``: how many items a
    pool holds at once (two per worker by default: memory stays bounded by the batch size; more keeps the workers busy
    while this process is slow to take the results)."""
    if pool is not None:
        yield from _bounded(pool, fn, items, in_flight or 2 * getattr(pool, "_max_workers", usable_cores()))
        return
    if workers <= 1:
        if initializer is not None:
            initializer(*initargs)
        yield from map(fn, items)
        return
    init = None if initializer is None else pickle.dumps((initializer, initargs), protocol=pickle.HIGHEST_PROTOCOL)
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=start_worker,
                             initargs=(init,)) as ex:
        yield from _bounded(ex, fn, items, 2 * workers)


def _bounded(ex: ProcessPoolExecutor, fn: Callable[[Any], Any], items: Iterable[Any], most: int) -> Iterator[Any]:
    """Results in input order, at most ``most`` items in flight: memory stays bounded by the batch size."""
    pending: deque = deque()
    for item in items:
        pending.append(ex.submit(fn, item))
        if len(pending) >= most:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()
