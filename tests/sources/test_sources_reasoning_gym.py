"""The reasoning_gym: source (curate.sources.reasoning_gym): procedural tasks of the reasoning-gym package through
``gradus ingest``, deterministic, with clear errors for a bad spec."""

from __future__ import annotations

import pytest

from curate.core.errors import SourceError
from curate.core.shards import read_table
from curate.pipeline import ingest
from curate.sources.reasoning_gym import parse_spec

pytest.importorskip("reasoning_gym")

SPEC = "reasoning_gym:task=chain_sum,n=6,seed=40,min_terms=2,max_terms=2,min_digits=1,max_digits=1,level=1"


def test_options_split_into_ours_and_the_tasks():
    ours, theirs = parse_spec("reasoning_gym:task=basic_arithmetic,n=3,seed=7,operators=+|-,allow_negation=false,level=2")
    assert ours == {"task": "basic_arithmetic", "n": 3, "seed": 7, "level": "2"}
    assert theirs == {"operators": ("+", "-"), "allow_negation": False}
    with pytest.raises(SourceError, match="name the task"):
        parse_spec("reasoning_gym:n=3")
    with pytest.raises(SourceError, match="n must be >= 1"):
        parse_spec("reasoning_gym:task=chain_sum,n=0")


def test_a_task_is_ingested_as_rows_with_exact_answers_the_same_every_time(tmp_path):
    m = ingest(SPEC, tmp_path / "a", source_name="rg")
    assert (m.rows_in, m.rows_kept, m.stats["adapter"]) == (6, 6, "reasoning_gym")
    rows = read_table(tmp_path / "a" / "kept").to_pylist()
    for r in rows:  # "State the final answer to the following arithmetic problem: 4 + 6 ="
        expr = r["problem"].rsplit(":", 1)[1].strip().rstrip("=").strip()
        assert str(eval(expr)) == r["answer"]
        assert (r["source"], r["level"], r["subject"]) == ("rg", "1", "chain_sum")
    assert sorted(r["source_id"] for r in rows) == [f"rg-chain_sum-{i}" for i in range(40, 46)]
    ingest(SPEC, tmp_path / "b", source_name="rg")
    assert read_table(tmp_path / "b" / "kept").to_pylist() == rows


def test_a_bad_task_or_setting_is_one_line(tmp_path):
    with pytest.raises(SourceError, match="no task 'chain_summ'; did you mean 'chain_sum'"):
        ingest("reasoning_gym:task=chain_summ,n=2", tmp_path / "x")
    with pytest.raises(SourceError, match="refused the settings of 'chain_sum'.*bogus"):
        ingest("reasoning_gym:task=chain_sum,n=2,bogus=1", tmp_path / "y")
