"""The prompt samplers: which prompts a rollout step draws.

- ``signal`` (``SignalSampler``, the default): a belief about every prompt's pass rate under the current policy,
  seeded by the offline estimate; draws the prompts whose groups will carry a learning signal;
- ``uniform``, ``kimi``, ``stages`` (``CurriculumSampler``): one pool or the export's stages easy to hard, uniform
  or by Kimi k1.5's weights.

``make_sampler`` builds the one a ``TrainConfig`` names. Every sampler has the same interface (``sample``,
``observe``, ``end_step``, ``state_dict``; ``size``, ``stage_name``), and its state is saved in each checkpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rl_stage.samplers.curriculum import CurriculumSampler, inclusion_probabilities, systematic_pps
from rl_stage.samplers.signal import GROUP_SIGNALS, SignalSampler, group_signal

if TYPE_CHECKING:
    from rl_stage.algorithms import Algorithm
    from rl_stage.config import TrainConfig

__all__ = ["GROUP_SIGNALS", "CurriculumSampler", "SignalSampler", "group_signal", "inclusion_probabilities",
           "make_sampler", "systematic_pps"]


def make_sampler(cfg: TrainConfig, alg: Algorithm):
    """The prompt sampler ``cfg.sampler`` names, over ``cfg.data``."""
    if cfg.sampler == "signal":
        signal = cfg.signal if cfg.signal != "auto" else ("survival" if alg.dynamic_sampling else "variance")
        return SignalSampler(cfg.data, cfg.group_size, seed=cfg.seed, prior_strength=cfg.prior_strength,
                             forget_sd=cfg.forget_sd, drift_sd=cfg.drift_sd, sharpen_sd=cfg.sharpen_sd, signal=signal,
                             use_prior=cfg.offline_prior)
    s = CurriculumSampler(cfg.data, seed=cfg.seed, stage_steps=None, advance_at=cfg.advance_at,
                          prioritized=cfg.sampler == "kimi", floor=cfg.weight_floor, mode=cfg.curriculum_sampling,
                          one_pool=cfg.sampler == "uniform")
    s.stage_steps = cfg.stage_steps
    if s.stage_steps is None and len(s.stages) > 1:
        s.stage_steps = max(1, cfg.steps // len(s.stages))
    return s
