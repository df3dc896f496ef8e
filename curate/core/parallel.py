"""Batch work in worker processes, results in input order: how the CPU stages use more than one core.

A stage reads its batches in the main process, sends each to a worker (``spawn``: no fork of a process that may
hold threads, a Prefect engine or an open engine), and writes the results in the order read, so the output is
byte-identical to a one-process run. At most ``2 x workers`` batches are in flight: memory stays bounded by the
batch size whatever the input size.
"""

from __future__ import annotations

import multiprocessing as mp
import os
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


@contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor | None]:
    """``workers`` spawned processes that several ``ordered_map`` calls share (each process starts once: about a
    second); None for one worker (work in this process). Leaving the block does not wait for the processes to
    exit."""
    if workers <= 1:
        yield None
        return
    ex = ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"))
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
    with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=initializer,
                             initargs=initargs) as ex:
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
