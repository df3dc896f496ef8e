"""Suspect gold answers: MATH-500 rows whose gold was deliberately changed are flagged when a clear majority of
samples agree on the real answer; untouched rows are not; exports can leave the flagged rows out. A scripted
sampler answers (pure logic); the rows and their answers are real."""

from __future__ import annotations

import json

import pytest
from test_estimate import ScriptedEngine

from curate.core.shards import read_table
from curate.difficulty.engines import SamplingConfig
from curate.difficulty.estimate import EstimateConfig, estimate
from curate.pipeline import ingest
from curate.select.export import ExportConfig, export

pytestmark = pytest.mark.realdata


def test_changed_golds_are_flagged_by_the_samples_consensus(real_data, tmp_path):
    rows = [json.loads(line) for line in (real_data / "math500" / "test.jsonl").read_text().splitlines()]
    picked = [r for r in rows if r["answer"] == "\\frac{1}{2}"][:1] + [r for r in rows if r["answer"].isdigit()][:5]
    assert len(picked) == 6
    truth = {r["problem"]: r["answer"] for r in picked}
    changed = {r["problem"] for r in picked[:3]}  # the fraction and two integers get a wrong gold
    src = tmp_path / "m500.jsonl"
    src.write_text("".join(json.dumps({**r, "answer": "999" if r["problem"] in changed else r["answer"]}) + "\n"
                           for r in picked))
    ingest(str(src), tmp_path / "in", adapter="math500")

    def answer(r):
        # six samples: four give the real answer (the fraction spelled two ways), two give noise
        real = truth[r.prompt]
        spellings = ["0.5", "\\frac12", "\\dfrac{1}{2}", "1/2"] if real == "\\frac{1}{2}" else [real] * 4
        return [f"The answer is \\boxed{{{a}}}." for a in spellings] + ["\\boxed{7}", "no idea"]

    cfg = EstimateConfig(model="scripted", backend="vllm", template="none", store=None, model_revision="r", chunk_rows=4,
                         sampling=SamplingConfig(k=6, temperature=1.0, max_tokens=16, seed=0))
    m = estimate([tmp_path / "in"], tmp_path / "est", cfg, engine=ScriptedEngine(cfg.sampling, answer), progress=False)
    got = {r["problem"]: r for r in read_table(tmp_path / "est" / "kept").to_pylist()}
    for prob, r in got.items():
        if prob in changed:
            assert (r["n_correct"], r["suspect_gold"], r["consensus_count"]) == (0, True, 4), r["answer"]
            # the consensus is the real answer (math-verify groups 0.5, \frac12, \dfrac{1}{2}, 1/2 as one)
            assert r["consensus_answer"] in ("0.5", "\\frac12", "\\dfrac{1}{2}", "1/2", truth[prob])
        else:
            assert (r["n_correct"], r["suspect_gold"], r["consensus_answer"]) == (4, False, None)
        assert r["answers"][4:] == ["7", None]  # the per-sample final answers are kept; no box, no answer
    assert m.stats["suspect_gold"] == 3
    # the three rows with their own gold have 4 correct of 6, one answer (4 >= max(3, 6/2)): a wrong gold is caught
    assert m.stats["suspect_gold_check"] == {"rows_with_a_correct_sample": 3, "rows_checked": 3, "caught_if_gold_wrong": 3,
                                             "recall": 1.0}

    kept_all = export([tmp_path / "est"], tmp_path / "all", ExportConfig(include_ends=True))
    dropped = export([tmp_path / "est"], tmp_path / "drop", ExportConfig(include_ends=True, drop_suspect_gold=True))
    assert kept_all.rows_kept == 6 and dropped.rows_kept == 3
    assert dropped.rejected_by_reason.get("suspect_gold") == 3
    ids = {r["problem"] for r in read_table(tmp_path / "drop" / "data").to_pylist()}
    assert ids == set(truth) - changed


def test_a_split_vote_or_too_few_is_not_a_consensus(real_data, tmp_path):
    from curate.difficulty.grading import GradingPool
    from curate.difficulty.suspect import consensus

    with GradingPool(1) as pool:
        # 2 of 4 agree: under the minimum of 3
        assert not consensus(pool, ["5", "5", "6", None], ["wrong"] * 4)["suspect_gold"]
        # 3 of 8 agree: under half
        assert not consensus(pool, ["5", "5", "5", "6", "7", "8", "9", None], ["wrong"] * 8)["suspect_gold"]
        # 4 of 8 agree (half) as math-verify reads them: a consensus
        c = consensus(pool, ["0.25", "\\frac14", "1/4", "\\frac{1}{4}", "7", "8", None, None], ["wrong"] * 6 + ["no_answer"] * 2)
        assert (c["suspect_gold"], c["consensus_count"]) == (True, 4)
        # answers graded correct never count against the gold
        assert not consensus(pool, ["5"] * 6, ["correct"] * 6)["suspect_gold"]
        # one sample reached the gold: 5 agreeing wrong answers of 6 are the model's slip, not a wrong gold
        assert not consensus(pool, ["12", "13", "13", "13", "13", "13"], ["correct"] + ["wrong"] * 5)["suspect_gold"]
        assert consensus(pool, ["11", "13", "13", "13", "13", "13"], ["wrong"] * 6)["suspect_gold"]


def test_recall_on_a_runs_own_samples(real_data, tmp_path):
    """Each row with a correct sample, its correct samples read as wrong: flagged when one answer then holds at least
    max(3, half) of the samples."""
    from curate.difficulty.grading import GradingPool
    from curate.difficulty.suspect import suspect_recall

    rows = [  # (answers, outcomes)
        (["7"] * 6 + ["1", "12", None, None], ["correct"] * 6 + ["wrong"] * 2 + ["no_answer"] * 2),  # 6 >= 5: caught
        (["19", "0", "29", None, "65", "16", "3", None, "2", "4"],
         ["correct"] + ["wrong"] * 2 + ["no_answer"] + ["wrong"] * 3 + ["no_answer"] + ["wrong"] * 2),  # 1 < 5
        (["5", "5", "5", "5", "5.0", "6", None, None, None, None],
         ["correct"] * 4 + ["wrong", "wrong"] + ["no_answer"] * 4),  # 5 and 5.0 are one answer: 5 >= 5, caught
        (["3"] * 10, ["wrong"] * 10),  # no correct sample: not counted (its own gold already flags it)
        (["2", "2", "2", "8", "8", "8", "8", None], ["correct"] * 3 + ["wrong"] * 4 + ["no_answer"]),  # 4 >= 4: caught
    ]
    with GradingPool(1) as pool:
        got = suspect_recall(pool, [a for a, _ in rows], [o for _, o in rows])
    assert got == {"rows_with_a_correct_sample": 4, "rows_checked": 4, "caught_if_gold_wrong": 3, "recall": 0.75}
    # read at most ``limit`` of them, evenly spread: rows 0 and 2 of the four (both caught)
    with GradingPool(1) as pool:
        assert suspect_recall(pool, [a for a, _ in rows], [o for _, o in rows], limit=2) == {
            "rows_with_a_correct_sample": 4, "rows_checked": 2, "caught_if_gold_wrong": 2, "recall": 1.0}
    with GradingPool(1) as pool:  # a run with no rows (what an empty estimate reports): nothing checked, no recall
        assert suspect_recall(pool, [], []) == {"rows_with_a_correct_sample": 0, "rows_checked": 0,
                                                "caught_if_gold_wrong": 0, "recall": None}
        assert pool._workers == []  # and no grader process started


def test_the_card_lists_suspect_golds(real_data, tmp_path):
    test_changed_golds_are_flagged_by_the_samples_consensus(real_data, tmp_path)
    from data_cards.render import write_card

    text = write_card(tmp_path / "est").read_text()
    assert "**Suspect gold answers.** On 3 rows" in text and "| math500 " in text and "4 of 6" in text
    assert "caught it on 3 of the 3 rows with a correct sample (100%" in text
