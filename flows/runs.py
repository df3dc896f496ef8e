"""A flow's output folder: what may be in it, who holds it, and its one-per-run record folders.

- *Guard*: ``--out`` must be a new or empty folder, or one a gradus flow wrote (``FLOW_MARKER``, or the layout of
  an older gradus: ``stages/``, ``runs/``, ``latest``). A file, a link, or a folder with other files in it is
  refused before anything is written, so a flow never writes beside a user's own files.
- *Lock*: a run holds an exclusive ``flock`` on ``OUT/.gradus-flow.lock`` for its whole duration and writes who it
  is there (pid, host, start time, Prefect flow run). A second run on the same folder refuses at once and names
  the holder. The kernel drops the lock when its process dies, however it dies.
- *Crashed runs*: a lock file that names a run but is not held means that run died without finishing (killed, out
  of memory, the machine went down). The next run marks that Prefect flow run ``Crashed`` if the server still
  has it running, and removes the run folder it left empty.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path

from curate.core.errors import GradusError
from curate.core.locks import FolderLock
from curate.core.locks import now as _now

log = logging.getLogger(__name__)
FLOW_MARKER = ".gradus-flow.json"  # this folder is a gradus flow's output
LOCK = ".gradus-flow.lock"  # held (flock) by the run in progress; says who that is
# what a flow's output folder holds: anything else is a user's, and the flow refuses the folder
OWNED = {FLOW_MARKER, LOCK, "stages", "runs", "latest"}


class FlowFolderError(GradusError):
    """An output folder the flow will not write into, or one another run holds."""


def check_out(out: Path, sources: Sequence[str] = ()) -> None:
    """Refuse an ``--out`` that is a file, a link, a folder holding files a gradus flow did not write, or one that
    lies inside (or holds) a local source of the flow."""
    out = Path(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise FlowFolderError(f"--out {out} is a file or a link: give a folder (a new one, or one a flow wrote)")
    for root in _local_roots(sources):
        where = out.resolve()
        if where == root or root in where.parents:
            raise FlowFolderError(f"--out {out} lies inside the source {root}: choose a folder outside it")
        if where in root.parents:
            raise FlowFolderError(f"--out {out} holds the source {root}: choose a folder beside it")
    if not out.is_dir():
        return
    foreign = sorted(e.name for e in out.iterdir() if not _ours(e))
    if foreign:
        raise FlowFolderError(f"--out {out} holds files a gradus flow did not write ({', '.join(foreign[:5])}"
                              f"{', ...' if len(foreign) > 5 else ''}): choose an empty or new folder")


def _ours(e: Path) -> bool:
    """An entry of a flow folder as a flow writes it: ``latest`` is always a link (a user's file by that name is
    not), ``stages`` and ``runs`` folders, the marker and lock files, a ``.latest.PID`` link being renamed."""
    if e.name == "latest" or e.name.startswith(".latest."):
        return e.is_symlink()
    if e.name in ("stages", "runs"):
        return e.is_dir() and not e.is_symlink()
    return e.name in OWNED and e.is_file() and not e.is_symlink()


def _local_roots(sources: Sequence[str]) -> list[Path]:
    """The folders and files the flow's sources read on this machine."""
    from curate.sources.readers import source_root

    roots = []
    for spec in sources:
        root = source_root(spec)
        if root is None and Path(spec).exists():
            root = Path(spec)
        if root is not None:
            roots.append(root.resolve())
    return roots


def claim(out: Path, sources: Sequence[str] = ()) -> None:
    """Create ``out`` (after ``check_out``) and mark it as a flow's folder."""
    check_out(out, sources)
    out.mkdir(parents=True, exist_ok=True)
    marker = out / FLOW_MARKER
    if not marker.exists():
        marker.write_text(json.dumps({"kind": "gradus-flow", "created": _now()}) + "\n")


class FlowLock(FolderLock):
    """The run's hold on its output folder (see the module's docstring and ``curate.core.locks``)."""

    error = FlowFolderError
    hint = "wait for it, or use another --out"

    def __init__(self, out: Path):
        super().__init__(Path(out) / LOCK)


def settle_crashed(out: Path, record: dict, current_run: str | None = None) -> dict:
    """What the next run does about a run that died holding ``out``: its Prefect flow run is set ``Crashed`` (if
    the server this process talks to still has it pending or running) and its run folder removed if it is empty.
    Returns what was done, for the summary."""
    done: dict = {"pid": record.get("pid"), "started": record.get("started"), "flow_run": record.get("flow_run_name")}
    run = record.get("run_folder")
    if run:
        p = Path(out) / "runs" / run
        if p.is_dir() and not any(p.iterdir()):
            p.rmdir()
            done["removed_empty_run_folder"] = run
    fid = record.get("flow_run_id")
    if fid and fid != current_run:  # the same flow run retried (Prefect keeps its id): not a dead run to mark
        done["marked_crashed"] = _mark_crashed(fid, record)
    log.warning("a previous run on %s (pid %s, started %s) died before it finished: %s", out, record.get("pid"),
                record.get("started"), ", ".join(f"{k} {v}" for k, v in done.items() if k.startswith(("marked", "removed"))
                                                   ) or "nothing left to clean")
    return done


def _mark_crashed(flow_run_id: str, record: dict) -> bool:
    import httpx
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.states import Crashed

    try:
        with get_client(sync_client=True) as client:
            fr = client.read_flow_run(flow_run_id)
            if fr.state is None or fr.state.is_final():
                return False
            msg = (f"the process running it (pid {record.get('pid')} on {record.get('host')}) died before the run "
                   f"finished; found by the next run on its output folder at {_now()}")
            client.set_flow_run_state(flow_run_id, Crashed(message=msg), force=True)
            return True
    except (ObjectNotFound, httpx.HTTPError, OSError) as e:  # a run this server never had, or no server: nothing to mark
        log.info("could not mark flow run %s crashed: %s", flow_run_id, str(e).splitlines()[0][:200] if str(e) else e)
        return False


def run_dir(out: Path) -> Path:
    """A new run folder ``out/runs/<UTC time>`` (a suffix when two runs start in the same second)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    d = out / "runs" / stamp
    n = 1
    while d.exists():
        n += 1
        d = out / "runs" / f"{stamp}-{n}"
    d.mkdir(parents=True)
    return d


def point_latest(out: Path, run: Path) -> None:
    """``out/latest`` -> ``run``, replaced atomically (a symlink renamed over the old one)."""
    tmp = out / f".latest.{os.getpid()}"
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(run.relative_to(out))
    os.replace(tmp, out / "latest")


def previous_run(out: Path) -> Path | None:
    link = out / "latest"
    return link.resolve() if link.is_symlink() and link.resolve().is_dir() else None
