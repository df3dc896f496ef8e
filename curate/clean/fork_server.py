"""Loaded once in the fork server of dedup's worker pool (``curate.core.parallel.worker_pool``, ``preload`` naming
this module): pandas refused, the worker modules imported and numba's compiled loops loaded, so each worker forked
from it starts with all of that in place (a spawned worker paid about 1.2 s of CPU for it: the interpreter, the imports, numba's
import and its cached loops). The fork server is a process of its own, never the one a run lives in (which may
start vLLM, see ``curate.clean.kernels``). Importing this module does that work: it is meant for the fork server's
preload list only.

It also sets how the workers take memory, which they inherit (the server and its workers only, never the run's
process). The workers make and drop arrays of 1-40 MB all the time (a batch's strings, a shard's band words, a
band's entries, a chunk of judged signatures), and on this project's machines (a VM) a page touched for the first
time costs about 10 us in the kernel: at 1M rows without copies the workers took 330k page faults, a quarter of their
CPU time in the kernel. So:

- glibc keeps what is freed for the next array (``M_MMAP_THRESHOLD`` at its 32 MB maximum, so such arrays come from
  the heap, and ``M_TRIM_THRESHOLD`` out of reach, so the heap is not given back mid-stage): 330k faults fell to 180k;
- numpy's huge-page advice is off (``_set_madvise_hugepage(False)``): with the kernel's ``defrag=madvise`` each huge
  page first touched meant compacting memory for it (the first batch's band words took 100 ms with it, 23 ms without);
- the garbage collector is off while the modules load (numba's import makes hundreds of thousands of objects, and
  the collections they set off cost about 0.15 s of the server's 1 s), and what they made is then frozen
  (``gc.freeze``): the workers' collections skip it and leave its pages shared.

Measured together (``dev/dedup_ab.py``, 4 rounds each): 1.15x fewer CPU seconds on 1M rows without exact copies
(20.0 -> 17.3), 1.09x with them (11.0 -> 10.1), the same shards."""

from __future__ import annotations

import ctypes
import gc

import numpy as np

from curate.core.parallel import start_worker

start_worker()  # pandas refused first, as in every worker

gc.disable()
try:  # the server must start whatever happens here: a worker forked from it loads what is missing itself
    import curate.clean.dedup_disk  # noqa: F401
    from curate.clean import kernels

    kernels._FORK_SERVER = True
    kernels.warm()
except Exception:  # noqa: BLE001
    pass
finally:
    gc.freeze()
    gc.enable()

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
try:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
    libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)
except (OSError, AttributeError):  # not glibc: its own defaults
    pass
getattr(np._core.multiarray, "_set_madvise_hugepage", lambda on: None)(False)  # numpy's own switch (private)
