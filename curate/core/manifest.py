"""The one manifest every stage writes, and the registry of stage kinds.

A stage output is a folder with ``manifest.json`` written last (tmp then rename): the typed, versioned
``Manifest`` below. Every stage (ingest, filter, decontam, dedup, estimate, export and those to come) writes
the same fields; what only one stage knows (signals, the pass-count histogram, a selection report) goes in
``stats``. Data cards, flows and ``gradus show`` read stage outputs through ``Manifest.load`` alone.

    m = Manifest.load("runs/demo/4_dedup")
    m.rows_in == m.rows_kept + m.rows_rejected == m.rows_kept + sum(m.rejected_by_reason.values())
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from curate.core.errors import GradusError

log = logging.getLogger(__name__)
MANIFEST = "manifest.json"
# 2: one shape for every stage (stats block, rows_in from upstream, code version in the identity).
# Version 1 (per-stage shapes, before this) is refused with a message saying to re-run the stage.
MANIFEST_VERSION = 2


class ManifestError(GradusError):
    """A folder that is not a finished stage output, or one written by an incompatible gradus."""


@dataclass(frozen=True)
class StageKind:
    name: str
    description: str
    output: str  # "shards" (kept/ + rejected/), "parts" (resumable kept/part_*), "folder" (built whole, renamed)
    order: int  # position in the pipeline, for listing and for showing a run folder


STAGE_KINDS: dict[str, StageKind] = {}


def register_stage(name: str, description: str, output: str, order: int) -> StageKind:
    """Add a stage kind; cards and flows enumerate ``STAGE_KINDS``. A name can be registered once."""
    if name in STAGE_KINDS:
        raise ValueError(f"stage kind {name!r} is already registered")
    if output not in ("shards", "parts", "folder"):
        raise ValueError(f"stage output must be shards, parts or folder, not {output!r}")
    STAGE_KINDS[name] = StageKind(name, description, output, order)
    return STAGE_KINDS[name]


register_stage("ingest", "read a source into record shards; unreadable rows are rejects", "shards", 1)
register_stage("filter", "heuristic filters and the gold gate (math-verify must parse the gold)", "shards", 2)
register_stage("decontam", "reject rows that match evaluation benchmarks", "shards", 3)
register_stage("dedup", "exact and near duplicates, one row kept per cluster", "shards", 4)
register_stage("estimate", "difficulty: k samples per problem, graded by math-verify", "parts", 5)
register_stage("export", "balanced / curriculum prompt sets for trainers", "folder", 6)


@dataclass
class Manifest:
    stage: str
    inputs: list[dict]  # each {"path": ..., "fingerprint": ...} or {"source": ..., "fingerprint": ...}
    input_hash: str
    config: dict
    config_hash: str
    code_version: str
    schema_version: int
    created: str
    seconds: float  # this run's wall time (0 when every part was already done)
    rows_in: int
    rows_kept: int
    rows_rejected: int
    rejected_by_reason: dict[str, int]
    by_source: dict[str, dict[str, int]]
    kept_shards: list[dict]  # {"path", "rows", "sha256"} relative to the stage folder's data folder
    rejected_shards: list[dict]
    stats: dict = field(default_factory=dict)
    manifest_version: int = MANIFEST_VERSION
    skipped: bool = field(default=False, compare=False)  # set by the runner when nothing had to be done; not saved

    def __post_init__(self) -> None:
        if self.stage not in STAGE_KINDS:
            raise ManifestError(f"unknown stage kind {self.stage!r}; known: {', '.join(STAGE_KINDS)}")
        if self.rows_in != self.rows_kept + self.rows_rejected:
            raise ManifestError(f"{self.stage}: rows_in {self.rows_in} != kept {self.rows_kept} + rejected {self.rows_rejected}")
        if sum(self.rejected_by_reason.values()) != self.rows_rejected:
            raise ManifestError(f"{self.stage}: rejection reasons add up to {sum(self.rejected_by_reason.values())}, "
                                f"not {self.rows_rejected}")

    @property
    def kind(self) -> StageKind:
        return STAGE_KINDS[self.stage]

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("skipped")
        return d

    @classmethod
    def from_dict(cls, d: dict, where: str = "manifest") -> Manifest:
        if not isinstance(d, dict) or "stage" not in d:
            raise ManifestError(f"{where}: not a gradus manifest (a file of that name that gradus did not write)")
        version = d.get("manifest_version", 1)
        if version != MANIFEST_VERSION:
            raise ManifestError(f"{where}: written by {'an older' if version < MANIFEST_VERSION else 'a newer'} gradus "
                                f"(manifest version {version}, this one reads {MANIFEST_VERSION}); run the stage again "
                                "with --force to rewrite it")
        names = {f.name for f in fields(cls)} - {"skipped"}
        missing = names - set(d) - {"stats", "manifest_version"}
        if missing:
            raise ManifestError(f"{where}: missing fields {sorted(missing)}")
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def load(cls, folder: str | Path) -> Manifest:
        """The manifest of a finished stage output; a clear error for anything else."""
        p = Path(folder)
        f = p / MANIFEST
        if not f.is_file():
            hint = " (a run folder? `gradus show` lists its stages)" if p.is_dir() and any(p.glob(f"*/{MANIFEST}")) else ""
            raise ManifestError(f"{p}: no {MANIFEST}: not a finished stage output{hint}")
        try:
            d = json.loads(f.read_text())
        except json.JSONDecodeError as e:
            raise ManifestError(f"{f}: not valid JSON ({e})") from e
        return cls.from_dict(d, str(f))

    @classmethod
    def find(cls, folder: str | Path) -> Manifest | None:
        """Like ``load``, but None when the folder has no manifest (other errors still raise)."""
        return cls.load(folder) if (Path(folder) / MANIFEST).is_file() else None


def _outermost(folders: set[Path]) -> list[Path]:
    """The folders not inside another of them (an export's curriculum parts and gradus 0.1's part files lie inside
    their stage's folder), sorted."""
    return sorted(f for f in folders if not any(q in folders for q in f.parents))


def stage_outputs(folder: str | Path) -> list[tuple[Path, Manifest]]:
    """The stage outputs of ``folder`` in pipeline order: the folder itself, or every stage output found by its
    manifest at any depth (a flow's folder keeps its ingests in ``stages/1_ingest/NN_source``)."""
    d = Path(folder)
    if not d.is_dir():
        raise ManifestError(f"{d}: no such folder")
    if (d / MANIFEST).exists():
        return [(d, Manifest.load(d))]
    found = _outermost({p.parent for p in d.rglob(MANIFEST) if "runs" not in p.relative_to(d).parts[:1]})
    if not found:
        raise ManifestError(f"{d}: no {MANIFEST} here or in its subfolders: not a stage output or a run folder")
    outs, unreadable = [], []
    for p in found:  # in a run folder, an output another gradus wrote is left out (and named), not fatal
        try:
            outs.append((p, Manifest.load(p)))
        except ManifestError as e:
            unreadable.append(str(e))
    if not outs:
        raise ManifestError(f"{d}: no stage output this gradus can read ({'; '.join(unreadable)})")
    for msg in unreadable:
        log.warning("left out %s", msg)
    outs.sort(key=lambda pm: (pm[1].kind.order, str(pm[0])))
    return outs
