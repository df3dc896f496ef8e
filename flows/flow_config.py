"""A flow's config: the curation stages (``curate.pipeline.CurateConfig``), then difficulty, export, training and
the card, and how the flow runs (the local threads or Ray), read from one TOML or JSON file and checked before any task
runs; ``FlowConfig.plan`` says what the flow will do."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from curate.core.config import ConfigError, check_choice, check_keys, coerce, from_dict, load_file, type_hints
from curate.difficulty.estimate import EstimateConfig
from curate.pipeline import STAGE_FOLDERS as CURATION_FOLDERS
from curate.pipeline import CurateConfig
from curate.select.export import ExportConfig
from rl_stage.trainer import TrainConfig

RUNNERS = ("local", "ray")


@dataclass(frozen=True)
class CardConfig:
    name: str | None = None  # the cards' title (the run's and the export's); default: the sources, "gradus: math, aime"

DEMO_CONFIG = Path(__file__).resolve().parent / "demo.toml"  # the bundled demo (``gradus demo``)
DIFFICULTY_FOLDER, EXPORT_FOLDER, TRAIN_FOLDER = "5_difficulty", "6_export", "7_train"  # after the curation stages'
STAGE_FOLDERS = (*CURATION_FOLDERS, DIFFICULTY_FOLDER, EXPORT_FOLDER)  # the pipeline's stages, then scoring and export


@dataclass(frozen=True)
class FlowConfig:
    curate: CurateConfig
    difficulty: EstimateConfig | None = None  # None: no difficulty estimation (and no export)
    export: ExportConfig | None = None  # None: no export
    train: TrainConfig | None = None  # None: no training; else `gradus train` on the run's export (data and out set here)
    card: bool | CardConfig = True  # the run's data card, published as a Prefect artifact; a table names it: {name = ...}
    runner: str = "local"  # local (threads in this process) | ray (prefect-ray's RayTaskRunner)
    ray_address: str | None = None  # runner ray: a cluster address; None: a local Ray instance
    estimate_workers: int = 1  # runner ray: difficulty split by chunk across this many workers, an engine each
    gpus_per_worker: float | None = None  # GPUs each estimation worker asks Ray for; None: 1 if the cluster has GPUs
    sampler_retries: int = 2  # retries of the difficulty task (an engine or a server that fell over)
    retry_delays_s: tuple[int, ...] = field(default=(10, 60))  # backoff between those retries

    def __post_init__(self) -> None:
        check_choice("runner", self.runner, RUNNERS)
        if self.export is not None and self.difficulty is None:
            raise ConfigError("export: needs a difficulty section (exports select by pass rate)")
        if self.train is not None and (self.export is None or self.export.format != "parquet"):
            raise ConfigError("train: needs a parquet export section (the trainer reads the run's export)")
        if self.train is not None and self.train.data:
            raise ConfigError("train.data: set by the flow (the run's export); leave it out")
        if self.sampler_retries < 0:
            raise ConfigError("sampler_retries must be >= 0")
        if self.estimate_workers < 1:
            raise ConfigError("estimate_workers must be >= 1")
        if self.estimate_workers > 1 and self.runner != "ray":
            raise ConfigError(f"estimate_workers = {self.estimate_workers} needs runner = \"ray\" (an engine per worker "
                              "process); the local runner estimates in one process")
        if self.gpus_per_worker is not None and self.gpus_per_worker < 0:
            raise ConfigError("gpus_per_worker must be >= 0")

    @classmethod
    def from_dict(cls, d: dict, base_dir: Path | None = None) -> FlowConfig:
        rest_keys = ("card", "runner", "ray_address", "estimate_workers", "gpus_per_worker", "sampler_retries",
                     "retry_delays_s")
        flow_keys = {"difficulty", "export", "train", *rest_keys}
        check_keys(d, {"sources", "filters", "decontam", "dedup"} | flow_keys, "config")
        cur = CurateConfig.from_dict({k: v for k, v in d.items() if k not in flow_keys}, base_dir)
        diff = from_dict(EstimateConfig, d["difficulty"], "difficulty", base_dir) if d.get("difficulty") is not None else None
        exp = from_dict(ExportConfig, d["export"], "export", base_dir) if d.get("export") is not None else None
        train = from_dict(TrainConfig, d["train"], "train", base_dir) if d.get("train") is not None else None
        hints = type_hints(cls)  # type: ignore[arg-type]  # the top-level settings checked by the stage configs' own loader
        rest = {k: coerce(d[k], hints[k], k) for k in rest_keys if k in d}
        try:
            return cls(cur, diff, exp, train, **rest)
        except TypeError as e:
            raise ConfigError(f"config: {e}") from e

    @classmethod
    def load(cls, path: str | Path) -> FlowConfig:
        return cls.from_dict(load_file(path), base_dir=Path(path).resolve().parent)

    @property
    def card_name(self) -> str | None:
        return self.card.name if isinstance(self.card, CardConfig) else None

    def local_sources(self) -> list[str]:
        """The specs of the sources that read files here (an output folder may not lie inside one)."""
        return [s.spec for s in self.curate.sources]

    def plan(self) -> list[str]:
        """What the flow will do, one line a step; checks sources and benchmarks first (raises on a problem)."""
        if self.runner == "ray":
            import importlib.util

            if importlib.util.find_spec("prefect_ray") is None:
                raise ConfigError("runner ray needs prefect-ray and ray: pip install prefect-ray")
        steps = self.curate.check()
        if self.difficulty is not None:
            s = self.difficulty.sampling
            q = self.difficulty.sequential
            ks = (f"adaptive k={q.k_first}+{q.k_step}..{q.k_max} (delta {q.delta})" if q.adaptive else f"k={s.k}") + (
                f", ends resampled up to {q.k_max}" if q.resample_ends else "")
            steps.append(f"difficulty: {self.difficulty.model or 'bundled SmolLM2'} on {self.difficulty.backend}, {ks}, "
                         f"T={s.temperature}, {s.max_tokens} tokens" + (f", first {self.difficulty.limit} rows"
                                                                        if self.difficulty.limit else "")
                         + (f", split across {self.estimate_workers} workers" if self.estimate_workers > 1 else ""))
        if self.export is not None:
            steps.append(f"export: {self.export.format}, target {self.export.target}"
                         + (", curriculum stages" if self.export.curriculum else ""))
        if self.train is not None:
            t = self.train
            steps.append(f"train: {t.preset} on the export, {t.steps} steps of {t.prompts_per_step} prompts x {t.group_size}, "
                         f"{t.rollout_backend} rollouts, model {t.model or 'bundled SmolLM2'}")
        if self.card:
            steps.append("card")
        return steps
