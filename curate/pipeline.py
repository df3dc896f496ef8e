"""The curation pipeline: its config and ``curate_all``, the stages in order (each stage is a module of its own:
``curate.sources.ingest``, ``curate.clean.filter_stage``, ``curate.clean.decontam_stage``, ``curate.clean.dedup_stage``).

Each reads shards (or a source) and writes ``OUT/kept``, ``OUT/rejected`` and ``OUT/manifest.json``
through the one stage runner (``curate.core.runner.Runner``); ``curate_all`` runs them in order from a ``CurateConfig``::

    OUT/1_ingest/<source>/  ->  OUT/2_filter/  ->  OUT/3_decontam/  ->  OUT/4_dedup/ (the clean set)

Decontamination runs before dedup so that every copy of a benchmark item is reported as
contaminated, not only the one a dedup would have kept.
"""


from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from curate.clean.decontam import (
    DecontamConfig,
    resolve_benchmark,
)
from curate.clean.decontam_stage import decontam_stage
from curate.clean.dedup import DedupConfig
from curate.clean.dedup_stage import dedup_shard_jobs, dedup_stage
from curate.clean.filter_stage import filter_stage
from curate.clean.filters import FilterConfig
from curate.core.config import ConfigError, check_keys, from_dict, load_file
from curate.core.errors import SourceError
from curate.core.manifest import Manifest
from curate.core.shards import count_rows, write_json_atomic
from curate.sources.adapters import (
    ADAPTERS,
    parse_mapping,
)
from curate.sources.ingest import ingest
from curate.sources.readers import detect_format

log = logging.getLogger(__name__)

__all__ = ["STAGES", "CurateConfig", "SourceSpec", "Stage", "curate_all", "decontam_stage", "dedup_shard_jobs",
           "dedup_stage", "filter_stage", "ingest", "source_dirname", "stages_of"]

# --------------------------------------------------------------------------------------------- curate
@dataclass(frozen=True)
class SourceSpec:
    spec: str = field(metadata={"path": True})  # a file, a hub id (owner/name[@split]) or synthetic:...
    name: str | None = None  # source name (default: the adapter's)
    format: str | None = None  # jsonl | json | csv | parquet | hf | synthetic (default: from the file name)
    adapter: str | None = None  # force an adapter (gradus list adapters; default: detected from the columns)
    mapping: str | None = None  # column mapping, e.g. problem=question,answer=boxed(solution)
    revision: str | None = None  # hub sources: a commit, branch or tag to read (default: the main branch's commit now)


@dataclass(frozen=True)
class CurateConfig:
    sources: tuple[SourceSpec, ...]
    filters: FilterConfig = field(default_factory=FilterConfig)
    decontam: DecontamConfig = field(default_factory=DecontamConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)

    def __post_init__(self):
        if not self.sources:
            raise ConfigError("sources: list at least one source")

    @classmethod
    def from_dict(cls, d: dict, base_dir: Path | None = None) -> CurateConfig:
        """A config from a dict; relative paths are relative to ``base_dir`` (the config file's folder)."""
        check_keys(d, {"sources", "filters", "decontam", "dedup"}, "config")
        raw = d.get("sources")
        if not isinstance(raw, list) or not raw:
            raise ConfigError("config: 'sources' must list at least one source")
        srcs = tuple(from_dict(SourceSpec, {"spec": s} if isinstance(s, str) else s, f"sources[{i}]", base_dir)
                     for i, s in enumerate(raw))
        return cls(srcs, *(from_dict(k, d.get(key) or {}, key, base_dir)
                           for k, key in ((FilterConfig, "filters"), (DecontamConfig, "decontam"), (DedupConfig, "dedup"))))

    @classmethod
    def load(cls, path: Path) -> CurateConfig:
        return cls.from_dict(load_file(path), base_dir=Path(path).resolve().parent)

    def check(self) -> list[str]:
        """Everything that can be checked before any work: each source and benchmark can be found.
        Returns a plan, one line a step; raises on the first problem."""
        plan = []
        for i, s in enumerate(self.sources):
            fmt = s.format or detect_format(s.spec)
            if s.adapter and s.adapter not in ADAPTERS:
                raise SourceError(f"sources[{i}]: unknown adapter {s.adapter!r}; gradus list adapters")
            if s.mapping:
                parse_mapping(s.mapping)
            plan.append(f"ingest {s.spec} ({fmt}{', adapter ' + s.adapter if s.adapter else ''})")
        plan.append(f"filter (skip: {', '.join(self.filters.skip) or 'none'}; gold gate "
                    f"{'on' if self.filters.gold_gate else 'off'})")
        if self.decontam.benchmarks:
            for b in self.decontam.benchmarks:
                name, where = resolve_benchmark(b)
                if "=" in b and not Path(where).is_file():
                    raise SourceError(f"decontam.benchmarks: {b}: no such file {where}")
            plan.append(f"decontam against {', '.join(self.decontam.benchmarks)} ({self.decontam.ngram}-grams)")
        plan.append(f"dedup ({'exact + near' if self.dedup.near else 'exact'})")
        return plan


def source_dirname(i: int, s: SourceSpec) -> str:
    base = s.name or Path(s.spec.split(":")[0]).stem or "source"
    return f"{i:02d}_{''.join(c if c.isalnum() or c in '-_.' else '_' for c in base)}"


@dataclass(frozen=True)
class Stage:
    """A curation stage after ingest: its name, its folder under the pipeline's, the ``CurateConfig`` field that
    configures it, and its function ``run(inputs, out, cfg, force) -> Manifest``."""

    name: str
    folder: str
    config: str
    run: Callable[..., Manifest]


INGEST_FOLDER = "1_ingest"  # one folder per source under it (``source_dirname``)
# The pipeline's order, written once: ``curate_all``, the Prefect flow and the docs walk it
STAGES = (Stage("filter", "2_filter", "filters", filter_stage),
          Stage("decontam", "3_decontam", "decontam", decontam_stage),
          Stage("dedup", "4_dedup", "dedup", dedup_stage))
STAGE_FOLDERS = (INGEST_FOLDER, *(s.folder for s in STAGES))


def stages_of(cfg: CurateConfig) -> list[tuple[Stage, Any]]:
    """The stages this config runs, in order, each with its settings: decontam only when benchmarks are named."""
    return [(s, getattr(cfg, s.config)) for s in STAGES if s.name != "decontam" or cfg.decontam.benchmarks]


def check_curate_out(out: Path, card: bool) -> None:
    """``gradus curate --out``: new, empty, or what an earlier curate wrote (its stage folders, its summary, its card).
    Anything else, a user's ``curate_summary.json`` or ``README.md`` included, is refused before any stage runs (each
    stage's own folder is checked again by its runner)."""
    import json

    from curate.core.errors import GradusError

    if out.is_symlink() or out.exists() and not out.is_dir():
        raise GradusError(f"--out {out} is a file or a link: give a folder (a new one, or one gradus curate wrote)")
    if not out.is_dir():
        return

    def ours(e: Path) -> bool:
        if e.is_symlink():
            return False
        if e.name in STAGE_FOLDERS:
            return e.is_dir()
        if e.name == "curate_summary.json":
            try:
                d = json.loads(e.read_text())
            except (OSError, ValueError):
                return False
            return isinstance(d, dict) and {"final", "stages", "rows_in"} <= set(d)
        return card and e.name in ("README.md", "card.json", "plots")

    foreign = sorted(e.name for e in out.iterdir() if not ours(e))
    if foreign:
        raise GradusError(f"--out {out} holds files gradus curate did not write ({', '.join(foreign[:5])}): choose an "
                          "empty or new folder")
    if card:
        from data_cards.render import check_card_target

        check_card_target(out)


def curate_all(cfg: CurateConfig, out: Path, force: bool = False, card: bool = True) -> dict:
    """Run every stage in order; returns a summary that names each stage's output and counts."""
    out = Path(out)
    cfg.check()  # sources and benchmarks found before any stage runs
    check_curate_out(out, card)  # and the folder: a user's file there is refused before any stage runs
    ingest_dirs = [out / INGEST_FOLDER / source_dirname(i, s) for i, s in enumerate(cfg.sources)]
    ingested = [ingest(s.spec, d, s.format, s.adapter, s.mapping, s.name, force, revision=s.revision)
                for s, d in zip(cfg.sources, ingest_dirs, strict=True)]
    stages: dict[str, Manifest] = {}
    last = ingest_dirs
    for stage, settings in stages_of(cfg):
        stages[stage.name] = stage.run(last, out / stage.folder, settings, force)
        last = [out / stage.folder]
    final = last[0]
    summary = {
        "final": str(final / "kept"),
        "rows_in": sum(m.rows_in for m in ingested),
        "rows_final": count_rows(final / "kept"),
        "stages": {"ingest": [m.rows_kept for m in ingested], **{k: v.rows_kept for k, v in stages.items()}},
        "skipped": all(m.skipped for m in ingested) and all(v.skipped for v in stages.values()),
    }
    write_json_atomic(out / "curate_summary.json", summary)
    if card:
        from data_cards.render import write_card

        summary["card"] = str(write_card(out))
    return summary
