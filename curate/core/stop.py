"""A stop asked for by the user (Ctrl-C, SIGTERM): long loops in worker threads look at it between batches.

Python delivers a signal to the main thread only; a stage running in a flow's task thread, or the estimator's
producer, would go on to its end while the main thread waits for it. The command's signal handler sets ``STOP``;
``check()`` raises ``KeyboardInterrupt`` in whatever thread calls it, at a point where nothing is half-written
(shards land by rename, manifests last), so the run stops within a batch and resumes later.
"""

from __future__ import annotations

import threading

STOP = threading.Event()


def check() -> None:
    if STOP.is_set():
        raise KeyboardInterrupt("stop asked for")
