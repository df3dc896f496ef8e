"""The signal sampler (rl_stage.samplers.signal): prior, update, forgetting, the policy's drift, draws and resume, by hand."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rl_stage.data import DataError
from rl_stage.samplers.signal import (
    FLAT_VAR,
    MAX_VAR,
    SignalSampler,
    difficulty_update,
    digamma,
    group_signal,
    offline_prior,
    trigamma,
)

EULER = 0.5772156649015329


def _pool(d, counts, k=10, name="pool"):
    """A scored shard folder: one row per entry of ``counts`` (n_correct of k; None: not scored)."""
    d = d / name
    d.mkdir(parents=True)
    n = len(counts)
    pq.write_table(pa.table({"id": [f"p{i}" for i in range(n)], "problem": [f"q{i}" for i in range(n)], "answer": ["1"] * n,
                             "n_correct": pa.array(counts, pa.int32()),
                             "n_graded": pa.array([None if c is None else k for c in counts], pa.int32()),
                             "k": pa.array([None if c is None else k for c in counts], pa.int32())}),
                   d / "s.parquet")
    return [str(d)]


def _known(s, rates):
    """Pin the sampler's beliefs to known pass rates at the starting policy (theta 0, beta 1)."""
    for i, p in enumerate(rates):
        s.x[i], s.var[i] = -math.log(p / (1 - p)), 1e-9


def test_digamma_and_trigamma_at_known_values():
    assert digamma(np.array([1.0, 2.0, 0.5])).tolist() == pytest.approx([-EULER, 1 - EULER, -EULER - 2 * math.log(2)],
                                                                          abs=1e-10)
    assert trigamma(np.array([1.0, 2.0, 0.5])).tolist() == pytest.approx([math.pi**2 / 6, math.pi**2 / 6 - 1,
                                                                           math.pi**2 / 2], abs=1e-10)
    x = np.array([0.3, 2.2, 7.9])
    assert (digamma(x + 1) - digamma(x)).tolist() == pytest.approx((1 / x).tolist(), abs=1e-10)


def test_prior_is_the_offline_estimate_worth_at_most_prior_strength_samples(tmp_path):
    # 1 of 1 is worth its one sample: Beta(2, 1), logit moments psi(2) - psi(1) = 1 and psi'(2) + psi'(1) = pi^2/3 - 1;
    # no estimate: Beta(1, 1), mean 0 and variance pi^2 / 3; 3 of 10 at strength 4 is Beta(2.2, 3.8)
    mu, var = offline_prior(np.array([1, 0, 3]), np.array([1, 0, 10]), strength=4.0)
    assert mu[:2].tolist() == pytest.approx([1.0, 0.0]) and var[:2].tolist() == pytest.approx([math.pi**2 / 3 - 1, FLAT_VAR])
    assert mu[2] == pytest.approx(float((digamma(np.array([2.2])) - digamma(np.array([3.8])))[0]))
    s = SignalSampler(_pool(tmp_path, [3, None]), group_size=8, prior_strength=4.0)
    assert s.x.tolist() == pytest.approx([-mu[2], 0.0]) and s.var[1] == pytest.approx(FLAT_VAR)
    flat = SignalSampler(_pool(tmp_path, [3, None], name="flat"), group_size=8, use_prior=False)
    assert flat.x.tolist() == [0.0, 0.0] and flat.var.tolist() == pytest.approx([FLAT_VAR, FLAT_VAR])


def test_a_group_updates_its_difficulty_by_laplace():
    # x ~ N(0, 1) at theta 0, beta 1, 4 of 8 right: the mode stays at 0 by symmetry, the variance is 1 / (1 + 8/4)
    m, s = difficulty_update(np.zeros(1), np.ones(1), 0.0, 1.0, np.array([4.0]), np.array([8.0]))
    assert m[0] == pytest.approx(0.0, abs=1e-12) and s[0] == pytest.approx(1 / 3)
    # 8 of 8: easier (x goes down) where -(x - 0)/1 - (8 - 8 sigmoid(-x)) = 0
    m, s = difficulty_update(np.zeros(1), np.ones(1), 0.0, 1.0, np.array([8.0]), np.array([8.0]))
    q = 1 / (1 + math.exp(m[0]))
    assert m[0] < 0 and -m[0] - (8 - 8 * q) == pytest.approx(0.0, abs=1e-10) and s[0] == pytest.approx(1 / (1 + 8 * q * (1 - q)))


def test_every_graded_group_updates_its_prompt_and_evidence_fades(tmp_path):
    s = SignalSampler(_pool(tmp_path, [5, 5]), group_size=8, prior_strength=4.0, drift_sd=0.0, sharpen_sd=0.0,
                      forget_sd=0.2)
    x0, v0 = s.x[0], s.var[0]  # Beta(3, 3): mean 0, variance 2 psi'(3)
    assert x0 == pytest.approx(0.0, abs=1e-12) and v0 == pytest.approx(2 * float(trigamma(np.array([3.0]))[0]))
    s.observe([(0, 4, 8)])
    assert s.x[0] == pytest.approx(0.0, abs=1e-12) and s.var[0] == pytest.approx(1 / (1 / v0 + 2))
    assert (s.x[1], s.var[1]) == (x0, v0)  # untouched
    for _ in range(3):
        s.end_step()
    _, var = s.difficulty()
    assert var.tolist() == pytest.approx([1 / (1 / v0 + 2) + 3 * 0.04, v0 + 3 * 0.04])  # forget_sd^2 a step
    for _ in range(10_000):
        s.end_step()
    assert s.difficulty()[1].tolist() == pytest.approx([MAX_VAR, MAX_VAR])  # at most MAX_VAR


def test_the_policy_filter_is_the_laplace_posterior_of_a_random_walk(tmp_path):
    s = SignalSampler(_pool(tmp_path, [5, 5, 5]), group_size=8, drift_sd=0.2, sharpen_sd=0.1, forget_sd=0.0)
    s.x[:], s.var[:] = 0.0, 1e-12
    # a group of 4 of 8 at a prompt predicted at 1/2: nothing moves; the information is n q (1 - q) = 2 on theta
    # (d u / d theta = 1, d u / d log beta = 0 at u = 0) plus the prior's 1 / 0.2^2 and 1 / 0.1^2
    s.observe([(0, 4, 8)])
    assert s.policy.tolist() == pytest.approx([0.0, 0.0], abs=1e-12)
    assert s.policy_cov.ravel().tolist() == pytest.approx([1 / 27, 0.0, 0.0, 0.01])
    # the second round of the same step adds no random-walk variance: the policy has not moved
    s.observe([(1, 8, 8)])
    theta, log_beta, beta = s.theta, s.policy[1], s.beta
    assert theta > 0 and beta > 1  # better than predicted: the ability goes up, and the sharpness with it
    # the mode: both gradients vanish, with the first round's precisions (27, 100) as the prior:
    # beta r - 27 theta = 0 and u r - 100 log beta = 0, where u = beta theta and r = 8 - 8 sigmoid(u)
    u = beta * theta
    r = 8 - 8 / (1 + math.exp(-u))
    assert beta * r - 27 * theta == pytest.approx(0.0, abs=1e-6) and u * r - 100 * log_beta == pytest.approx(0.0, abs=1e-6)
    assert s.mean(np.array([2])) [0] > 0.5  # an untouched prompt at x = 0 is now expected to pass more often


def test_draws_follow_the_learning_signal_on_a_pool_of_known_pass_rates(tmp_path):
    s = SignalSampler(_pool(tmp_path, [0, 0, 0, 0]), group_size=8, drift_sd=0.0, forget_sd=0.0, seed=1)
    _known(s, [0.02, 0.5, 0.98, 0.3])
    assert group_signal(np.array([0.02, 0.5, 0.98, 0.3]), 8).tolist() == pytest.approx(
        [1 - 0.02**8 - 0.98**8, 1 - 2 * 0.5**8, 1 - 0.98**8 - 0.02**8, 1 - 0.3**8 - 0.7**8])
    for _ in range(20):
        assert [p.id for p in s.sample(2)] == ["p1", "p3"]  # survival 0.992 and 0.942 against 0.149 twice
        s.end_step()
    # a flat prompt (log-odds N(0, pi^2/3)) against one known at 0.1, by the variance: the flat one wins when its draw
    # x has x (1 - x) > 0.09, i.e. |logit x| < logit 0.9: probability erf(logit(0.9) / (sd sqrt 2))
    v = SignalSampler(_pool(tmp_path, [None, 0], name="v"), group_size=8, drift_sd=0.0, forget_sd=0.0, signal="variance",
                      seed=3)
    _known(v, [0.5, 0.1])
    v.x[0], v.var[0] = 0.0, FLAT_VAR
    want = math.erf(math.log(9) / (math.sqrt(FLAT_VAR) * math.sqrt(2)))  # 0.7742
    wins = 0
    for _ in range(4000):
        wins += v.sample(1)[0].id == "p0"
        v.end_step()
    assert wins / 4000 == pytest.approx(want, abs=0.02)


def test_a_refill_draws_only_the_groups_it_is_expected_to_need(tmp_path):
    s = SignalSampler(_pool(tmp_path, [0] * 5), group_size=8, drift_sd=0.0, forget_sd=0.0)
    _known(s, [0.5] * 5)  # each group survives with 1 - 2 / 256 = 0.992
    assert len(s.sample(5, need=1)) == 2  # 0.992 < 1: two prompts
    s.end_step()
    assert len(s.sample(5, need=2)) == 3  # 1.984 < 2 <= 2.977
    s.end_step()
    assert len(s.sample(5)) == 5 and len(s.sample(5, need=5)) == 0  # the step's pool is spent


def test_no_prompt_twice_in_a_step_and_every_prompt_stays_eligible(tmp_path):
    s = SignalSampler(_pool(tmp_path, [5, 10, 0]), group_size=8, prior_strength=10.0, drift_sd=0.0)
    first = [p.id for p in s.sample(2)]
    second = [p.id for p in s.sample(2)]
    assert len(second) == 1 and set(first) | set(second) == {"p0", "p1", "p2"}
    assert s.sample(2) == []
    s.end_step()
    assert {p.id for p in s.sample(3)} == {"p0", "p1", "p2"}  # never- and always-solved prompts stay in the pool


def test_a_restored_sampler_draws_exactly_what_the_original_draws(tmp_path):
    paths = _pool(tmp_path, [1, 3, 5, 7, 9, None, None, 2])
    a = SignalSampler(paths, group_size=4, seed=11)
    rng = np.random.default_rng(0)
    for _ in range(3):
        got = a.sample(3)
        a.observe([(p.index, int(rng.integers(0, 5)), 4) for p in got])
        a.end_step()
    a.sample(2)  # a state saved in the middle of a step
    st = a.state_dict()
    b = SignalSampler(paths, group_size=4, seed=999)
    b.load_state_dict(st)
    for _ in range(5):
        x, y = a.sample(3, need=2), b.sample(3, need=2)
        assert [p.id for p in x] == [p.id for p in y]
        res = [(p.index, int(rng.integers(0, 5)), 4) for p in x]
        a.observe(res)
        b.observe(res)
        a.end_step()
        b.end_step()
    assert a.state_dict() == b.state_dict()
    other = SignalSampler(_pool(tmp_path, [1, 2], name="other"), group_size=4)
    with pytest.raises(DataError, match="not this run's"):
        other.load_state_dict(st)


def test_prompts_carry_their_prior_bucket_and_expected_pass_rate(tmp_path):
    s = SignalSampler(_pool(tmp_path, [3, None]), group_size=8, prior_strength=4.0, drift_sd=0.0, seed=0)
    got = {p.id: p for p in s.sample(2)}
    assert got["p0"].prior == pytest.approx(0.3) and got["p0"].bucket == "hard"
    assert got["p0"].expected == pytest.approx(float(s.mean(np.array([0]))[0]))
    assert 0.3 < got["p0"].expected < 0.4  # Beta(2.2, 3.8) has mean 0.367
    assert got["p1"].prior is None and got["p1"].bucket is None and got["p1"].expected == pytest.approx(0.5)
