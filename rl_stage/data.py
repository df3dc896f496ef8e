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

COLUMNS = ["id", "problem", "answer", "pass_rate", "n_correct", "n_graded", "k", "bucket", "bucket_masses"]


class DataError(GradusError):
    pass


@dataclass
class Prompt:
    id: str
    problem: str
    answer: str
    index: int = -1  # the row's place in its sampler's pool (-1: not drawn from a pool)
    bucket: str | None = None  # the row's offline difficulty bucket (None: not scored)
    prior: float | None = None  # the offline pass rate (None: not scored)
    expected: float | None = None  # the sampler's expected pass rate when it drew the prompt


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


def load_rows(files: list[Path]) -> dict:
    """Columns of the prompts in ``files``: id, problem, answer, the offline counts ``n_correct`` of ``k`` (0 of 0
    for rows without an estimate; ``k`` falls back to ``n_graded``: every sample counts, timeouts fail) and the
    offline ``bucket`` (the export's, else from the counts; None without an estimate)."""
    from curate.select.curriculum import bucket_of, decided_bucket

    rows: dict[str, list] = {"id": [], "problem": [], "answer": [], "n_correct": [], "k": [], "bucket": []}
    for f in files:
        pf = pq.ParquetFile(f)
        names = pf.schema_arrow.names
        for c in ("id", "problem", "answer"):
            if c not in names:
                raise DataError(f"{f}: missing column {c!r}")
        cols = [c for c in COLUMNS if c in names]
        for rb in pf.iter_batches(columns=cols, batch_size=8192):
            d = rb.to_pydict()
            none = [None] * rb.num_rows
            for i in range(rb.num_rows):
                ans = d["answer"][i]
                if ans is None or not str(ans).strip():
                    raise DataError(f"{f}: row {d['id'][i]} has no gold answer; curate and export the data first")
                rows["id"].append(d["id"][i])
                rows["problem"].append(d["problem"][i])
                rows["answer"].append(str(ans))
                nc, ng, k = d.get("n_correct", none)[i], d.get("n_graded", none)[i], d.get("k", none)[i]
                total = (k if k is not None else ng) or 0
                rows["n_correct"].append(int(nc or 0) if total else 0)
                rows["k"].append(int(total))
                bucket = d.get("bucket", none)[i] or decided_bucket(d.get("bucket_masses", none)[i])
                if bucket is None and nc is not None and ng is not None:
                    bucket = bucket_of(int(nc), int(ng), k=k)
                rows["bucket"].append(bucket)
    if not rows["id"]:
        raise DataError(f"{[str(f) for f in files]}: no rows")
    return rows


def _load(files: list[Path]) -> dict:
    rows = load_rows(files)
    rows["s_correct"] = [float(x) for x in rows["n_correct"]]
    rows["s_total"] = [float(x) for x in rows["k"]]
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
                 advance_at: float | None = None, prioritized: bool = True, floor: float = 0.05, mode: str = "weighted",
                 one_pool: bool = False):
        if mode not in self.MODES:
            raise DataError(f"curriculum sampling mode must be one of {', '.join(self.MODES)}, not {mode!r}")
        self.stages = find_stages(paths)
        if one_pool:  # every stage's rows in one pool (no curriculum)
            self.stages = [("pool", [f for _, fs in self.stages for f in fs])]
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

    def sample(self, n: int, need: float | None = None, exclude: Sequence[int] = ()) -> list[Prompt]:
        """``n`` distinct prompts of the current stage (all of them, once each, when the stage is smaller), less those
        in ``exclude`` (row indices); ``need`` is not used: every round is a whole batch, as verl's dynamic sampling
        draws it."""
        if self.mode == "weighted":
            chosen = systematic_pps(self.weights(list(range(self.size))), n, self.rng).tolist()
        else:
            chosen = self._epoch_draw(min(n, self.size))
        if exclude:
            skip = set(exclude)
            chosen = [i for i in chosen if i not in skip]
        r = self.rows
        return [Prompt(r["id"][i], r["problem"][i], r["answer"][i], index=i, bucket=r["bucket"][i],
                       prior=r["n_correct"][i] / r["k"][i] if r["k"][i] else None,
                       expected=r["s_correct"][i] / r["s_total"][i] if r["s_total"][i] else None) for i in chosen]

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

    def observe(self, results: Sequence[tuple[int, int, int]]) -> None:
        """One round of graded groups, ``(row index, n_correct, n_graded)`` each (``update`` by index)."""
        for i, c, n in results:
            self.rows["s_correct"][i] += c
            self.rows["s_total"][i] += n
            self.recent = (self.recent + [c / max(1, n)])[-64:]

    def update(self, pid: str, n_correct: int, n_total: int) -> None:
        """One graded group of the prompt with id ``pid`` (an id outside the stage counts toward ``advance_at`` only)."""
        i = self.index.get(pid)
        if i is None:
            self.recent = (self.recent + [n_correct / max(1, n_total)])[-64:]
        else:
            self.observe([(i, n_correct, n_total)])

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


def scored_template(paths: Sequence[str | Path]) -> str | None:
    """The prompt template the rows of ``paths`` were scored with: the export's ``difficulty_template`` column, or a
    scored shard's ``template``; the most common one where they differ (logged); None when nothing records one."""
    import logging
    from collections import Counter

    import pyarrow.compute as pc

    seen: Counter = Counter()
    for _, files in find_stages(paths):
        for f in files:
            names = pq.ParquetFile(f).schema_arrow.names
            col = "difficulty_template" if "difficulty_template" in names else None
            if col is None and "template" in names and "messages" not in names:  # a scored shard, not an export
                col = "template"
            if col is None:
                continue
            counts = pc.value_counts(pq.read_table(f, columns=[col])[col].combine_chunks())
            for v in counts.to_pylist():
                if v["values"] is not None:
                    seen[v["values"]] += v["counts"]
    if not seen:
        return None
    if len(seen) > 1:
        logging.getLogger(__name__).warning("the rows were scored with several templates (%s): training with %s",
                                            dict(seen), seen.most_common(1)[0][0])
    return seen.most_common(1)[0][0]
