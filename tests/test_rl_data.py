"""The curriculum sampler (stages, prioritized draws, advance_at, state) and preset resolution, by hand."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rl_stage.data import CurriculumSampler


def _stage(d, name, n, n_correct, k=10):
    (d / name).mkdir(parents=True)
    pq.write_table(pa.table({"id": [f"{name}{i}" for i in range(n)], "problem": [f"p{i}" for i in range(n)],
                             "answer": ["1"] * n, "n_correct": [n_correct] * n, "n_graded": [k] * n, "k": [k] * n}),
                   d / name / "s.parquet")
    return str(d / name)


def test_stages_run_in_order_and_each_epoch_draws_every_prompt_once(tmp_path):
    s = CurriculumSampler([_stage(tmp_path, "easy", 5, 8), _stage(tmp_path, "hard", 3, 1)], seed=0, stage_steps=2)
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
    assert (d["advantage"], d["aggregation"], d["eps_low"], d["eps_high"]) == ("grpo", "token-mean", 0.2, 0.28)
    assert (d["wrong_reward"], d["mini_batches"], d["dynamic_sampling"], d["overlong_buffer"]) == (-1.0, 16, True, 20)
    d = TrainConfig(data=["x"], preset="dapo", eps_high=0.3, wrong_reward=0.0, mini_batches=2).resolved()
    assert (d["eps_high"], d["wrong_reward"], d["mini_batches"]) == (0.3, 0.0, 2)
    assert TrainConfig(data=["x"], preset="rloo").resolved()["aggregation"] == "seq-mean-token-sum"
    with pytest.raises(ValueError, match="valid: dapo, dr_grpo, grpo, rloo"):
        TrainConfig(data=["x"], preset="ppo").resolved()
    with pytest.raises(ValueError, match="valid: seq-mean-token-mean"):
        TrainConfig(data=["x"], aggregation="mean").resolved()
