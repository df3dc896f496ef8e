"""Sequential difficulty estimation: the posterior and stopping rule by hand, then the estimator with a scripted
sampler (pure logic: rounds, seeds, resampling of the ends, resume); the real engines run elsewhere."""

from __future__ import annotations

import dataclasses
import math

import pytest
from test_estimate import ScriptedEngine

from curate.core.config import ConfigError
from curate.core.shards import read_table
from curate.difficulty.adaptive import BUCKETS, AdaptiveConfig, decide, masses, next_round, observed_bucket
from curate.difficulty.engines import SamplingConfig
from curate.difficulty.estimate import EstimateConfig, estimate
from curate.pipeline import ingest


def _beta_mass(a: float, b: float, lo: float, hi: float, steps: int = 200_000) -> float:
    """Mass of Beta(a, b) on [lo, hi] by the midpoint rule on t = x**(1/2) style substitution-free grid (independent of
    mpmath): the density's singularities at 0 and 1 for a or b = 1/2 are integrable and the grid is fine enough."""
    norm = math.gamma(a) * math.gamma(b) / math.gamma(a + b)
    h = (hi - lo) / steps
    total = 0.0
    for i in range(steps):
        x = lo + (i + 0.5) * h
        total += x ** (a - 1) * (1 - x) ** (b - 1)
    return total * h / norm


def test_posterior_masses_by_hand():
    # 4 of 4 correct: Beta(4.5, 0.5). The "solved" region p > 0.9 holds 0.657 of it, short of 1 - delta = 0.9
    m = masses(4, 4)
    assert m[4] == pytest.approx(_beta_mass(4.5, 0.5, 0.9, 1.0), abs=2e-3) and m[4] == pytest.approx(0.657, abs=1e-3)
    assert sum(m) == pytest.approx(1.0)
    # 0 of 4 is the mirror image; 2 of 4: Beta(2.5, 2.5), medium (1/3, 2/3] holds 0.535
    assert masses(0, 4) == pytest.approx(m[::-1])
    assert masses(2, 4)[2] == pytest.approx(_beta_mass(2.5, 2.5, 1 / 3, 2 / 3), abs=1e-3)


def test_the_default_rule_stops_clear_cases_after_the_first_round():
    cfg = AdaptiveConfig(adaptive=True)  # delta 0.4: the most probable bucket must hold 0.6
    assert (decide(0, 4, cfg).stop, decide(0, 4, cfg).bucket) == (True, "unsolved")  # 0.657
    assert (decide(4, 4, cfg).stop, decide(4, 4, cfg).bucket) == (True, "solved")
    d = decide(2, 4, cfg)  # medium holds 0.535: two more
    assert (d.stop, d.bucket, d.more) == (False, "medium", 2)


def test_stopping_rule_on_small_cases():
    cfg = AdaptiveConfig(adaptive=True, delta=0.1, k_step=4)  # a bucket must hold 0.9
    d = decide(4, 4, cfg)  # 0.657 < 0.9: go on, four more
    assert (d.stop, d.more, d.bucket) == (False, 4, "solved")
    assert not decide(8, 8, cfg).stop  # 0.813
    assert not decide(12, 12, cfg).stop  # 0.892: just short
    d = decide(16, 16, cfg)  # 0.936 >= 0.9: decided
    assert (d.stop, d.reason, d.bucket) == (True, "decided", "solved")
    loose = AdaptiveConfig(adaptive=True, delta=0.2, k_step=4)  # 0.8 is enough: 8 of 8 (0.813) stops, 4 of 4 does not
    assert decide(8, 8, loose).stop and not decide(4, 4, loose).stop
    # a rate on an edge is never decided: it runs to k_max
    d = decide(11, 32, cfg)  # 0.34 observed, mass split between hard and medium
    assert (d.stop, d.reason) == (True, "k_max") and d.bucket in ("hard", "medium")
    assert decide(10, 28, cfg).more == 4 and decide(10, 30, AdaptiveConfig(adaptive=True, delta=0.1, k_max=31)).more == 1
    # with k = 10 the observed buckets are today's fixed-k buckets
    assert [observed_bucket(c, 10) for c in range(11)] == (
        ["unsolved"] + ["hard"] * 3 + ["medium"] * 3 + ["easy"] * 3 + ["solved"])
    assert BUCKETS == ("unsolved", "hard", "medium", "easy", "solved")


def test_resampling_the_ends_after_a_fixed_budget():
    cfg = AdaptiveConfig(resample_ends=True, k_max=16, k_step=4)
    assert next_round(0, 10, 10, cfg)[:2] == (4, "")  # 0 of 10: four more
    assert next_round(0, 14, 10, cfg)[:2] == (2, "")  # up to k_max
    assert next_round(0, 16, 10, cfg)[:2] == (0, "k_max")  # never solved in 16
    assert next_round(1, 14, 10, cfg)[:2] == (0, "left_end")  # rarely solved: one success in 14
    assert next_round(3, 10, 10, cfg)[:2] == (0, "k")  # not at an end: the fixed budget
    assert next_round(3, 4, 10, AdaptiveConfig())[:2] == (6, "")  # fixed k, nothing sequential: the rest of k


def test_bad_sequential_settings_are_refused():
    with pytest.raises(ConfigError, match="k_max .* must be >= k_first"):
        AdaptiveConfig(adaptive=True, k_first=8, k_max=4)
    with pytest.raises(ConfigError, match="delta must be in"):
        AdaptiveConfig(delta=1.5)
    with pytest.raises(ConfigError, match="edges must be 4 increasing"):
        AdaptiveConfig(edges=(0.5, 0.2, 0.7, 0.9))
    with pytest.raises(ConfigError, match=r"resample_ends needs k_max \(8\) above k \(10\)"):
        EstimateConfig(sequential=AdaptiveConfig(resample_ends=True, k_max=8))


@pytest.fixture()
def rates_input(tmp_path):
    """Four problems whose sample j is right by a fixed rule: always, never, every other one, once (sample 5)."""
    src = tmp_path / "in.jsonl"
    rows = [("always", 1), ("never", 2), ("alternate", 3), ("once", 4)]
    src.write_text("".join(f'{{"id": "{n}", "problem": "Problem {n}: compute {v}", "answer": "{v}"}}\n' for n, v in rows))
    ingest(str(src), tmp_path / "ing", adapter="generic")
    return tmp_path / "ing"


def _by_rule(r):
    """Sample j (its index in the problem, from the request's first) is right by the problem's rule."""
    name, gold = r.prompt.split(":")[0].split()[1], r.prompt.split()[-1]
    right = {"always": lambda j: True, "never": lambda j: False, "alternate": lambda j: j % 2 == 0,
             "once": lambda j: j == 5}[name]
    return [f"\\boxed{{{gold}}}" if right(r.first + j) else "\\boxed{-1}" for j in range(r.n or 4)]


def _cfg(tmp_path, seq, k=4):
    return EstimateConfig(model="scripted", backend="vllm", template="none", store=None, model_revision="rev1", chunk_rows=2,
                          sampling=SamplingConfig(k=k, temperature=1.0, max_tokens=16, seed=0), sequential=seq)


def _rows(folder):
    return {r["problem"].split(":")[0].split()[1]: r for r in read_table(folder / "kept").to_pylist()}


def test_adaptive_estimation_draws_in_rounds_until_decided(tmp_path, rates_input):
    cfg = _cfg(tmp_path, AdaptiveConfig(adaptive=True, k_max=24, delta=0.1, k_step=4))
    sampler = ScriptedEngine(cfg.sampling, _by_rule)
    m = estimate([rates_input], tmp_path / "est", cfg, engine=sampler, progress=False)
    rows = _rows(tmp_path / "est")
    # always right: 4, 8, 12 right is not enough (0.892), 16 is (0.936): four rounds, decided solved
    a = rows["always"]
    assert (a["k"], a["n_correct"], a["rounds"], a["stop_reason"]) == (16, 16, 4, "decided")
    assert max(a["bucket_masses"]) == a["bucket_masses"][4] and a["bucket_masses"][4] == pytest.approx(0.936, abs=1e-3)
    assert rows["never"]["k"] == 16 and rows["never"]["bucket_masses"][0] == pytest.approx(0.936, abs=1e-3)
    # every other sample right: 10 of 20 leaves medium short of 0.9; 12 of 24 puts it over (six rounds)
    alt = rows["alternate"]
    assert decide(10, 20, cfg.sequential).masses[2] < 0.9 <= decide(12, 24, cfg.sequential).masses[2]
    assert (alt["k"], alt["n_correct"], alt["stop_reason"], alt["rounds"]) == (24, 12, "decided", 6)
    # once (sample 5): 0 of 4, then 1 of 8 ... 1 of 24 splits its mass between unsolved and hard: k_max
    once = rows["once"]
    assert (once["n_correct"], once["k"], once["stop_reason"]) == (1, 24, "k_max") and once["correct"][5]
    # rounds ask for the next sample indices, so seeds continue where the last round stopped
    firsts = sorted((f, n) for key, f, n in sampler.rounds if key == rows["always"]["id"])
    assert firsts == [(0, 4), (4, 4), (8, 4), (12, 4)]
    assert m.stats["this_run"]["samples"] == 16 + 16 + 24 + 24
    for r in rows.values():
        assert len(r["outcomes"]) == len(r["correct"]) == r["k"] and r["pass_rate"] == pytest.approx(r["n_correct"] / r["k"])
    rel = m.stats["sequential"]["reliability"]  # the card's reliability plot reads this
    assert rel["fitted_on_rows"] == 4 and sum(b["problems"] for b in rel["bins"]) == rel["problems"] == 20_000


def test_fixed_k_with_resampled_ends(tmp_path, rates_input):
    cfg = _cfg(tmp_path, AdaptiveConfig(resample_ends=True, k_max=12, k_step=4), k=4)
    sampler = ScriptedEngine(cfg.sampling, _by_rule)
    m = estimate([rates_input], tmp_path / "est", cfg, engine=sampler, progress=False)
    rows = _rows(tmp_path / "est")
    assert (rows["alternate"]["k"], rows["alternate"]["stop_reason"], rows["alternate"]["rounds"]) == (4, "k", 1)
    assert (rows["never"]["k"], rows["never"]["stop_reason"]) == (12, "k_max")
    assert (rows["always"]["k"], rows["always"]["stop_reason"]) == (12, "k_max")
    # 0 of 4, then sample 5 is right in the second round: rarely solved, not never solved
    once = rows["once"]
    assert (once["k"], once["n_correct"], once["stop_reason"], once["rounds"]) == (8, 1, "left_end", 2)
    assert once["bucket_masses"] is None  # fixed k: no posterior recorded
    seq = m.stats["sequential"]
    assert seq["ends"] == {"base_samples": 4, "none_correct_at_base": 2, "of_them_solved_later": 1,
                           "all_correct_at_base": 1, "of_them_failed_later": 0}
    assert seq["stop_reasons"] == {"k": 1, "k_max": 2, "left_end": 1} and seq["mean_samples"] == (4 + 12 + 12 + 8) / 4
    from data_cards.render import write_card

    card = write_card(tmp_path / "est").read_text()
    assert "(problems at 0 or all correct resampled up to 12): 9.0 samples per problem" in card
    assert "of 2 problems with no correct sample in the first 4, 1 were solved later" in card


def test_fixed_k_rows_are_unchanged_by_the_sequential_code(tmp_path, rates_input):
    cfg = _cfg(tmp_path, AdaptiveConfig(), k=4)
    estimate([rates_input], tmp_path / "est", cfg, engine=ScriptedEngine(cfg.sampling, _by_rule), progress=False)
    rows = _rows(tmp_path / "est")
    assert all(r["k"] == 4 and r["rounds"] is None and r["stop_reason"] is None for r in rows.values())
    assert "sequential" not in cfg.as_dict()  # the stage identity of a fixed-k run is what it was


def test_a_killed_adaptive_run_resumes_to_the_same_rows(tmp_path, rates_input):
    cfg = _cfg(tmp_path, AdaptiveConfig(adaptive=True, k_max=24, delta=0.1, k_step=4))
    full = estimate([rates_input], tmp_path / "full", cfg, engine=ScriptedEngine(cfg.sampling, _by_rule), progress=False)
    with pytest.raises(KeyboardInterrupt):
        estimate([rates_input], tmp_path / "est", cfg, engine=ScriptedEngine(cfg.sampling, _by_rule, fail_after=15),
                 progress=False)
    # killed after 15 of the 20 rounds (chunk 0: 4 + 4, chunk 1: 6 + 6): chunk 1 cannot be finished
    parts = sorted(p.name for p in (tmp_path / "est" / "kept").glob("*.parquet"))
    assert parts in ([], ["part_000000.parquet"]) and not (tmp_path / "est" / "manifest.json").exists()
    again = ScriptedEngine(cfg.sampling, _by_rule)
    m = estimate([rates_input], tmp_path / "est", cfg, engine=again, progress=False)
    assert m.stats["this_run"]["chunks_already_done"] == len(parts) and m.rows_kept == full.rows_kept == 4
    assert len(again.rounds) == 20 - 8 * len(parts)  # a finished chunk is not sampled again
    cols = ["id", "k", "correct", "rounds", "stop_reason", "bucket_masses"]
    a = read_table(tmp_path / "est" / "kept", columns=cols).sort_by("id").to_pylist()
    b = read_table(tmp_path / "full" / "kept", columns=cols).sort_by("id").to_pylist()
    assert a == b



def test_grid_posterior_under_the_jeffreys_grid_is_the_jeffreys_posterior():
    from curate.difficulty.adaptive import grid_masses, jeffreys_on_grid

    prior = jeffreys_on_grid()
    assert prior.sum() == pytest.approx(1.0)
    for c, n in ((0, 4), (2, 4), (4, 4), (3, 10), (0, 12)):
        assert grid_masses(c, n, prior) == pytest.approx(masses(c, n), abs=0.01)


def test_fitted_prior_and_calibration_error_by_hand():
    from curate.difficulty.adaptive import calibration_error, fit_prior, grid_masses

    # 500 problems never solved in 10 and 500 always solved: EM puts the fitted mass (0.9 of the prior) below 0.1 and
    # above 0.9 in halves; the Jeffreys tenth adds (2/pi) asin(sqrt(0.1)) = 0.205 of itself to each end
    w = fit_prior([0] * 500 + [10] * 500, [10] * 1000)
    ends = grid_masses(0, 0, w)  # no samples yet: the prior's own bucket masses
    assert ends[0] == pytest.approx(0.45 + 0.1 * 0.2048, abs=0.01) and ends[4] == pytest.approx(ends[0], abs=1e-6)
    # with that prior, 0 of 4 is decided at once (0.99 unsolved); under Jeffreys it is 0.66, short of 1 - delta = 0.9
    cfg = AdaptiveConfig(adaptive=True, delta=0.1)
    assert decide(0, 4, cfg, w).stop and decide(0, 4, cfg, w).bucket == "unsolved"
    assert not decide(0, 4, cfg).stop
    # two problems given 0.95 (one right): |0.5 - 0.95| = 0.45; two given 0.55, both right: |1 - 0.55| = 0.45
    assert calibration_error([0.95, 0.95, 0.55, 0.55], [1, 0, 1, 1]) == pytest.approx(0.45)
    assert calibration_error([0.8] * 5, [1, 1, 1, 1, 0]) == pytest.approx(0.0)


def test_reliability_check_of_a_run_whose_problems_are_never_solved():
    """200 rows at 0 of 10: the fitted population is almost all at p = 0. Under Jeffreys a problem stops at 0 of 4
    with the mass I_0.1(1/2, 9/2) = 0.657 on "unsolved" (>= 1 - delta = 0.6), and is right far more often than that:
    the masses are not probabilities. Under the prior fitted on the same counts they are."""
    from curate.difficulty.adaptive import fit_prior, reliability_check

    cfg = AdaptiveConfig(adaptive=True)
    jeff = reliability_check([0] * 200, [10] * 200, cfg)
    top = max(jeff["bins"], key=lambda b: b["problems"])
    assert masses(0, 4)[0] == pytest.approx(0.6566, abs=1e-4) and top["bin"] == [0.6, 0.7]
    assert top["problems"] > 19_000 and abs(top["mean_mass"] - masses(0, 4)[0]) < 0.005
    assert top["share_right"] > 0.95 and jeff["ece"] > 0.25
    fitted = reliability_check([0] * 200, [10] * 200, cfg, fit_prior([0] * 200, [10] * 200))
    assert fitted["ece"] < 0.01 and fitted["accuracy"] == pytest.approx(jeff["accuracy"], abs=0.01)


def test_adaptive_estimation_with_the_store_prior(tmp_path):
    # A fixed k=4 run scores 240 problems into the store: half never right, half always. An adaptive run with
    # prior = store then fits its prior on those rows (its own problem "Problem never0" excluded: out of sample) and,
    # under it, 0 of 4 is decided unsolved at once (posterior 0.98), where Jeffreys (0.66 < 0.9) draws 12 more.
    import json

    import numpy as np

    from curate.difficulty.adaptive import fit_prior, grid_masses

    store = tmp_path / "store"
    src = tmp_path / "seen.jsonl"
    src.write_text("".join(f'{{"problem": "Problem {"never" if i % 2 == 0 else "always"}{i}: compute {i}", '
                           f'"answer": "{i}"}}\n' for i in range(240)))
    ingest(str(src), tmp_path / "seen", adapter="generic")
    rule = lambda r: [f"\\boxed{{{r.prompt.split()[-1]}}}" if "always" in r.prompt else "\\boxed{-1}"  # noqa: E731
                      for _ in range(r.n or 4)]
    fixed_cfg = dataclasses.replace(_cfg(tmp_path, AdaptiveConfig()), store=str(store))
    estimate([tmp_path / "seen"], tmp_path / "fixed", fixed_cfg, engine=ScriptedEngine(fixed_cfg.sampling, rule),
             progress=False)
    new = tmp_path / "new.jsonl"
    # "Problem never0" again, its gold written another way: still its own problem, left out of the prior
    new.write_text('{"problem": "Problem never0: compute 0", "answer": "0.0"}\n'
                   '{"problem": "Problem never1000: compute 1000", "answer": "1000"}\n')
    ingest(str(new), tmp_path / "new", adapter="generic")
    for prior, want_k in (("store", 4), ("jeffreys", 16)):
        seq = AdaptiveConfig(adaptive=True, delta=0.1, k_max=16, k_step=4, prior=prior)
        cfg = dataclasses.replace(_cfg(tmp_path, seq), store=str(store))
        m = estimate([tmp_path / "new"], tmp_path / f"est_{prior}", cfg, engine=ScriptedEngine(cfg.sampling, rule),
                     progress=False)
        rows = read_table(tmp_path / f"est_{prior}" / "kept").to_pylist()
        assert [(r["k"], r["stop_reason"]) for r in rows] == [(want_k, "decided")] * 2
        if prior == "store":
            rec = json.loads((tmp_path / f"est_{prior}" / "prior.json").read_text())
            assert rec["kind"] == "store" and rec["rows"] == 239 and len(rec["folders"]) == 1
            want = fit_prior([0] * 119 + [4] * 120, [4] * 239)
            assert np.allclose(rec["weights"], want)
            assert rows[0]["bucket_masses"][0] == pytest.approx(grid_masses(0, 4, want)[0], abs=1e-6)
            assert 0.9 < rows[0]["bucket_masses"][0] < 0.99
            assert m.stats["sequential"]["prior"]["rows"] == 239 and "weights" not in m.stats["sequential"]["prior"]
        else:
            assert m.stats["sequential"]["prior"] == {"kind": "jeffreys"}
    # the prior is the folder's: a resumed run reads it back, a forced one fits it again (and a rerun is not refused)
    seq = AdaptiveConfig(adaptive=True, delta=0.1, k_max=16, k_step=4, prior="store")
    cfg = dataclasses.replace(_cfg(tmp_path, seq), store=str(store))
    again = estimate([tmp_path / "new"], tmp_path / "est_store", cfg, engine=ScriptedEngine(cfg.sampling, rule),
                     progress=False, force=True)
    assert again.stats["sequential"]["prior"]["kind"] == "store"


def test_an_adaptive_round_that_times_out_is_graded_again_before_the_rule_sees_it(tmp_path):
    # The first round's 4 samples take math-verify about 2.3 s to parse (an expanded 8th power, right): at a 1 s
    # timeout they time out, and the rule would read 0 of 4. Graded again at once (6 x 1 s, one at a time), they are
    # 4 of 4 before the rule decides, so the row's counts, masses and stopping reason agree.
    import sympy

    x, y, z, w = sympy.symbols("x y z w")
    slow = r"so \boxed{" + sympy.latex(sympy.expand((x + y + z + w) ** 8)) + "}"
    src = tmp_path / "in.jsonl"
    src.write_text('{"problem": "Problem always: expand (x+y+z+w)^8.", "answer": "(x+y+z+w)^{8}"}\n')
    ingest(str(src), tmp_path / "ing", adapter="generic")
    cfg = dataclasses.replace(_cfg(tmp_path, AdaptiveConfig(adaptive=True, delta=0.4, k_max=8)), grader_timeout_s=1,
                              grader_workers=1)
    m = estimate([tmp_path / "ing"], tmp_path / "est", cfg,
                 engine=ScriptedEngine(cfg.sampling, lambda r: [slow] * (r.n or 4)), progress=False)
    row = read_table(tmp_path / "est" / "kept").to_pylist()[0]
    assert row["n_correct"] == row["k"] and row["outcomes"] == ["correct"] * row["k"]
    assert row["bucket_masses"] == pytest.approx(list(decide(row["k"], row["k"], cfg.sequential).masses), abs=1e-6)
    assert m.stats["this_run"]["grading"]["regraded"] >= 1


def test_resample_ends_is_part_of_the_simulated_rule_and_the_card_says_when_masses_are_not_probabilities():
    from curate.difficulty.adaptive import AdaptiveConfig, decide, rule_tables
    from data_cards.render import reliability_sentence

    cfg = AdaptiveConfig(adaptive=True, delta=0.4, resample_ends=True)
    plain = AdaptiveConfig(adaptive=True, delta=0.4)
    assert decide(0, 8, cfg).stop  # 0 of 8: decided unsolved ...
    stop, _, _ = rule_tables(cfg)
    stop_plain, _, _ = rule_tables(plain)
    assert stop_plain[0, 8] and not stop[0, 8]  # ... but resample_ends draws on until a success or k_max
    assert stop[0, cfg.k_max] and stop[1, 8] == stop_plain[1, 8]  # k_max ends it; off the end the rule is the same
    rel = {"problems": 20000, "fitted_on_rows": 300, "accuracy": 0.7, "ece": 0.08}
    assert "masses, not probabilities; `--prior store`" in reliability_sentence(rel, "jeffreys")
    assert reliability_sentence(rel, "store").endswith("they are masses, not probabilities.")
    assert "not probabilities" not in reliability_sentence({**rel, "ece": 0.03}, "store")


def test_the_prior_lock_is_never_written_through_a_link(tmp_path):
    from curate.core.errors import GradusError
    from curate.pipeline import ingest

    src = tmp_path / "in.jsonl"
    src.write_text('{"problem": "Problem a: compute 1", "answer": "1"}\n')
    ingest(str(src), tmp_path / "in", adapter="generic")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    cfg = _cfg(tmp_path, AdaptiveConfig(adaptive=True, delta=0.1, k_max=8, k_step=4, prior="store"))
    cfg = dataclasses.replace(cfg, store=str(tmp_path / "store"))
    rule = lambda r: ["\\boxed{1}"] * (r.n or 4)  # noqa: E731
    estimate([tmp_path / "in"], tmp_path / "est", cfg, engine=ScriptedEngine(cfg.sampling, rule), progress=False)
    (tmp_path / "est" / ".prior.lock").unlink()
    (tmp_path / "est" / ".prior.lock").symlink_to(victim)
    with pytest.raises(GradusError, match="prior.lock"):  # the folder's check names it; the lock's own open refuses too
        estimate([tmp_path / "in"], tmp_path / "est", cfg, engine=ScriptedEngine(cfg.sampling, rule), progress=False,
                 force=True)
    assert victim.read_text() == "precious\n"
