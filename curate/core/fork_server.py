"""Loaded once in the fork server of dedup's worker pool (``curate.core.parallel.worker_pool(..., preload=True)``):
pandas refused, the worker modules imported and numba's compiled loops loaded, so each worker forked from it starts
with all of that in place (a spawned worker paid about 1.2 s of CPU for it: the interpreter, the imports, numba's
import and its cached loops). The fork server is a process of its own, never the one a run lives in (which may
start vLLM, see ``curate.clean.kernels``). Importing this module does that work: it is meant for the fork server's
preload list only."""

from __future__ import annotations

from curate.core.parallel import start_worker

start_worker()  # pandas refused first, as in every worker

try:  # the server must start whatever happens here: a worker forked from it loads what is missing itself
    import curate.clean.dedup_disk  # noqa: F401
    from curate.clean import kernels

    kernels._FORK_SERVER = True
    kernels.warm()
except Exception:  # noqa: BLE001
    pass
