"""GRPO-family algorithms as registered pure functions over tensors, and the published presets.

Advantage estimators (one group = the G completions of one prompt):

- ``grpo``: (r - mean) / (std + eps), unbiased std (DeepSeekMath, Shao et al. 2024, arXiv:2402.03300);
- ``dr_grpo``: r - mean, no std division (Dr. GRPO, Liu et al. 2025, arXiv:2503.20783: the std term
  up-weights groups that are nearly all right or all wrong);
- ``rloo``: r_i - mean of the other G-1 rewards (RLOO, Ahmadian et al. 2024, arXiv:2402.14740);
- ``batch_std``: (r - group mean) / std over the whole batch (REINFORCE++-style normalization).

Policy loss: PPO's clipped surrogate with separate ``eps_low`` / ``eps_high`` (DAPO's clip-higher,
Yu et al. 2025, arXiv:2503.14476) and optional dual clip (Ye et al. 2020, arXiv:1912.09729) that
bounds the loss of negative-advantage tokens at ``c * |A|``.

Loss aggregation over a ragged mask:

- ``seq-mean-token-mean``: mean over sequences of each sequence's token mean (GRPO);
- ``token-mean``: sum over every token of the batch / number of tokens (DAPO);
- ``seq-mean-token-sum-norm``: sum over tokens / a constant (the generation budget), mean over
  sequences (Dr. GRPO's unbiased normalizer);
- ``seq-mean-token-sum``: sum over each sequence's tokens, mean over sequences (RLOO: a sequence's
  log-probability is the sum of its tokens', so no per-token averaging brings the length bias back).

Each aggregation takes the *full batch's* sequence and token counts, so micro-batches of a gradient
accumulation step add up to exactly the full-batch loss.

KL: the k3 estimator exp(ref - logp) - (ref - logp) - 1 (Schulman 2020), off by default as DAPO,
Open-Reasoner-Zero and Dr. GRPO recommend; the ``grpo`` preset keeps DeepSeekMath's beta = 0.04.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

ADVANTAGES: dict[str, Callable[..., torch.Tensor]] = {}
AGGREGATIONS: dict[str, Callable[..., torch.Tensor]] = {}


def _register(table: dict, name: str):
    """Add ``fn`` to ``table`` under ``name``; a name registered twice is an error, never a silent replacement."""
    if name in table:
        raise ValueError(f"{name!r} is registered twice")

    def deco(fn):
        table[name] = fn
        return fn

    return deco


def lookup(table: dict, name: str, what: str):
    if name not in table:
        raise ValueError(f"unknown {what} {name!r}; valid: {', '.join(sorted(table))}")
    return table[name]


@_register(ADVANTAGES, "grpo")
def grpo_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """rewards [n_groups, G] -> advantages [n_groups, G]: (r - mean) / (unbiased std + eps)."""
    mean = rewards.mean(-1, keepdim=True)
    std = rewards.std(-1, keepdim=True, unbiased=True) if rewards.shape[-1] > 1 else torch.zeros_like(mean)
    return (rewards - mean) / (std + eps)


@_register(ADVANTAGES, "dr_grpo")
def dr_grpo_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return rewards - rewards.mean(-1, keepdim=True)


@_register(ADVANTAGES, "rloo")
def rloo_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    g = rewards.shape[-1]
    if g < 2:
        return torch.zeros_like(rewards)
    others = (rewards.sum(-1, keepdim=True) - rewards) / (g - 1)
    return rewards - others


@_register(ADVANTAGES, "batch_std")
def batch_std_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    centred = rewards - rewards.mean(-1, keepdim=True)
    return centred / (rewards.std(unbiased=True) + eps) if rewards.numel() > 1 else centred


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, eps_low: float = 0.2,
                        eps_high: float = 0.2, dual_clip: float | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss [B, T] and masks of where each clip is active.

    ``adv`` is per sequence [B] or per token [B, T]. ``clip_low``: A < 0 and ratio < 1 - eps_low (the
    update would push the probability further down); ``clip_high``: A > 0 and ratio > 1 + eps_high;
    ``clip_dual``: A < 0 and the dual-clip bound was taken.
    """
    if adv.dim() == 1:
        adv = adv[:, None].expand_as(logp)
    ratio = torch.exp(logp - old_logp)
    pg1 = -adv * ratio
    pg2 = -adv * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    loss = torch.maximum(pg1, pg2)
    info = {"clip_low": (adv < 0) & (ratio < 1 - eps_low), "clip_high": (adv > 0) & (ratio > 1 + eps_high)}
    if dual_clip is not None:
        if dual_clip <= 1:
            raise ValueError("dual_clip must be > 1")
        bound = -adv * dual_clip
        dual = (adv < 0) & (loss > bound)
        loss = torch.where(adv < 0, torch.minimum(loss, bound), loss)
        info["clip_dual"] = dual
    return loss, info


@_register(AGGREGATIONS, "seq-mean-token-mean")
def agg_seq_mean_token_mean(loss: torch.Tensor, mask: torch.Tensor, n_seqs: int, n_tokens: int, max_len: int) -> torch.Tensor:
    per_seq = (loss * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return per_seq.sum() / max(1, n_seqs)


@_register(AGGREGATIONS, "token-mean")
def agg_token_mean(loss: torch.Tensor, mask: torch.Tensor, n_seqs: int, n_tokens: int, max_len: int) -> torch.Tensor:
    return (loss * mask).sum() / max(1, n_tokens)


@_register(AGGREGATIONS, "seq-mean-token-sum")
def agg_seq_mean_token_sum(loss: torch.Tensor, mask: torch.Tensor, n_seqs: int, n_tokens: int, max_len: int) -> torch.Tensor:
    """RLOO's REINFORCE objective: each sequence's log-prob is the *sum* of its tokens', averaged over sequences."""
    return (loss * mask).sum() / max(1, n_seqs)


@_register(AGGREGATIONS, "seq-mean-token-sum-norm")
def agg_seq_mean_token_sum_norm(loss: torch.Tensor, mask: torch.Tensor, n_seqs: int, n_tokens: int, max_len: int) -> torch.Tensor:
    return (loss * mask).sum() / (max(1, n_seqs) * max_len)


def aggregate(mode: str, loss: torch.Tensor, mask: torch.Tensor, n_seqs: int | None = None, n_tokens: int | None = None,
              max_len: int | None = None) -> torch.Tensor:
    """Aggregate a (micro-)batch's token losses; pass the full batch's counts when accumulating gradients."""
    fn = lookup(AGGREGATIONS, mode, "loss aggregation")
    mask = mask.to(loss.dtype)
    return fn(loss, mask, n_seqs if n_seqs is not None else loss.shape[0],
              n_tokens if n_tokens is not None else int(mask.sum().item()), max_len or loss.shape[-1])


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1 >= 0."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits.float(), -1)
    return -(logp.exp() * logp).sum(-1)


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer: int) -> torch.Tensor:
    """DAPO's soft overlong punishment: 0 up to max_len - buffer, then linear down to -1 at max_len, -1 beyond."""
    if buffer <= 0:
        return torch.where(lengths > max_len, -1.0, 0.0).to(torch.float32)
    start = max_len - buffer
    soft = (start - lengths.float()) / buffer
    return torch.where(lengths <= start, torch.zeros_like(soft), torch.where(lengths <= max_len, soft, -torch.ones_like(soft)))


def dynamic_sampling_keep(values: torch.Tensor, atol: float = 1e-8) -> torch.Tensor:
    """DAPO dynamic sampling: True for groups whose values are not all equal.

    DAPO (Sec. 3.2) keeps a prompt when its accuracy is neither 0 nor 1, i.e. pass ``values`` = correctness
    (verl's DAPO recipe: ``filter_groups.metric: acc``); passing shaped rewards instead would keep an
    all-wrong group whose lengths differ, whose only signal is the overlong penalty.
    """
    return (values.max(-1).values - values.min(-1).values) > atol


def shaped_rewards(correct: list[bool], n_tokens: list[int], truncated: list[bool], has_box: list[bool], *,
                   wrong_reward: float = 0.0, format_reward: float = 0.0, overlong: bool = False, max_len: int = 0,
                   buffer: int = 0) -> list[float]:
    """One group's rewards: 1 if correct else ``wrong_reward`` (DAPO: -1), + ``format_reward`` for a boxed
    answer, + DAPO's overlong penalty on the response length when ``overlong``."""
    pen = overlong_penalty(torch.tensor(n_tokens), max_len, buffer).tolist() if overlong else [0.0] * len(correct)
    return [(1.0 if c else wrong_reward) + (format_reward if b else 0.0) + p
            for c, b, p in zip(correct, has_box, pen, strict=True)]


@dataclass(frozen=True)
class Preset:
    advantage: str
    aggregation: str
    eps_low: float = 0.2
    eps_high: float = 0.2
    kl_coef: float = 0.0
    dynamic_sampling: bool = False
    overlong_shaping: bool = False
    mask_truncated: bool = False
    wrong_reward: float = 0.0  # the reward of a wrong (or unanswered) completion; a right one gets 1
    mini_batches: int = 1  # optimizer updates per rollout batch (one per mini-batch of groups), per epoch
    dual_clip: float | None = None  # dual-clip bound c on negative advantages; None: off
    cite: str = ""


PRESETS = {
    "grpo": Preset("grpo", "seq-mean-token-mean", 0.2, 0.2, kl_coef=0.04,
                   cite="DeepSeekMath (Shao et al. 2024, arXiv:2402.03300): group mean/std advantages, "
                        "per-sequence token mean, KL beta 0.04 with the k3 estimator, a single update per "
                        "exploration stage"),
    "dr_grpo": Preset("dr_grpo", "seq-mean-token-sum-norm", 0.2, 0.2, mini_batches=8,
                      cite="Dr. GRPO (Liu et al. 2025, arXiv:2503.20783): no std division, no length "
                           "normalization (constant normalizer), no KL; its oat-zero scripts roll out 128 prompts x 8 "
                           "and update on train batches of 128 responses: 8 updates per rollout batch"),
    "dapo": Preset("grpo", "token-mean", 0.2, 0.28, dynamic_sampling=True, overlong_shaping=True, wrong_reward=-1.0,
                   mini_batches=16, dual_clip=10.0,
                   cite="DAPO (Yu et al. 2025, arXiv:2503.14476): clip-higher eps 0.2/0.28, token-level loss, "
                        "dynamic sampling on accuracy (full generation batches, at most 10, as verl's recipe), "
                        "overlong reward shaping on a +1/-1 correctness reward, no KL; 512 prompts a rollout step in "
                        "mini-batches of 32: 16 updates per rollout batch; dual clip c = 10 (the recipe's clip_ratio_c)"),
    "rloo": Preset("rloo", "seq-mean-token-sum", 0.2, 0.2,
                   cite="RLOO (Ahmadian et al. 2024, arXiv:2402.14740): leave-one-out baseline, sequence "
                        "log-probability as the sum of its tokens', one update per batch, no KL here"),
}


def preset(name: str) -> Preset:
    return lookup(PRESETS, name, "preset")


@dataclass(frozen=True)
class Algorithm:
    """What a run trains with: its preset with the config's overrides applied (``TrainConfig.resolved``)."""

    advantage: str  # a name in ADVANTAGES
    aggregation: str  # a name in AGGREGATIONS
    eps_low: float
    eps_high: float
    dual_clip: float | None
    kl_coef: float
    dynamic_sampling: bool
    overlong_shaping: bool
    overlong_buffer: int
    mask_truncated: bool
    wrong_reward: float
    mini_batches: int
    dynamic_sampling_metric: str  # "acc" | "reward": what must differ inside a group for it to be kept
    cite: str  # the preset's source

    def __post_init__(self) -> None:
        lookup(ADVANTAGES, self.advantage, "advantage estimator")
        lookup(AGGREGATIONS, self.aggregation, "loss aggregation")
