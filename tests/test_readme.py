"""The README's quickstart, command by command, as a user types it: it cannot rot without this test failing."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from flows.cli import main

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.engine


def _quickstart() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [shlex.split(line) for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_quickstart_runs_as_written(tmp_path, monkeypatch, capsys):
    pytest.importorskip("vllm")
    from curate.sources.synthetic import generate

    monkeypatch.chdir(tmp_path)
    rows = [{"problem": r["problem"], "answer": r["answer"]} for r in generate(40, seed=5, difficulty=(1, 1), mix="ladder")]
    Path("my_problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    commands = _quickstart()
    assert [c[:2] for c in commands] == [["gradus", "ingest"], ["gradus", "filter"], ["gradus", "dedup"],
                                         ["gradus", "estimate"], ["gradus", "export"], ["gradus", "train"],
                                         ["gradus", "show"]]
    for cmd in commands:
        assert main(cmd[1:]) == 0, " ".join(cmd)
    cap = capsys.readouterr()
    out = cap.out
    assert "a training run (dapo, sampler signal, template fewshot), 2 steps of 2" in out
    # what a step trains, said as a fact, not a warning: dapo's 16 mini-batches are at most one per group
    assert "2 groups of 4 a step, 2 optimizer updates each (the preset's 16 mini-batches, at most one group each)" in out
    assert "WARNING" not in cap.err and "% of completions in trained groups" in out
    assert "pass rates by offline bucket" in out
    assert (tmp_path / "runs" / "my" / "train" / "plots" / "training.png").is_file()
