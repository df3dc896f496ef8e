"""One writer per folder: an exclusive ``flock`` held for a whole run, with who holds it written in the lock file.

A second writer refuses at once and names the holder (pid, host, start time, and what the holder added). The
kernel drops the lock when its process dies, however it dies; a lock file that names a run but is not held means
that run died before it finished (``FolderLock.crashed``). Used by the stages (``curate.core.runner``), the
trainer (``rl_stage.trainer``) and the flow (``flows.runs``).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

from curate.core.errors import GradusError, open_no_follow


class FolderBusy(GradusError):
    """Another process holds the folder."""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def entries_besides(folder: Path, lock_name: str) -> list[str]:
    """The names in ``folder``, sorted, less its lock file: a folder holding only the lock file a run took before it
    wrote anything (then died) is as good as an empty one. A link in its place is left to ``FolderLock.acquire``,
    which refuses it by name."""
    return sorted(e.name for e in Path(folder).iterdir() if not (e.name == lock_name and e.is_file()))


class FolderLock:
    """The hold of one run on a folder. ``acquire`` returns the record of a run that died holding it (or None);
    ``update`` adds what is known once the run has started; ``release`` clears it."""

    error: type[GradusError] = FolderBusy
    hint = "wait for it, or use another folder"

    def __init__(self, path: Path):
        self.path = Path(path)
        self.fd: int | None = None
        self.crashed: dict | None = None  # what ``acquire`` found, for whoever settles it

    def acquire(self) -> dict | None:
        fd = open_no_follow(self.path, os.O_RDWR | os.O_CREAT)  # a link here would have its target truncated
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if not isinstance(e, BlockingIOError):
                os.close(fd)
                raise
            holder = _read(fd)
            os.close(fd)
            who = "another run"
            if holder:
                who = (f"pid {holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}"
                       + (f", flow run {holder['flow_run_name']}" if holder.get("flow_run_name") else "")
                       + (f" ({holder['command']})" if holder.get("command") else ""))
            raise self.error(f"{self.path.parent} is in use by {who}: {self.hint}") from None
        self.fd = fd
        self.crashed = _read(fd) or None  # a record left in an unheld lock: that run died before it finished
        self.update({"pid": os.getpid(), "host": socket.gethostname(), "started": now()}, replace=True)
        return self.crashed

    def update(self, info: dict, replace: bool = False) -> None:
        assert self.fd is not None, "update before acquire"
        record = {} if replace else (_read(self.fd) or {})
        record.update(info)
        data = (json.dumps(record) + "\n").encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, data, 0)
        os.fsync(self.fd)

    def release(self) -> None:
        if self.fd is None:
            return
        os.ftruncate(self.fd, 0)  # an empty lock file: the last run finished
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _read(fd: int) -> dict:
    try:
        raw = os.pread(fd, 1 << 16, 0)
        d = json.loads(raw) if raw.strip() else {}
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}
