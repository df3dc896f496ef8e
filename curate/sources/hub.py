"""Hugging Face hub sources pinned to a commit.

A hub id (``owner/name``, ``hf:owner/name``, optional ``:config`` and ``@split``) is resolved to the commit it points
at when a run starts: the Hub API when it can be reached, else the local hub cache's ref (what the last online run
downloaded). That commit is the source's fingerprint (a new commit on the Hub re-ingests it; the same commit is
skipped), is loaded with ``revision=`` so the rows are exactly that snapshot, and is recorded in the ingest manifest
and the card. A config's ``revision`` pins a source to a commit, a branch or a tag.

Offline (``HF_HUB_OFFLINE=1``, or the Hub cannot be reached), a source whose commit is in the cache is read from the
cached snapshot's data files (``datasets`` itself does not load a hub data set offline from the hub cache); with
neither a cache nor a pinned commit it is one clear error for that source.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from curate.core.errors import SourceError

SHA = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class HubSource:
    name: str  # owner/name
    config: str | None
    split: str

    @classmethod
    def parse(cls, spec: str) -> HubSource:
        name = spec.removeprefix("hf:")
        split = "train"
        if "@" in name:
            name, split = name.rsplit("@", 1)
        config = None
        if ":" in name:
            name, config = name.split(":", 1)
        return cls(name, config, split)


@dataclass(frozen=True)
class Pinned:
    commit: str  # the 40-hex commit the rows are read at
    how: str  # hub (asked the Hub) | cache (the local hub cache's ref) | pinned (the config's commit)
    snapshot: Path | None = None  # the cached snapshot folder, when there is one


def hub_cache() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _repo_dir(name: str) -> Path:
    return hub_cache() / ("datasets--" + name.replace("/", "--"))


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def resolve(spec: str, revision: str | None = None) -> Pinned:
    """The commit ``spec`` is read at: ``revision`` if it is a commit; else the Hub's answer for ``revision`` (default
    the main branch); else, offline, the cache's ref for it. Raises a one-line ``SourceError`` when none is known."""
    src = HubSource.parse(spec)
    repo = _repo_dir(src.name)
    if revision and SHA.fullmatch(revision):
        snap = repo / "snapshots" / revision
        return Pinned(revision, "pinned", snap if snap.is_dir() else None)
    ref = revision or "main"
    why = "offline (HF_HUB_OFFLINE=1)"
    if not offline():
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

        try:
            sha = HfApi().dataset_info(src.name, revision=revision, timeout=30).sha
            if sha:
                snap = repo / "snapshots" / sha
                return Pinned(sha, "hub", snap if snap.is_dir() else None)
        except (RepositoryNotFoundError, RevisionNotFoundError) as e:
            raise SourceError(f"{spec}: {type(e).__name__.replace('Error', '').lower()} on the Hub"
                              + (f" (revision {revision})" if revision else "")) from e
        except (HfHubHTTPError, OSError, ValueError) as e:  # no network, a proxy, a timeout: the cache may know
            why = f"the Hub cannot be reached ({type(e).__name__})"
        except Exception as e:  # noqa: BLE001 - the HTTP client's own connection errors (httpx) are none of those
            why = f"the Hub cannot be reached ({type(e).__name__})"
    f = repo / "refs" / ref
    if f.is_file():
        sha = f.read_text().strip()
        if SHA.fullmatch(sha):
            snap = repo / "snapshots" / sha
            return Pinned(sha, "cache", snap if snap.is_dir() else None)
    raise SourceError(f"{spec}: {why}, and neither a cached snapshot ({repo}) nor a pinned commit: run once online, or "
                      "set the source's revision to a commit")


def snapshot_files(spec: str, snapshot: Path) -> list[Path]:
    """The data files of one split of a cached snapshot, found the way ``datasets`` finds a repository's splits from
    its file layout (``data/train-00000-of-00002.parquet``, ``train/...``, ``<config>/train-...``)."""
    from datasets.data_files import DataFilesDict, get_data_patterns

    src = HubSource.parse(spec)
    base = snapshot / src.config if src.config and (snapshot / src.config).is_dir() else snapshot
    if src.config and base == snapshot:
        raise SourceError(f"{spec}: the cached snapshot {snapshot.name[:12]} has no folder for config {src.config!r}; "
                          "read it online once")
    try:
        files = DataFilesDict.from_patterns(get_data_patterns(str(base)), base_path=str(base))
    except Exception as e:  # datasets raises several types for a layout it cannot read
        raise SourceError(f"{spec}: cannot find data files in the cached snapshot {base} ({type(e).__name__})") from e
    if src.split not in files:
        raise SourceError(f"{spec}: the cached snapshot has no split {src.split!r} (it has {', '.join(files)})")
    return sorted(Path(x) for x in files[src.split])
