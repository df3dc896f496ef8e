"""Screened groups (rl_stage.screening): the go-on rule on known beliefs, worked by hand; every completion counted;
a continued group is the group an unscreened run would have drawn; a screened run resumes exactly."""

from __future__ import annotations

import importlib.util
import json
import math

import numpy as np
import pytest
from conftest import write_easy_sums

from rl_stage import screening


def test_the_chance_a_whole_group_is_not_all_equal_after_its_screen():
    # flat prior and the screen: 0 of 4 -> Beta(1, 5); E[(1 - p)^4] = B(1, 9) / B(1, 5) = (1/9) / (1/5) = 5/9
    assert screening.chance_flat(0, 4, 4) == pytest.approx(4 / 9)
    assert screening.chance_flat(4, 4, 4) == pytest.approx(4 / 9)  # 4 of 4: E[p^4] under Beta(5, 1), the same 5/9
    assert screening.chance_flat(0, 2, 2) == pytest.approx(1 - 3 / 5)  # Beta(1, 3): B(1, 5) / B(1, 3) = 3/5
    assert screening.chance_flat(1, 4, 4) == screening.chance_flat(3, 4, 1) == 1.0  # a mixed screen is a signal already
    assert screening.chance_flat(0, 4, 0) == 0.0
    # a belief known to the last digit (variance ~0): 1 - (1 - p)^4 and 1 - p^4
    logit = lambda p: math.log(p / (1 - p))  # noqa: E731
    got = screening.chance_belief(np.array([0, 4, 2]), 4, 4, np.array([logit(0.2), logit(0.9), 0.0]),
                                  np.array([1e-12, 1e-12, 1.0]))
    assert got == pytest.approx([1 - 0.8**4, 1 - 0.9**4, 1.0], abs=1e-6)


def test_the_likeliest_candidates_go_on_until_their_chances_cover_the_groups_missing():
    chance = np.array([1.0, 0.4, 0.59, 0.7])
    assert screening.choose(chance, need=2, min_chance=0.5) == [0, 2, 3]  # 1.0 + 0.7 = 1.7 < 2, + 0.59 = 2.29
    assert screening.choose(chance, need=1, min_chance=0.5) == [0]
    assert screening.choose(chance, need=2, min_chance=0.8) == [0]  # below the bar, never, even when short
    assert screening.choose(np.array([0.6, 0.6]), need=1, min_chance=0.5) == [0, 1]  # 0.6 < 1: both
    assert screening.choose(np.array([]), need=3, min_chance=0.5) == []


class _Pool:
    """A sampler without a belief (the flat rule applies) that hands out prompts 0, 1, 2 ... and records its calls."""

    def __init__(self):
        self.calls, self.next = [], 0

    def sample(self, n, need=None, exclude=()):
        from rl_stage.data import Prompt

        self.calls.append((n, need, list(exclude)))
        out = [Prompt(f"q{i}", "", "1", index=i) for i in range(self.next, self.next + n)]
        self.next += n
        return out


def test_the_queue_holds_what_was_not_needed_and_carries_it_one_step():
    pool, q = _Pool(), screening.Queue(2, 4, min_chance=0.5, candidates=2.0, carry=1)
    new = lambda prompts, cs: [screening.Screened(p, c, f"k{p.index}") for p, c in zip(prompts, cs, strict=True)]  # noqa: E731
    first = q.draw(pool, missing=2)  # nothing held: 2 x 2.0 = 4 candidates for 2 groups
    assert [p.index for p in first] == [0, 1, 2, 3] and pool.calls == [(4, 2, [])]
    # screens 1, 0, 2, 1 of 2: chances 1, 0.4, 0.4, 1 (Beta(1, 3): 1 - 3/5); 0 and 3 cover the 2 groups
    go, out = q.decide(pool, new(first, [1, 0, 2, 1]), missing=2)
    assert [x.prompt.index for x in go] == [0, 3] and [x.prompt.index for x in out] == [1, 2] and q.held == []
    second = q.draw(pool, missing=2)
    go, out = q.decide(pool, new(second, [1, 1, 1, 0]), missing=2)  # three at chance 1 for two groups: one is held
    assert [x.prompt.index for x in go] == [4, 5] and [x.prompt.index for x in out] == [7]
    assert [x.prompt.index for x in q.held] == [6]
    assert q.draw(pool, missing=1) == [] and len(pool.calls) == 2  # the held one covers the one group missing
    q.draw(pool, missing=2)  # it covers one of two: candidates for the other, never the held prompt itself
    assert pool.calls[-1] == (2, 1.0, [6])
    q.end_step()
    assert q.begin_step() == [] and [x.age for x in q.held] == [1]  # waits one step
    go, _ = q.decide(pool, [], missing=1)  # the next step's first round continues it before any new candidate
    assert [x.prompt.index for x in go] == [6] and q.held == []
    q.load_state_dict(new(second[:2], [1, 1]))
    q.end_step()
    q.end_step()
    assert [x.prompt.index for x in q.begin_step()] == [4, 5] and q.held == []  # past carry: screened out
    q.load_state_dict(new(second[:1], [1]))
    q.end_step(stage_changed=True)  # a new curriculum stage: nothing of the old one is carried into it
    assert [x.prompt.index for x in q.begin_step()] == [4]
    q0 = screening.Queue(2, 4, min_chance=0.5, candidates=2.0, carry=0)
    q0.load_state_dict(new(second[:1], [1]))
    q0.end_step()
    assert len(q0.begin_step()) == 1  # carry 0: a screen never waits for another step


def test_screen_settings_are_checked(tmp_path):
    from rl_stage.config import TrainConfig, TrainError

    for kw, msg in ((dict(screen=8), "screen must be 0 \\(off\\) or 1 .. group_size - 1 \\(7\\), got 8"),
                    (dict(screen=-1), "screen must be 0"),
                    (dict(screen=2, screen_min_chance=1.5), "screen_min_chance must be in \\[0, 1\\]"),
                    (dict(screen=2, screen_candidates=0.5), "screen_candidates must be >= 1"),
                    (dict(screen=2, screen_carry=-1), "screen_carry must be >= 0")):
        with pytest.raises(TrainError, match=msg):
            TrainConfig(data=["x"], group_size=8, **kw).check()


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    from curate.select.export import ExportConfig, export

    d = tmp_path_factory.mktemp("screen")
    export([write_easy_sums(d / "scored")], d / "export", ExportConfig())
    return d / "export"


def _cfg(export_dir, out, **kw):
    from rl_stage.trainer import TrainConfig

    base = dict(data=[str(export_dir)], out=str(out), rollout_backend="hf", preset="dapo", mini_batches=1,
                prompts_per_step=2, group_size=4, screen=2, sampler="uniform", max_tokens=16, steps=2, save_every=1, lr=1e-5,
                keep_checkpoints=1, micro_batch_size=8, seed=5)
    base.update(kw)
    return TrainConfig(**base)


def _one_zero_in_every_call(monkeypatch) -> None:
    """Rewards 1, 0, 1, 0 ... in every graded call: every screen of 2 is mixed (1 of 2), so every candidate may go on
    (chance 1), and a continued group is [1, 0, 1, 0]: kept by dynamic sampling. What the model sampled does not
    matter."""
    from rl_stage import rollout

    def rewards(self, groups):
        r = [[float(i % 2 == 0) for i in range(len(g.completions))] for g in groups]
        return r, [[x == 1.0 for x in g] for g in r]

    monkeypatch.setattr(rollout.Rollouts, "rewards", rewards)


@pytest.mark.engine
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="engines extra not installed")
def test_a_screened_step_counts_every_completion_and_resumes_exactly(export_dir, tmp_path, monkeypatch, capsys):
    from flows.cli import main
    from rl_stage.trainer import Trainer

    _one_zero_in_every_call(monkeypatch)
    Trainer(_cfg(export_dir, tmp_path / "full")).run(progress=False)
    rows = [json.loads(x) for x in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()]
    # step 1: 2 groups missing -> 2 x 2.0 = 4 candidates (uniform keeps no belief), 2 completions each (8); all four
    # are mixed (chance 1): the first two cover the 2 groups and get their other 2 (4 more), the other two are held.
    # 12 completions, 8 of them in the 2 trained groups.
    # step 2: the two held cover both groups: no new candidate, their rest only (4 completions), 8 trained.
    # over the run: 16 completions, all 16 in trained groups, none screened out
    got = [(m["groups_generated"], m["screened_out"], m["screens_carried"], m["groups"], m["dropped_groups"],
            m["gen_rounds"], m["completions"], m["screen_completions"], m["completions_trained"]) for m in rows]
    assert got == [(4, 0, 0, 2, 0, 1, 12, 8, 8), (0, 0, 2, 2, 0, 1, 4, 0, 8)]
    assert [m["completions_total"] for m in rows] == [12, 16]
    assert [m["trained_share"] for m in rows] == [pytest.approx(8 / 12, abs=1e-4), 1.0]
    assert all(m["updates"] == 1 and m["grad_norm"] > 0 for m in rows)
    Trainer(_cfg(export_dir, tmp_path / "half")).run(stop_after=1, progress=False)
    Trainer(_cfg(export_dir, tmp_path / "half"), resume=True).run(progress=False)
    strip = lambda p: [{k: v for k, v in json.loads(x).items() if not k.startswith("time/")}  # noqa: E731
                       for x in (p / "metrics.jsonl").read_text().splitlines()]
    assert strip(tmp_path / "full") == strip(tmp_path / "half")
    capsys.readouterr()
    assert main(["show", str(tmp_path / "full")]) == 0
    assert ("completions generated 16, groups trained 4, 4.0 completions per trained group, 100% of completions in "
            "trained groups\n") in capsys.readouterr().out


@pytest.mark.engine
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm not installed")
def test_a_continued_group_is_the_group_an_unscreened_round_draws(export_dir, tmp_path):
    """vLLM seeds every sample from (seed, request key, sample index): the screen is samples 0..s-1, the rest s..G-1
    of the same key, so screening changes which groups are finished, never what a finished group holds."""
    from rl_stage.rollout import request_key
    from rl_stage.trainer import Trainer

    t = Trainer(_cfg(export_dir, tmp_path / "v", rollout_backend="vllm", max_tokens=24))
    t.setup()
    try:
        prompts = t.sampler.sample(2)
        whole = t.rollouts.round(prompts, "s")[0]
        screen = t.rollouts.round(prompts, "s", n=2)[0]
        rest = t.rollouts.round(prompts[1:], "s", positions=[1], first=2, n=2)[0]
        # a held screen is finished in a later round: its own request key, whatever that round's tag and position
        later = t.rollouts.round(prompts[1:], "later", keys=[request_key("s", 1, prompts[1])], first=2, n=2)[0]
        texts = lambda g: [c.text for c in g.completions]  # noqa: E731
        assert len(texts(whole[1])) == 4 and texts(whole[1]) == texts(screen[1]) + texts(rest[0])
        assert texts(later[0]) == texts(rest[0])
        assert len(set(texts(whole[1]))) > 1  # distinct samples, not one repeated
    finally:
        t.rollouts.close()
        t._lock.release()
