"""The curriculum sampler (stages, prioritized draws, advance_at, state) and preset resolution, by hand."""

from __future__ import annotations

import types

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rl_stage.data import DataError
from rl_stage.rollout import Group
from rl_stage.samplers import CurriculumSampler, inclusion_probabilities, systematic_pps


def _stage(d, name, n, n_correct, k=10):
    (d / name).mkdir(parents=True)
    pq.write_table(pa.table({"id": [f"{name}{i}" for i in range(n)], "problem": [f"p{i}" for i in range(n)],
                             "answer": ["1"] * n, "n_correct": [n_correct] * n, "n_graded": [k] * n, "k": [k] * n}),
                   d / name / "s.parquet")
    return str(d / name)


def test_stages_run_in_order_and_each_epoch_draws_every_prompt_once(tmp_path):
    s = CurriculumSampler([_stage(tmp_path, "easy", 5, 8), _stage(tmp_path, "hard", 3, 1)], seed=0, stage_steps=2,
                          mode="epoch")
    assert s.stage_name == "easy"
    first = [p.id for p in s.sample(5)]
    assert sorted(first) == [f"easy{i}" for i in range(5)]  # without replacement inside an epoch
    assert s.end_step() is False and s.end_step() is True and s.stage_name == "hard"
    assert {p.id for p in s.sample(3)} == {"hard0", "hard1", "hard2"}
    assert s.end_step() is False and s.stage_name == "hard"  # the last stage never ends


def test_prioritized_weights_are_kimis_with_the_floor_and_track_rollouts(tmp_path):
    s = CurriculumSampler([_stage(tmp_path, "a", 2, 3)], seed=0, floor=0.05)
    # offline 3/10 correct: weight 1 - 0.3 = 0.7
    assert s.weights([0, 1]).tolist() == pytest.approx([0.7, 0.7])
    s.update("a0", 8, 8)  # rollouts: 8/8 more -> s = 11/18, weight 7/18
    s.update("a1", 0, 8)  # 0/8 more -> s = 3/18, weight 15/18
    assert s.weights([0, 1]).tolist() == pytest.approx([7 / 18, 15 / 18])
    for _ in range(10):
        s.update("a0", 8, 8)  # nearly always solved: the floor keeps it drawable
    assert s.weights([0])[0] == pytest.approx(max(0.05, 1 - 91 / 98))


def test_advance_at_moves_on_once_the_running_accuracy_is_reached(tmp_path):
    s = CurriculumSampler([_stage(tmp_path, "easy", 4, 8), _stage(tmp_path, "hard", 4, 1)], advance_at=0.75)
    for i in range(7):  # fewer than 8 groups seen: never advances, whatever the accuracy
        s.update(f"easy{i % 4}", 8, 8)
        assert s.end_step() is False
    s.update("easy0", 4, 8)  # 8 groups, mean accuracy (7 + 0.5) / 8 = 0.9375 >= 0.75
    assert s.end_step() is True and s.stage_name == "hard" and s.recent == []


def test_state_round_trips_and_a_restored_sampler_draws_the_same(tmp_path):
    paths = [_stage(tmp_path, "easy", 6, 8), _stage(tmp_path, "hard", 6, 2)]
    a = CurriculumSampler(paths, seed=3, stage_steps=1)
    a.sample(2)
    a.update("easy0", 1, 8)
    a.end_step()
    st = a.state_dict()
    b = CurriculumSampler(paths, seed=99, stage_steps=1)
    b.load_state_dict(st)
    assert [p.id for p in a.sample(4)] == [p.id for p in b.sample(4)]
    assert a.stage_name == b.stage_name == "hard"
    assert np.allclose(a.weights(list(range(6))), b.weights(list(range(6))))


def test_presets_resolve_with_overrides_and_unknown_names_are_listed(tmp_path):
    from rl_stage.trainer import TrainConfig

    d = TrainConfig(data=["x"], preset="dapo", max_tokens=100).resolved()
    assert (d.advantage, d.aggregation, d.eps_low, d.eps_high) == ("grpo", "token-mean", 0.2, 0.28)
    assert (d.wrong_reward, d.mini_batches, d.dynamic_sampling, d.overlong_buffer) == (-1.0, 16, True, 20)
    d = TrainConfig(data=["x"], preset="dapo", eps_high=0.3, wrong_reward=0.0, mini_batches=2).resolved()
    assert (d.eps_high, d.wrong_reward, d.mini_batches) == (0.3, 0.0, 2)
    assert TrainConfig(data=["x"], preset="rloo").resolved().aggregation == "seq-mean-token-sum"
    with pytest.raises(ValueError, match="valid: dapo, dr_grpo, grpo, rloo"):
        TrainConfig(data=["x"], preset="ppo").resolved()
    with pytest.raises(ValueError, match="valid: seq-mean-token-mean"):
        TrainConfig(data=["x"], aggregation="mean").resolved()


def _mixed(d, n_solved=5, n_unsolved=5):
    """One stage: ``n_solved`` prompts at 10/10 offline (weight: the floor) and ``n_unsolved`` at 0/10 (weight 1)."""
    d.mkdir(parents=True, exist_ok=True)
    n = n_solved + n_unsolved
    pq.write_table(pa.table({"id": [f"s{i}" for i in range(n_solved)] + [f"u{i}" for i in range(n_unsolved)],
                             "problem": ["p"] * n, "answer": ["1"] * n, "n_correct": [10] * n_solved + [0] * n_unsolved,
                             "n_graded": [10] * n, "k": [10] * n}), d / "s.parquet")
    return str(d)


def test_weighted_sampling_gives_kimis_proportional_shares_with_distinct_prompts_per_batch(tmp_path):
    # Kimi k1.5: P(i) ~ max(floor, 1 - s_i). 5 solved (w 0.05) + 5 unsolved (w 1): the unsolved get 5 / 5.25 = 0.952
    # of the draws. The epoch mode (every prompt once an epoch) gives them exactly half, whatever the weights.
    s = CurriculumSampler([_mixed(tmp_path / "a")], seed=0, floor=0.05)
    draws = 20000
    counts: dict[str, int] = {}
    for _ in range(draws):
        batch = [p.id for p in s.sample(2)]
        assert len(set(batch)) == 2  # a batch never holds a prompt twice
        for pid in batch:
            counts[pid] = counts.get(pid, 0) + 1
    unsolved = sum(v for k, v in counts.items() if k.startswith("u")) / (2 * draws)
    assert unsolved == pytest.approx(5 / 5.25, abs=0.005)
    # each prompt's inclusion rate is n w_i / sum(w): 2 / 5.25 for an unsolved one, 0.1 / 5.25 for a solved one
    for pid, v in counts.items():
        want = 2 * (1.0 if pid.startswith("u") else 0.05) / 5.25
        assert v / draws == pytest.approx(want, abs=0.015), pid

    e = CurriculumSampler([_mixed(tmp_path / "b")], seed=0, floor=0.05, mode="epoch")
    ids = [p.id for _ in range(500) for p in e.sample(2)]  # 100 whole epochs of 10
    assert sum(x.startswith("u") for x in ids) / len(ids) == 0.5


def test_epoch_mode_never_repeats_a_prompt_in_a_batch_across_an_epoch_boundary(tmp_path):
    s = CurriculumSampler([_stage(tmp_path, "a", 5, 3)], seed=1, mode="epoch")
    seen = []
    for _ in range(50):  # batches of 3 over epochs of 5: every other batch crosses a boundary
        batch = [p.id for p in s.sample(3)]
        assert len(set(batch)) == 3, batch
        seen += batch
    # still every prompt once per epoch: over 150 draws (30 epochs) each of the 5 comes 30 times
    assert sorted(seen.count(f"a{i}") for i in range(5)) == [30] * 5


def test_inclusion_probabilities_cap_at_one_and_share_out_the_rest():
    # w = [10, 1, 1, 1], n = 2: 2 * 10 / 13 > 1, so the first is certain; the other draw spreads as 1/3 each
    assert inclusion_probabilities(np.array([10.0, 1, 1, 1]), 2).tolist() == pytest.approx([1, 1 / 3, 1 / 3, 1 / 3])
    # no cap needed: n w / sum(w)
    assert inclusion_probabilities(np.array([1.0, 3.0]), 1).tolist() == pytest.approx([0.25, 0.75])
    # more asked than there are: every item once
    assert inclusion_probabilities(np.array([1.0, 2.0]), 5).tolist() == [1.0, 1.0]
    rng = np.random.default_rng(0)
    hits = np.zeros(4)
    for _ in range(6000):
        got = systematic_pps(np.array([10.0, 1, 1, 1]), 2, rng)
        assert len(set(got.tolist())) == 2
        hits[got] += 1
    assert (hits / 6000).tolist() == pytest.approx([1, 1 / 3, 1 / 3, 1 / 3], abs=0.02)


def test_weighted_sampling_follows_online_updates_and_resumes_the_same(tmp_path):
    paths = [_mixed(tmp_path / "a", 2, 2)]
    a = CurriculumSampler(paths, seed=5)
    a.update("s0", 0, 90)  # s0: 10/100 correct now, weight 0.9
    assert a.weights([0, 1, 2, 3]).tolist() == pytest.approx([0.9, 0.05, 1, 1])
    b = CurriculumSampler(paths, seed=7)
    b.load_state_dict(a.state_dict())
    assert [[p.id for p in a.sample(2)] for _ in range(20)] == [[p.id for p in b.sample(2)] for _ in range(20)]
    with pytest.raises(DataError, match="weighted, epoch"):
        CurriculumSampler(paths, mode="shuffle")


def _fake_rounds(tmp_path, patterns, **kw):
    """A trainer whose rollouts are given: round r grades its prompts ``patterns[r]`` (one correctness list per
    group, in batch order), so DAPO's dynamic sampling can be checked by hand without a model."""
    import torch

    from rl_stage.trainer import TrainConfig, Trainer

    # epoch sampling over 12 prompts: three rounds of 4 draw 12 distinct prompts
    cfg = TrainConfig(data=[_mixed(tmp_path / "d", 6, 6)], preset="dapo", prompts_per_step=4, group_size=2,
                      curriculum_sampling="epoch", **kw)
    t = Trainer(cfg)
    t.torch = torch
    t.sampler = CurriculumSampler(cfg.data, seed=0, mode="epoch")
    asked: list[int] = []
    needs: list[int | None] = []
    real_sample = t.sampler.sample

    def sample(n, need=None):
        asked.append(n)
        needs.append(need)
        return real_sample(n, need)

    t.sampler.sample = sample  # type: ignore[method-assign]

    def fake_round(prompts, tag, cfg=None):
        pat = patterns[len(asked) - 1]
        groups = [Group(i, p, [1], [], [1.0 if x else -1.0 for x in c], c)
                  for i, (p, c) in enumerate(zip(prompts, pat, strict=True))]
        return groups, 0, 0.0, 0.0

    t.rollouts = types.SimpleNamespace(round=fake_round)  # type: ignore[assignment]
    t.sched = type("S", (), {"get_last_lr": lambda self: [1e-6], "step": lambda self: None})()
    t.needs = needs
    return t, asked


def test_dapo_dynamic_sampling_draws_full_generation_batches_until_the_batch_is_full(tmp_path):
    mixed, flat = [True, False], [False, False]
    # round 1: one group of 4 with a signal; round 2: two; round 3: three -> 6 kept, the first 4 are trained on
    t, asked = _fake_rounds(tmp_path, [[mixed, flat, flat, flat], [flat, mixed, mixed, flat], [mixed, mixed, flat, mixed]])
    ro = t._rollout()
    assert asked == [4, 4, 4]  # full generation batches, as verl's DAPO recipe (not just the shortfall)
    assert t.needs == [4, 3, 1]  # what the sampler was told is still missing (the curriculum sampler draws 4 anyway)
    assert (ro.gen_rounds, ro.groups_generated, len(ro.kept), ro.short) == (3, 12, 4, False)
    assert ro.dropped == 3 + 2 + 1  # flat groups, and groups of a prompt already kept (a batch holds distinct prompts)
    assert len({g.prompt.id for g in ro.kept}) == 4
    assert ro.completions == 3 * 4 * 2  # every generated completion counts, dropped groups' too


def test_a_batch_still_short_after_max_gen_batches_is_never_trained_on(tmp_path):
    from rl_stage.trainer import TrainError

    mixed, flat = [True, False], [False, False]
    pats = [[mixed, flat, flat, flat], [flat, flat, flat, flat]]
    t, asked = _fake_rounds(tmp_path / "a", pats, max_gen_batches=2)
    with pytest.raises(TrainError, match=r"short batch: 1 of 4 groups .* after 2 generation batches.*max_gen_batches 2"):
        t.train_step()
    t, asked = _fake_rounds(tmp_path / "b", pats, max_gen_batches=2, short_batch="skip")
    m = t.train_step()
    assert m["skipped"].startswith("short batch: 1 of 4") and m["gen_rounds"] == 2 and "loss" not in m
    # 0: no limit; it goes on until the batch is full
    t, asked = _fake_rounds(tmp_path / "c", [[flat] * 4] * 11 + [[mixed] * 4], max_gen_batches=0)
    ro = t._rollout()
    assert ro.gen_rounds == 12 and len(ro.kept) == 4 and not ro.short
    assert _dapo_dual_clip() == 10.0  # the recipe's clip_ratio_c


def test_a_short_batch_from_a_pool_drawn_to_the_end_says_so_not_raise_max_gen_batches(tmp_path):
    """12 prompts, 4 a round: after 3 rounds every prompt was drawn in the step, and only one group carried a signal.
    More generation batches cannot help; the message says what can."""
    from rl_stage.trainer import TrainError

    mixed, flat = [True, False], [False, False]
    pats = [[mixed, flat, flat, flat], [flat] * 4, [flat] * 4]
    t, asked = _fake_rounds(tmp_path, pats, max_gen_batches=3)
    with pytest.raises(TrainError) as e:
        t.train_step()
    msg = str(e.value)
    assert "short batch: 1 of 4 groups with a learning signal after 3 generation batches: every one of the 12 prompts " \
           "in the pool was drawn in this step" in msg
    assert "a prompts_per_step of at most 1" in msg and "max_gen_batches" not in msg
    assert asked == [4, 4, 4]  # epoch sampling: 12 distinct prompts in 3 rounds


def _dapo_dual_clip():
    from rl_stage.trainer import TrainConfig

    return TrainConfig(data=["x"], preset="dapo").resolved().dual_clip


def test_a_train_config_is_checked_when_it_is_made_and_the_data_when_a_run_starts():
    from rl_stage.config import TrainConfig, TrainError

    with pytest.raises(TrainError, match="lr must be > 0"):
        TrainConfig(data=["x"], lr=0.0)
    with pytest.raises(TrainError, match="temperature must be > 0"):
        TrainConfig(temperature=0.0)  # no data yet (a flow sets it), the rest is checked all the same
    cfg = TrainConfig()  # every default in range
    with pytest.raises(TrainError, match="no training data"):
        cfg.check()
