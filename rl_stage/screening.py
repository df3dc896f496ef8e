"""Screened groups: a few completions per candidate prompt first, the rest of the group only where it will likely
carry a learning signal.

A GRPO group of G completions whose rewards are all equal teaches nothing, and dynamic sampling throws it away with
every completion it cost. SPEED-RL (Zhang et al. 2025, arXiv:2506.09016) screens instead: ``s`` completions per
candidate, and the remaining ``G - s`` only for candidates whose screen shows they are neither solved nor hopeless;
the screening completions are part of the group. gradus decides from the sampler's belief, not from a fixed
"0 < c < s" test: after the screen is observed, the chance that the *whole* group of G is not all equal is

- 1 when the screen is already mixed (0 < c < s);
- ``1 - E[(1 - p)^(G - s)]`` when the screen is all wrong (c = 0): one right answer among the rest is needed;
- ``1 - E[p^(G - s)]`` when it is all right (c = s),

the expectation over the posterior pass rate p of the prompt. The signal sampler's posterior is its log-odds belief
(``rl_stage.samplers.signal``), updated with the screen; samplers without a belief (uniform, kimi, stages) use the screen
alone under a flat prior, Beta(1 + c, 1 + s - c), where the expectations are Beta-function ratios.

A candidate goes on when that chance is at least ``screen_min_chance``; of those, the likeliest are continued until
their chances add up to the groups still missing (the refill rule of ``SignalSampler.sample``). The rest of a
continued group are samples ``s .. G-1`` of the same request key, so with per-sample seeds (vLLM) a continued group
holds exactly the completions an unscreened one would.

Nothing screened is thrown away for want of room (``Queue``): a candidate at the bar that was not needed is *held*,
offered first in the next round and, for ``screen_carry`` steps, in the next steps (SPEED-RL keeps such prompts in
a buffer for later batches too). New candidates are drawn only for the groups the held ones do not cover: with the
signal sampler by its refill rule (prompts in score order until their chances of a mixed group add up to the
groups missing, at most ``screen_candidates`` per group), with the others ``screen_candidates`` per group. A carried
screen was sampled by the policy of its step; its group is finished by the current one, and the update treats the
whole group as on-policy, as SPEED-RL's does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def chance_flat(c: int, s: int, rest: int) -> float:
    """The chance that a group whose screen had ``c`` of ``s`` right is not all equal once ``rest`` more completions are
    added, under Beta(1 + c, 1 + s - c) (a flat prior and the screen)."""
    if 0 < c < s:
        return 1.0
    if rest <= 0:
        return 0.0
    a, b = 1.0 + c, 1.0 + s - c
    if c == 0:  # all wrong so far: E[(1 - p)^rest] = B(a, b + rest) / B(a, b)
        return 1.0 - math.exp(_log_beta(a, b + rest) - _log_beta(a, b))
    return 1.0 - math.exp(_log_beta(a + rest, b) - _log_beta(a, b))  # all right: E[p^rest]


def chance_belief(c: np.ndarray, s: int, rest: int, mu: np.ndarray, var: np.ndarray) -> np.ndarray:
    """The same chance under log-odds beliefs N(mu, var) that already include the screen (the signal sampler's)."""
    from rl_stage.samplers.signal import expect

    c = np.asarray(c)
    out = np.ones(len(c))
    if rest <= 0:
        return np.where((c > 0) & (c < s), 1.0, 0.0)
    none = c == 0
    every = c == s
    if none.any():
        out[none] = 1.0 - expect(lambda p: (1.0 - p) ** rest, mu[none], var[none])
    if every.any():
        out[every] = 1.0 - expect(lambda p: p**rest, mu[every], var[every])
    return out


def chances(sampler, idx: Sequence[int], c: Sequence[int], s: int, rest: int) -> np.ndarray:
    """Each candidate's chance (``chance_belief`` with the sampler's belief, or ``chance_flat``)."""
    if hasattr(sampler, "current"):
        mu, var = sampler.current(np.asarray(idx, dtype=np.int64))
        return chance_belief(np.asarray(c), s, rest, mu, var)
    return np.array([chance_flat(int(x), s, rest) for x in c], dtype=np.float64)


def choose(chance: np.ndarray, need: int, min_chance: float) -> list[int]:
    """The candidates to continue: those at ``min_chance`` or above, likeliest first (ties by position), until their
    chances add up to ``need`` groups."""
    order = [int(i) for i in np.lexsort((np.arange(len(chance)), -chance)) if chance[i] >= min_chance]
    out, total = [], 0.0
    for i in order:
        if total >= need - 1e-9:
            break
        out.append(i)
        total += float(chance[i])
    return sorted(out)


@dataclass
class Screened:
    """A candidate after its screen: ``correct`` of ``s`` right; ``key``: the request key its samples are seeded from
    (its rest continues it); ``data``: the caller's screen (the trainer's graded ``Group``); ``age``: the ends of
    step it has been held over."""

    prompt: Any
    correct: int
    key: str
    data: Any = None
    age: int = 0


class Queue:
    """The screened candidates of a run not yet continued, and the rule that draws, continues and holds them."""

    def __init__(self, s: int, group_size: int, min_chance: float, candidates: float, carry: int):
        self.s, self.rest, self.min_chance = s, group_size - s, min_chance
        self.candidates, self.carry = candidates, carry
        self.held: list[Screened] = []

    def chances(self, sampler, items: Sequence[Screened]) -> np.ndarray:
        if not items:
            return np.zeros(0)
        return chances(sampler, [x.prompt.index for x in items], [x.correct for x in items], self.s, self.rest)

    def draw(self, sampler, missing: int) -> list:
        """New candidates to screen for ``missing`` groups: none when the held ones' chances (at the bar) cover them;
        else the sampler's refill rule for the rest (``need``), at most ``candidates`` per group; never a prompt held."""
        ch = self.chances(sampler, self.held)
        need = missing - float(ch[ch >= self.min_chance].sum())
        if need <= 1e-9:
            return []
        return sampler.sample(max(1, math.ceil(need * self.candidates)), need=need,
                              exclude=[x.prompt.index for x in self.held])

    def decide(self, sampler, screened: Sequence[Screened], missing: int) -> tuple[list[Screened], list[Screened]]:
        """(to continue, screened out) among the held candidates and the new ``screened`` (held ones first): the
        likeliest at the bar until their chances cover ``missing`` (``choose``); the others at the bar stay held."""
        pool = self.held + list(screened)
        ch = self.chances(sampler, pool)
        go = set(choose(ch, missing, self.min_chance))
        self.held = [x for i, x in enumerate(pool) if i not in go and ch[i] >= self.min_chance]
        return ([x for i, x in enumerate(pool) if i in go],
                [x for i, x in enumerate(pool) if i not in go and ch[i] < self.min_chance])

    def end_step(self, stage_changed: bool = False) -> None:
        """A step's end: the held candidates have waited one step more (all of them are done waiting when the
        curriculum moved to another stage)."""
        for x in self.held:
            x.age = self.carry + 1 if stage_changed else x.age + 1

    def begin_step(self) -> list[Screened]:
        """A step's start: the held candidates that waited past ``carry`` steps leave the queue, screened out."""
        out = [x for x in self.held if x.age > self.carry]
        self.held = [x for x in self.held if x.age <= self.carry]
        return out

    def state_dict(self) -> list[Screened]:
        return list(self.held)

    def load_state_dict(self, held: list[Screened]) -> None:
        self.held = list(held)
