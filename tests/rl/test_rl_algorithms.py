"""GRPO-family math against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from rl_stage.algorithms import (
    ADVANTAGES,
    PRESETS,
    aggregate,
    clipped_policy_loss,
    dynamic_sampling_keep,
    kl_k3,
    lookup,
    overlong_penalty,
    preset,
    shaped_rewards,
)

R = torch.tensor([[1.0, 0.0, 0.0, 1.0]])


def test_advantages_for_known_groups():
    # mean 0.5, unbiased std sqrt(1/3) = 0.5774 -> 0.5 / 0.5774 = 0.8660
    assert ADVANTAGES["grpo"](R).tolist()[0] == pytest.approx([0.8660, -0.8660, -0.8660, 0.8660], abs=1e-4)
    assert ADVANTAGES["dr_grpo"](R).tolist()[0] == pytest.approx([0.5, -0.5, -0.5, 0.5])
    # leave-one-out: 1 - (0+0+1)/3 = 2/3, 0 - 2/3 = -2/3
    assert ADVANTAGES["rloo"](R).tolist()[0] == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert ADVANTAGES["rloo"](torch.tensor([[1.0, 0, 0, 0]])).tolist()[0] == pytest.approx([1, -1 / 3, -1 / 3, -1 / 3])
    # equal rewards carry no signal
    for name in ("grpo", "dr_grpo", "rloo"):
        assert ADVANTAGES[name](torch.ones(1, 4)).abs().max().item() == 0
    # batch std: centred per group, divided by the std of all rewards of the batch
    two = torch.tensor([[1.0, 0.0], [1.0, 1.0]])  # centred [0.5, -0.5], [0, 0]; unbiased std(1,0,1,1) = 0.5
    assert ADVANTAGES["batch_std"](two).flatten().tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0], abs=1e-4)


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="valid: batch_std, dr_grpo, grpo, rloo"):
        lookup(ADVANTAGES, "ppo", "advantage estimator")
    with pytest.raises(ValueError, match="valid: dapo, dr_grpo, grpo, rloo"):
        preset("sac")
    with pytest.raises(ValueError, match="valid: seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm, token-mean"):
        aggregate("mean", torch.zeros(1, 1), torch.ones(1, 1))


def test_clipped_loss_on_crafted_ratios():
    ratios = torch.tensor([[0.7, 1.0, 1.3, 1.25]])
    logp, old = torch.log(ratios), torch.zeros_like(ratios)
    loss, info = clipped_policy_loss(logp, old, torch.tensor([1.0]), eps_low=0.2, eps_high=0.28)
    # A>0: max(-r, -clip(r, 0.8, 1.28)): 1.3 is clipped at 1.28 (high); 0.7 is not clipped (the pessimistic -0.7 wins)
    assert loss.tolist()[0] == pytest.approx([-0.7, -1.0, -1.28, -1.25])
    assert info["clip_high"].tolist()[0] == [False, False, True, False] and not info["clip_low"].any()
    loss, info = clipped_policy_loss(logp, old, torch.tensor([-1.0]), eps_low=0.2, eps_high=0.28)
    # A<0: max(r, clip(r)): 0.7 -> 0.8 (clipped low), 1.3 -> 1.3
    assert loss.tolist()[0] == pytest.approx([0.8, 1.0, 1.3, 1.25])
    assert info["clip_low"].tolist()[0] == [True, False, False, False] and not info["clip_high"].any()
    # dual clip bounds a negative advantage's loss at c*|A|
    loss, info = clipped_policy_loss(torch.log(torch.tensor([[4.0, 2.0]])), torch.zeros(1, 2), torch.tensor([-1.0]),
                                     dual_clip=3.0)
    assert loss.tolist()[0] == pytest.approx([3.0, 2.0]) and info["clip_dual"].tolist()[0] == [True, False]


def test_aggregation_modes_on_ragged_masks_and_micro_batch_additivity():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate("seq-mean-token-mean", loss, mask).item() == pytest.approx((2 + 4) / 2)
    assert aggregate("token-mean", loss, mask).item() == pytest.approx(10 / 4)
    assert aggregate("seq-mean-token-sum-norm", loss, mask, max_len=4).item() == pytest.approx(10 / (2 * 4))
    for mode in ("seq-mean-token-mean", "token-mean", "seq-mean-token-sum-norm"):
        full = aggregate(mode, loss, mask, n_seqs=2, n_tokens=4, max_len=4)
        parts = sum(aggregate(mode, loss[i : i + 1], mask[i : i + 1], n_seqs=2, n_tokens=4, max_len=4) for i in range(2))
        assert parts.item() == pytest.approx(full.item())


def test_overlong_shaping_values():
    got = overlong_penalty(torch.tensor([10, 16, 17, 18, 20, 21]), max_len=20, buffer=4).tolist()
    assert got == pytest.approx([0, 0, -0.25, -0.5, -1, -1])


def test_k3_kl():
    assert kl_k3(torch.tensor([-1.0]), torch.tensor([-1.0])).item() == 0
    v = kl_k3(torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])).item()
    assert v == pytest.approx(0.5 + math.log(2) - 1, abs=1e-6)  # exp(d) - d - 1 with d = ln(1/2)
    assert (kl_k3(torch.randn(100), torch.randn(100)) >= 0).all()


def test_dynamic_sampling_group_selection():
    rewards = torch.tensor([[1.0, 1, 1], [0, 1, 0], [0, 0, 0], [0.5, 0.5, 0.4]])
    assert dynamic_sampling_keep(rewards).tolist() == [False, True, False, True]


def test_presets_are_the_published_combinations():
    assert (PRESETS["dapo"].eps_low, PRESETS["dapo"].eps_high, PRESETS["dapo"].aggregation) == (0.2, 0.28, "token-mean")
    assert PRESETS["dapo"].dynamic_sampling and PRESETS["dapo"].overlong_shaping and PRESETS["dapo"].kl_coef == 0
    assert (PRESETS["dr_grpo"].advantage, PRESETS["dr_grpo"].aggregation) == ("dr_grpo", "seq-mean-token-sum-norm")
    assert PRESETS["grpo"].kl_coef == 0.04 and PRESETS["rloo"].advantage == "rloo"


def test_rloo_sums_token_losses_per_sequence():
    # per-sequence sums 1+2+3 = 6 and 4, mean over the 2 sequences = 5 (a per-token mean would give (2 + 4) / 2 = 3)
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate("seq-mean-token-sum", loss, mask).item() == pytest.approx(5.0)
    parts = sum(aggregate("seq-mean-token-sum", loss[i : i + 1], mask[i : i + 1], n_seqs=2) for i in range(2))
    assert parts.item() == pytest.approx(5.0)
    assert PRESETS["rloo"].aggregation == "seq-mean-token-sum"


def test_dapo_rewards_and_advantages_of_a_hand_worked_group():
    # max_tokens 20, overlong buffer 4 (penalty 0 up to 16 tokens, -1 at 20). DAPO scores correctness +1/-1:
    #   right, 10 tokens: +1; wrong, 10 tokens: -1; right, 18 tokens: 1 - 0.5 = 0.5; wrong, cut at 20: -1 - 1 = -2
    p = PRESETS["dapo"]
    r = shaped_rewards([True, False, True, False], [10, 10, 18, 20], [False, False, False, True], [True] * 4,
                       wrong_reward=p.wrong_reward, overlong=p.overlong_shaping, max_len=20, buffer=4)
    assert r == pytest.approx([1.0, -1.0, 0.5, -2.0])
    # GRPO advantages: mean -0.375; deviations 1.375, -0.625, 0.875, -1.625; unbiased var 5.6875 / 3 = 1.895833
    adv = ADVANTAGES[p.advantage](torch.tensor([r]))[0].tolist()
    std = math.sqrt(5.6875 / 3)
    assert adv == pytest.approx([1.375 / std, -0.625 / std, 0.875 / std, -1.625 / std], abs=1e-5)
    assert adv == pytest.approx([0.99862, -0.45392, 0.63549, -1.18020], abs=1e-4)
    # the other presets keep 1/0 and no shaping
    assert shaped_rewards([True, False], [5, 5], [False, False], [True, True]) == [1.0, 0.0]


def test_dynamic_sampling_filters_on_accuracy_not_shaped_reward():
    # an all-wrong group whose lengths differ: its shaped rewards differ only by the overlong penalty
    correct = [False, False, False, False]
    r = shaped_rewards(correct, [10, 17, 19, 20], [False] * 3 + [True], [False] * 4, wrong_reward=-1.0, overlong=True,
                       max_len=20, buffer=4)
    assert len(set(r)) > 1
    assert dynamic_sampling_keep(torch.tensor([r])).tolist() == [True]  # on reward it would be trained on
    assert dynamic_sampling_keep(torch.tensor([[float(c) for c in correct]])).tolist() == [False]  # on accuracy: dropped


def test_presets_update_several_times_per_rollout_batch_as_published():
    assert (PRESETS["dapo"].mini_batches, PRESETS["dr_grpo"].mini_batches) == (16, 8)
    assert (PRESETS["grpo"].mini_batches, PRESETS["rloo"].mini_batches) == (1, 1)
    assert PRESETS["dapo"].wrong_reward == -1.0 and PRESETS["grpo"].wrong_reward == 0.0


def test_log_probs_are_chunked_only_where_the_memory_budget_needs_it():
    from rl_stage.policy import LOGPROB_BUDGET, chunk_for

    assert LOGPROB_BUDGET == 1 << 30
    # SmolLM2's 49,152 tokens: 3 fp32 copies are 589,824 bytes a token, so 1,820 tokens fit 1 GiB
    assert chunk_for(1820, 49_152, None) == 0 and chunk_for(1821, 49_152, None) == 1820
    # Qwen2.5's 151,936: 1,823,232 bytes a token, 588 fit
    assert chunk_for(4096, 151_936, None) == 588 and chunk_for(500, 151_936, None) == 0
    assert chunk_for(10**6, 10**9, None) == 128  # never below 128 tokens
    assert chunk_for(4096, 151_936, 1024) == 1024 and chunk_for(4096, 151_936, 0) == 0  # a chunk given is used as is


def test_a_registry_refuses_a_name_given_twice():
    from rl_stage.algorithms import ADVANTAGES, _register

    with pytest.raises(ValueError, match="'grpo' is registered twice"):
        _register(ADVANTAGES, "grpo")
