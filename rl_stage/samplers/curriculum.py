"""The curriculum samplers (``uniform``, ``kimi``, ``stages``): a live curriculum and prioritized resampling.

Only the current curriculum stage's rows are held in memory; the next stage is read from disk when the run
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
from pathlib import Path

import numpy as np

from rl_stage.data import DataError, Prompt, find_stages, load_pool


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
        self.rows = load_pool(self.stages[self.stage][1])
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
