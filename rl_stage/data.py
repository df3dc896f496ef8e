"""Prompts for the GRPO stage: curated Parquet shards, a live curriculum and prioritized resampling.

Reads ``gradus export`` folders (Parquet; with or without ``--curriculum``) or scored shard folders. Only
the current curriculum stage's rows are held in memory; the next stage is read from disk when the run
reaches it. Stages run easy to hard (Kimi k1.5's curriculum sampling): a stage ends after
``stage_steps`` steps, or earlier once its running accuracy reaches ``advance_at``.

Inside a stage, prompts are drawn without replacement within an epoch, with probability proportional to
``max(floor, 1 - s_i)`` (Kimi k1.5's prioritized sampling) where ``s_i`` is the prompt's pass rate tracked
online: the offline estimate's counts plus every rollout graded so far. The sampler's whole state (stage,
step in stage, counts, RNG) is a JSON-able dict saved in each checkpoint, so a resumed run draws the same
prompts as an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from curate.core.errors import GradusError
from curate.core.manifest import Manifest

COLUMNS = ["id", "problem", "answer", "pass_rate", "n_correct", "n_graded", "k"]


class DataError(GradusError):
    pass


@dataclass
class Prompt:
    id: str
    problem: str
    answer: str


def find_stages(paths: Sequence[str | Path]) -> list[tuple[str, list[Path]]]:
    """[(stage name, parquet files)] in curriculum order, from export folders or shard folders."""
    stages: list[tuple[str, list[Path]]] = []
    for p in map(Path, paths):
        if not p.exists():
            raise DataError(f"{p}: no such folder")
        man = Manifest.find(p)
        if man is not None and man.stage == "export":
            fmt = man.stats["format"]
            if fmt != "parquet":
                raise DataError(f"{p}: a {fmt} export; the trainer reads parquet exports (gradus export --format parquet)")
            for part in man.stats["parts"]:
                files = sorted((p / part["folder"] / "data").glob("*.parquet"))
                stages.append((part.get("bucket") or p.name, files))
        else:
            folder = p / "kept" if (p / "kept").is_dir() else p
            files = sorted(folder.glob("*.parquet"))
            stages.append((p.name, files))
    stages = [(n, f) for n, f in stages if f]
    if not stages:
        raise DataError(f"no parquet shards under {[str(p) for p in paths]}")
    return stages


def _load(files: list[Path]) -> dict:
    rows: dict[str, list] = {"id": [], "problem": [], "answer": [], "s_correct": [], "s_total": []}
    for f in files:
        pf = pq.ParquetFile(f)
        names = pf.schema_arrow.names
        for c in ("id", "problem", "answer"):
            if c not in names:
                raise DataError(f"{f}: missing column {c!r}")
        cols = [c for c in COLUMNS if c in names]
        for rb in pf.iter_batches(columns=cols, batch_size=8192):
            d = rb.to_pydict()
            for i in range(rb.num_rows):
                ans = d["answer"][i]
                if ans is None or not str(ans).strip():
                    raise DataError(f"{f}: row {d['id'][i]} has no gold answer; curate and export the data first")
                rows["id"].append(d["id"][i])
                rows["problem"].append(d["problem"][i])
                rows["answer"].append(str(ans))
                nc = d.get("n_correct", [None] * rb.num_rows)[i]
                ng = d.get("n_graded", [None] * rb.num_rows)[i]
                k = d.get("k", [None] * rb.num_rows)[i]
                rows["s_correct"].append(float(nc or 0))
                rows["s_total"].append(float((k if k is not None else ng) or 0))  # every sample counts (timeouts fail)
    if not rows["id"]:
        raise DataError(f"{[str(f) for f in files]}: no rows")
    return rows


def held_out_prompts(paths: Sequence[str | Path], n: int, seed: int = 0) -> list[Prompt]:
    """Up to ``n`` evaluation prompts drawn uniformly (seeded) from *every* stage of every folder in ``paths``."""
    files = [f for _, fs in find_stages(paths) for f in fs]
    rows = _load(files)
    rng = np.random.default_rng(seed)
    pick = sorted(rng.choice(len(rows["id"]), size=min(n, len(rows["id"])), replace=False).tolist())
    return [Prompt(rows["id"][i], rows["problem"][i], rows["answer"][i]) for i in pick]


class CurriculumSampler:
    def __init__(self, paths: Sequence[str | Path], seed: int = 0, stage_steps: int | None = None,
                 advance_at: float | None = None, prioritized: bool = True, floor: float = 0.05):
        self.stages = find_stages(paths)
        self.seed, self.stage_steps, self.advance_at = seed, stage_steps, advance_at
        self.prioritized, self.floor = prioritized, floor
        self.stage = 0
        self.step_in_stage = 0
        self.epoch_left: list[int] = []
        self.recent: list[float] = []
        self.rng = np.random.default_rng(seed)
        self._load_stage()

    def _load_stage(self) -> None:
        self.rows = _load(self.stages[self.stage][1])
        self.index = {pid: i for i, pid in enumerate(self.rows["id"])}
        self.epoch_left = []

    @property
    def stage_name(self) -> str:
        return self.stages[self.stage][0]

    def weights(self, idx: list[int]) -> np.ndarray:
        if not self.prioritized:
            return np.ones(len(idx))
        c = np.array([self.rows["s_correct"][i] for i in idx])
        t = np.array([self.rows["s_total"][i] for i in idx])
        s = np.where(t > 0, c / np.maximum(t, 1), 0.0)
        return np.maximum(self.floor, 1.0 - s)

    def sample(self, n: int) -> list[Prompt]:
        """``n`` distinct prompts of the current stage (without replacement inside an epoch)."""
        out: list[Prompt] = []
        while len(out) < n:
            if not self.epoch_left:
                self.epoch_left = list(range(len(self.rows["id"])))
            take = min(n - len(out), len(self.epoch_left))
            w = self.weights(self.epoch_left)
            pick = self.rng.choice(len(self.epoch_left), size=take, replace=False, p=w / w.sum())
            chosen = [self.epoch_left[j] for j in pick]
            drop = set(pick.tolist())
            self.epoch_left = [x for j, x in enumerate(self.epoch_left) if j not in drop]
            out += [Prompt(self.rows["id"][i], self.rows["problem"][i], self.rows["answer"][i]) for i in chosen]
            if len(self.rows["id"]) < n and len(out) >= len(self.rows["id"]):
                break  # a stage smaller than the batch: each prompt once
        return out

    def update(self, pid: str, n_correct: int, n_total: int) -> None:
        i = self.index.get(pid)
        if i is not None:
            self.rows["s_correct"][i] += n_correct
            self.rows["s_total"][i] += n_total
        self.recent.append(n_correct / max(1, n_total))
        self.recent = self.recent[-64:]

    def end_step(self) -> bool:
        """Count a training step; move to the next stage when this one is done. True when the stage changed."""
        self.step_in_stage += 1
        if self.stage + 1 >= len(self.stages):
            return False
        done = self.stage_steps is not None and self.step_in_stage >= self.stage_steps
        if self.advance_at is not None and len(self.recent) >= 8 and float(np.mean(self.recent)) >= self.advance_at:
            done = True
        if done:
            self.stage += 1
            self.step_in_stage = 0
            self.recent = []
            self._load_stage()
        return done

    def state_dict(self) -> dict:
        return {"stage": self.stage, "step_in_stage": self.step_in_stage, "epoch_left": list(self.epoch_left),
                "recent": list(self.recent), "rng": self.rng.bit_generator.state,
                "s_correct": list(self.rows["s_correct"]), "s_total": list(self.rows["s_total"])}

    def load_state_dict(self, st: dict) -> None:
        if st["stage"] != self.stage:
            self.stage = st["stage"]
            self._load_stage()
        self.step_in_stage = st["step_in_stage"]
        self.epoch_left = list(st["epoch_left"])
        self.recent = list(st["recent"])
        self.rng.bit_generator.state = st["rng"]
        self.rows["s_correct"] = list(st["s_correct"])
        self.rows["s_total"] = list(st["s_total"])
