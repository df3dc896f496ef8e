"""A training run's folder: what gradus writes there, who holds it, and what a resumed run may change.

- *Guard*: ``out`` must be a new or empty folder, or one a gradus training run wrote (its marker
  ``.gradus-run.json``; or, from before the marker, a ``config.json`` with the trainer's ``resolved`` settings)
  holding nothing but what the trainer writes; one holding only the lock file (a run that died before its marker)
  counts as empty. A link, a file, or a folder with other files is refused before anything is written.
- *Lock*: the run holds ``.gradus-train.lock`` (``curate.core.locks``) from start to end; a second run on the folder
  refuses at once and names the holder.
- *Resume*: ``--resume`` continues the same run. Settings that change what the checkpoint continues (the data,
  model, algorithm, sampling, optimizer, seed) must be the run's; only how long it runs and what it records may
  change (``MAY_CHANGE``). A run resumed before its first checkpoint starts again from step 0 with empty logs.
"""

from __future__ import annotations

import json
from pathlib import Path

from curate.core.errors import GradusError
from curate.core.locks import FolderLock, entries_besides, now

RUN_MARKER = ".gradus-run.json"
LOCK = ".gradus-train.lock"
OWN = {RUN_MARKER, LOCK, "config.json", "metrics.jsonl", "eval.jsonl", "checkpoints", "tensorboard",
       "online_difficulty.parquet", "plots"}
# how long the run goes on and what it records: a resumed run may change these, and nothing else
MAY_CHANGE = {"steps", "budget_completions", "save_every", "keep_checkpoints", "eval_every", "eval_every_completions",
              "eval_at_start", "tensorboard", "max_bad_steps", "out"}


class RunFolderError(GradusError):
    pass


def check(out: Path, resume: bool) -> None:
    """Refuse, before anything is written, a folder this run may not write into (the module's docstring)."""
    out = Path(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise RunFolderError(f"out {out} is a file or a link: give a folder (a new one, or a training run's)")
    if not out.is_dir():
        return
    names = entries_besides(out, LOCK)  # a run that died before it wrote its marker (a full disk) left only the lock
    if not names:
        return
    ours = (out / RUN_MARKER).is_file() or _old_run(out)
    if not ours:
        raise RunFolderError(f"out {out} holds files gradus did not write ({', '.join(names[:5])}"
                             f"{', ...' if len(names) > 5 else ''}): choose an empty or new folder")
    foreign = sorted(e.name for e in out.iterdir() if e.name not in OWN)
    if foreign:
        raise RunFolderError(f"out {out} is a training run's folder but also holds files gradus did not write "
                             f"({', '.join(foreign[:5])}): move them away or choose another folder")
    if not resume and (out / "metrics.jsonl").exists():
        raise RunFolderError(f"{out} already holds a run: use --resume to continue it, or another out folder")


def _old_run(out: Path) -> bool:
    """A run written before the marker existed: its config.json carries the trainer's resolved settings."""
    try:
        d = json.loads((out / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(d, dict) and isinstance(d.get("resolved"), dict) and "preset" in d


def changed(out: Path, config: dict) -> list[str]:
    """The settings of ``config`` a resumed run may not change that differ from the run's own (``config.json``)."""
    try:
        old = json.loads((Path(out) / "config.json").read_text())
    except (OSError, ValueError):
        return []
    return [f"{k} {old[k]!r} -> {config[k]!r}" for k in sorted(config)
            if k in old and k not in MAY_CHANGE and _norm(old[k]) != _norm(config[k])]


def _norm(v):
    return json.loads(json.dumps(v, default=str))  # tuples as lists, paths as strings: as config.json holds them


def run_key(export: Path, cfg) -> str:
    """A run folder's name for training ``cfg`` on ``export`` (the flow's ``[train]`` task): a hash of the export's
    manifest and the settings, so an unchanged export with the same settings finds its run (finished: skipped;
    unfinished: resumed) and a new export trains anew."""
    import hashlib
    from dataclasses import asdict

    manifest = (Path(export) / "manifest.json").read_bytes()
    return hashlib.sha1(manifest + json.dumps(asdict(cfg), sort_keys=True, default=str).encode()).hexdigest()[:12]


def claim(out: Path) -> FolderLock:
    """Create ``out``, mark it as a training run's and take its lock (after ``check``)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lock = FolderLock(out / LOCK)
    lock.error = RunFolderError
    lock.hint = "wait for it to finish, or use another out folder"
    lock.acquire()
    lock.update({"command": "gradus train"})
    if not (out / RUN_MARKER).exists():
        (out / RUN_MARKER).write_text(json.dumps({"kind": "gradus-train", "created": now()}) + "\n")
    return lock
