"""Prompts for the GRPO stage: curated Parquet shards, a live curriculum and prioritized resampling.

Reads ``gradus export`` folders (Parquet; with or without ``--curriculum``) or scored shard folders. Only
the current curriculum stage's rows are held in memory; the next stage is read from disk when the run
reaches it. Stages run easy to hard (Kimi k1.5's curriculum sampling): a stage ends after
``stage_steps`` steps, or earlier once its running accuracy reaches ``advance_at``.

Inside a stage, each batch is drawn with probability proportional to ``w_i = max(floor, 1 - s_i)`` (Kimi
k1.5's prioritized sampling), where ``s_i`` is the prompt's pass rate tracked online: the offline estimate's
counts plus every rollout graded so far. ``mode="weighted"`` (the default) draws a batch of ``n`` distinct
prompts by systematic sampling with probabilities proportional to size (Madow 1949): prompt ``i`` is in a
batch with probability exactly ``n w_i / sum(w)`` (capped at 1, the rest shared out again), so over many
batches a prompt's share of draws follows its weight, as Kimi's proportional sampling does, and no batch
holds a prompt twice. With 5 solved (w = floor 0.05) and 5 unsolved (w = 1) prompts, the unsolved get
5 / 5.25 = 95% of draws. ``mode="epoch"`` keeps every epoch a permutation (each prompt exactly once per
epoch, the weights deciding only the order), with distinct prompts in a batch across an epoch boundary too.
Without ``prioritized`` every weight is 1.

The sampler's whole state (stage, step in stage, counts, RNG) is a JSON-able dict saved in each checkpoint,
so a resumed run draws the same prompts as an uninterrupted one.
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


def held_out_prompts(paths: Sequence[str | Path], n: int) -> list[Prompt]:
    """Up to ``n`` evaluation prompts from *every* stage of every folder in ``paths``, chosen by id alone.

    The subset is the ``n`` rows whose (id, row) hash lowest: it does not depend on the run's seed or on the
    order of the files, so runs with different seeds are evaluated on the same prompts and compare pair by
    pair. Returned in that hash order."""
    import hashlib

    files = [f for _, fs in find_stages(paths) for f in fs]
    rows = _load(files)
    seen: dict[str, int] = {}
    keys = []
    for i, pid in enumerate(rows["id"]):
        j = seen.get(pid, 0)  # the same id twice (one text in two sources): both rows, told apart by count
        seen[pid] = j + 1
        keys.append((hashlib.sha1(f"{pid}\x1f{j}".encode()).hexdigest(), i))
    pick = [i for _, i in sorted(keys)[:n]]
    return [Prompt(rows["id"][i], rows["problem"][i], rows["answer"][i]) for i in pick]


def inclusion_probabilities(w: np.ndarray, n: int) -> np.ndarray:
    """pi_i proportional to w_i with sum(pi) = n and every pi_i <= 1: weights too large for one batch are set to 1
    and the remaining draws are shared out over the rest in proportion (repeated until none is over 1)."""
    w = np.asarray(w, dtype=np.float64)
    pi = np.zeros(len(w))
    free = np.ones(len(w), dtype=bool)
    m = float(min(n, len(w)))
    while m > 0 and free.any():
        p = m * w[free] / w[free].sum()
        over = p >= 1.0
        if not over.any():
            pi[free] = p
            break
        idx = np.flatnonzero(free)[over]
        pi[idx] = 1.0
        free[idx] = False
        m -= len(idx)
    return pi


def systematic_pps(w: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``min(n, len(w))`` distinct indices; index i is included with probability ``inclusion_probabilities(w, n)[i]``.

    Systematic sampling over a random order: the items' probabilities laid end to end on [0, n), and the points
    u, u + 1, ..., u + n - 1 for one u ~ U(0, 1). An item's interval is at most 1 long, so no point falls in it
    twice, and a point falls in it with probability equal to its length."""
    n = min(n, len(w))
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    pi = inclusion_probabilities(w, n)
    order = rng.permutation(len(w))
    edges = np.cumsum(pi[order])
    edges *= n / edges[-1]  # exact total, whatever the rounding
    pts = rng.random() + np.arange(n)
    pos = np.minimum(np.searchsorted(edges, pts, side="right"), len(w) - 1)
    return order[pos]


class CurriculumSampler:
    MODES = ("weighted", "epoch")

    def __init__(self, paths: Sequence[str | Path], seed: int = 0, stage_steps: int | None = None,
                 advance_at: float | None = None, prioritized: bool = True, floor: float = 0.05, mode: str = "weighted"):
        if mode not in self.MODES:
            raise DataError(f"curriculum sampling mode must be one of {', '.join(self.MODES)}, not {mode!r}")
        self.stages = find_stages(paths)
        self.seed, self.stage_steps, self.advance_at = seed, stage_steps, advance_at
        self.prioritized, self.floor, self.mode = prioritized, floor, mode
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
    def size(self) -> int:
        """Prompts in the current stage."""
        return len(self.rows["id"])

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
        """``n`` distinct prompts of the current stage (all of them, once each, when the stage is smaller)."""
        if self.mode == "weighted":
            chosen = systematic_pps(self.weights(list(range(self.size))), n, self.rng).tolist()
        else:
            chosen = self._epoch_draw(min(n, self.size))
        return [Prompt(self.rows["id"][i], self.rows["problem"][i], self.rows["answer"][i]) for i in chosen]

    def _epoch_draw(self, n: int) -> list[int]:
        """Without replacement inside an epoch, weighted order; a batch that crosses into the next epoch takes
        only prompts it does not hold yet (they stay in the new epoch's remainder)."""
        chosen: list[int] = []
        while len(chosen) < n:
            if not self.epoch_left:
                self.epoch_left = list(range(self.size))
            taken = set(chosen)
            cand = [x for x in self.epoch_left if x not in taken]
            take = min(n - len(chosen), len(cand))
            w = self.weights(cand)
            pick = self.rng.choice(len(cand), size=take, replace=False, p=w / w.sum())
            new = [cand[j] for j in pick]
            drop = set(new)
            self.epoch_left = [x for x in self.epoch_left if x not in drop]
            chosen += new
        return chosen

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
