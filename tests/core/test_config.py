"""Configs defined once: names and types checked with a suggestion, paths relative to the config file, CLI options
derived from the fields."""

from __future__ import annotations

import json

import pytest

from curate.clean.dedup import DedupConfig
from curate.core.config import ConfigError, field_help, from_dict
from curate.difficulty.estimate import EstimateConfig
from curate.pipeline import CurateConfig
from flows.cli import build_parser, main


def test_typo_inside_a_section_names_the_key_and_suggests():
    with pytest.raises(ConfigError, match=r"dedup: unknown setting 'treshold' \(did you mean 'threshold'\?\)"):
        CurateConfig.from_dict({"sources": ["synthetic"], "dedup": {"treshold": 0.9}})
    with pytest.raises(ConfigError, match=r"unknown setting 'filterz' \(did you mean 'filters'\?\)"):
        CurateConfig.from_dict({"sources": ["synthetic"], "filterz": {}})


def test_types_are_checked_not_crashed_on():
    with pytest.raises(ConfigError, match=r"dedup.threshold: expected a number, got '0.8'"):
        CurateConfig.from_dict({"sources": ["synthetic"], "dedup": {"threshold": "0.8"}})
    with pytest.raises(ConfigError, match=r"ngram: expected an integer, got True"):
        from_dict(DedupConfig, {"ngram": True})
    with pytest.raises(ConfigError, match=r"backend: 'tgi' is not one of vllm, hf, openai"):
        from_dict(EstimateConfig, {"backend": "tgi"})
    cfg = from_dict(EstimateConfig, {"sampling": {"k": 4, "temperature": 1}})
    assert cfg.sampling.k == 4 and cfg.sampling.temperature == 1.0
    assert from_dict(DedupConfig, {"source_priority": ["a", "b"]}).source_priority == ("a", "b")


def test_paths_in_a_config_file_are_relative_to_it(tmp_path):
    (tmp_path / "cfgs" / "data").mkdir(parents=True)
    (tmp_path / "cfgs" / "data" / "x.jsonl").write_text('{"problem": "1+1?", "answer": "2"}\n')
    (tmp_path / "cfgs" / "evals.jsonl").write_text('{"problem": "2+2?", "answer": "4"}\n')
    p = tmp_path / "cfgs" / "c.json"
    p.write_text(json.dumps({"sources": ["data/x.jsonl", "synthetic:n=5,seed=1", {"spec": "owner/name", "name": "hub"}],
                             "decontam": {"benchmarks": ["mine=evals.jsonl"]}}))
    cfg = CurateConfig.load(p)
    assert cfg.sources[0].spec == str(tmp_path / "cfgs" / "data" / "x.jsonl")
    assert cfg.sources[1].spec == "synthetic:n=5,seed=1" and cfg.sources[2].spec == "owner/name"
    assert cfg.decontam.benchmarks == (f"mine={tmp_path / 'cfgs' / 'evals.jsonl'}",)


def test_problems_are_found_before_any_stage_runs(tmp_path, capsys):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"sources": ["synthetic:n=5"], "decontam": {"benchmarks": ["mine=missing.jsonl"]}}))
    assert main(["curate", str(p), "--out", str(tmp_path / "o")]) == 2
    assert "missing.jsonl: no such file" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # nothing ran
    p.write_text(json.dumps({"sources": ["synthetic:n=5"]}))
    assert main(["curate", str(p), "--out", str(tmp_path / "o"), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "ingest synthetic:n=5 (synthetic)" in out and not (tmp_path / "o").exists()


def test_cli_options_come_from_the_config_fields():
    p = build_parser()
    a = p.parse_args(["dedup", "x", "--out", "y", "--threshold", "0.9", "--no-near"])
    assert (a.threshold, a.near) == (0.9, False) and not hasattr(a, "ngram")  # not given: the field's default
    a = p.parse_args(["ingest", "f.csv", "--out", "y", "--map", "problem=q"])
    assert a.mapping == "problem=q"  # the config key's name; --map stays as an alias
    a = p.parse_args(["estimate", "x", "--out", "y", "--k", "4", "--revision", "abc", "--max-tokens", "64"])
    assert (a.k, a.model_revision, a.max_tokens) == (4, "abc", 64)
    assert "Kimi k1.5 uses ten" in field_help(type(EstimateConfig().sampling))["k"]
    with pytest.raises(SystemExit):
        p.parse_args(["export", "x", "--out", "y", "--total", "many"])


def test_names_are_not_rebased_as_paths(tmp_path):
    from curate.core.config import _rebase

    (tmp_path / "evals.jsonl").write_text("{}\n")
    assert _rebase("aime24", tmp_path) == "aime24"
    assert _rebase("gsm8k", tmp_path) == "gsm8k" and _rebase("owner/name", tmp_path) == "owner/name"
    assert _rebase("mine=evals.jsonl", tmp_path) == f"mine={tmp_path / 'evals.jsonl'}"
    assert _rebase("./later.jsonl", tmp_path) == str(tmp_path / "later.jsonl")
    assert _rebase("synthetic:n=5", tmp_path) == "synthetic:n=5"


def test_train_overrides_on_the_command_line_are_relative_to_the_cwd(tmp_path):
    from rl_stage.trainer import TrainConfig

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "exp").mkdir()
    p = tmp_path / "cfg" / "t.json"
    p.write_text(json.dumps({"data": ["exp"], "steps": 3}))
    assert TrainConfig.load(p).data == [str(tmp_path / "cfg" / "exp")]
    assert TrainConfig.load(p, data=["runs/x"], steps=None).data == ["runs/x"]
