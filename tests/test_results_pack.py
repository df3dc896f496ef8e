"""benchmarks/learn.py --pack: kept runs into one Parquet file and back, byte for byte; the report reads both."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _learn():
    spec = importlib.util.spec_from_file_location("learn", ROOT / "benchmarks" / "learn.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(folder: Path, name: str, steps: int) -> dict[str, str]:
    (folder / name).mkdir(parents=True)
    files = {"metrics.jsonl": "".join(json.dumps({"step": i, "completions_total": 32 * i}) + "\n" for i in range(1, steps + 1)),
             "eval.jsonl": "".join(json.dumps({"step": i, "id": f"p{i}", "mean@4": i / 4}) + "\n" for i in range(steps)),
             "config.json": json.dumps({"seed": 1}, indent=2)}  # no newline at its end: kept as it is
    for f, text in files.items():
        (folder / name / f).write_text(text)
    return files


def test_runs_packed_read_back_exactly_and_a_later_run_beside_them(tmp_path):
    learn = _learn()
    fam = tmp_path / "rg"
    a = _run(fam, "uniform_0", 3)
    b = _run(fam, "signal_screen_1", 2)
    before = learn.load_runs(fam)
    assert learn.pack(fam) == 2
    assert sorted(p.name for p in fam.iterdir()) == ["runs.parquet"]  # the run folders went, nothing else
    assert learn.load_runs(fam) == before
    c = _run(fam, "signal_0", 1)  # a run kept after the packing: read beside the packed ones, then packed too
    assert [(r["arm"], r["seed"]) for r in learn.load_runs(fam)] == [("signal", 0), ("signal_screen", 1), ("uniform", 0)]
    assert learn.pack(fam) == 1
    learn.unpack(fam, tmp_path / "back")
    for name, files in (("uniform_0", a), ("signal_screen_1", b), ("signal_0", c)):
        assert {f: (tmp_path / "back" / name / f).read_text() for f in files} == files


def test_a_run_folder_with_a_file_of_its_own_is_left_alone(tmp_path):
    learn = _learn()
    fam = tmp_path / "rg"
    _run(fam, "uniform_0", 2)
    (fam / "uniform_0" / "notes.txt").write_text("mine")
    with pytest.raises(RuntimeError, match="holds notes.txt, not a run kept by this script; nothing packed"):
        learn.pack(fam)
    assert sorted(p.name for p in (fam / "uniform_0").iterdir()) == ["config.json", "eval.jsonl", "metrics.jsonl", "notes.txt"]
    assert not (fam / "runs.parquet").exists()


def test_a_failed_run_fails_the_command_after_the_others(tmp_path, capsys):
    """A driver that runs learn.py seed after seed must not count a failed run as done (a full disk once did that)."""
    import argparse

    learn = _learn()
    (tmp_path / "runs" / "signal_0").mkdir(parents=True)
    (tmp_path / "runs" / "signal_0" / "DONE").write_text("")  # done before: not run again
    a = argparse.Namespace(family="rg", seeds="0", arms="uniform,signal", jobs=1, budget=64, evals=2, max_tokens=16, save_every=4,
                           keep=str(tmp_path / "kept"))
    with pytest.raises(SystemExit) as e:  # no sets.json: the uniform run fails in its own process
        learn.run_all(a, tmp_path)
    assert str(e.value).startswith("1 of 1 runs failed: uniform_0")
    assert "uniform seed 0: FAILED (exit 1" in capsys.readouterr().out
    assert "FileNotFoundError" in (tmp_path / "runs" / "uniform_0.log").read_text()
    assert not (tmp_path / "kept").exists()  # nothing kept from a failed run


def test_runs_kept_before_are_not_run_again(tmp_path, capsys):
    """On a new machine the working folder is empty, but the runs already kept (a folder, or packed into
    runs.parquet) are done: only the run kept nowhere is started (and fails here, in its own process)."""
    import argparse

    learn = _learn()
    kept = tmp_path / "kept"
    _run(kept / "rg", "uniform_0", 2)
    learn.pack(kept / "rg")
    _run(kept / "rg", "signal_0", 1)
    (kept / "rg" / "signal_1").mkdir()  # a folder without eval.jsonl was not kept by learn.py: the run is not done
    a = argparse.Namespace(family="rg", seeds="0,1", arms="uniform,signal", jobs=1, budget=64, evals=2, max_tokens=16,
                           save_every=4, keep=str(kept))
    (tmp_path / "runs" / "uniform_1").mkdir(parents=True)
    (tmp_path / "runs" / "uniform_1" / "DONE").write_text("")
    with pytest.raises(SystemExit) as e:
        learn.run_all(a, tmp_path)
    assert str(e.value).startswith("1 of 1 runs failed: signal_1")
    out = capsys.readouterr().out
    assert f"uniform seed 0: kept before in {kept / 'rg'}, not run again" in out
    assert f"signal seed 0: kept before in {kept / 'rg'}, not run again" in out
    assert "signal seed 1: FAILED" in out
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["signal_1.log", "uniform_1"]  # nothing of runs 0


def test_every_run_kept_before_prepares_nothing(tmp_path, monkeypatch, capsys):
    """The command of a landed A/B, run again on a new machine: no pool prepared (minutes of estimation), no run."""
    import sys

    learn = _learn()
    kept = tmp_path / "kept"
    for name in ("uniform_2", "signal_2"):
        _run(kept / "ladder", name, 1)
    args = ["learn.py", "--family", "ladder", "--data", str(tmp_path / "pool"), "--seeds", "2", "--arms", "uniform,signal",
            "--keep", str(kept)]
    monkeypatch.setattr(sys, "argv", args)
    learn.main()
    assert f"every run asked for is kept before in {kept / 'ladder'}: nothing to prepare or run" in capsys.readouterr().out
    assert not (tmp_path / "pool").exists()


def test_waste_by_half_of_the_budget():
    """Budget 64, so the halves split at 32 completions: steps of 16, 24 (it starts at 16: first half), 16 (starts at
    40: second half, skipped: no group trained) and 8. First half 40 completions for 2 + 3 groups, the rest 24 for 1."""
    learn = _learn()
    steps = [{"completions": 16, "completions_total": 16, "groups": 2},
             {"completions": 24, "completions_total": 40, "groups": 3},
             {"completions": 16, "completions_total": 56, "groups": 2, "skipped": True},
             {"completions": 8, "completions_total": 64, "groups": 1}]
    assert learn.halves(steps, 64) == [[40, 5], [24, 1]]


def test_completions_to_a_figure_average_the_seeds_at_equal_completions():
    """Seed A evaluated at 0, 200, 400 completions and seed B at 0, 180, 390: the average at 180 takes A's value
    there on its line (0.2 + 0.9 * 0.1 = 0.29) with B's 0.4, so 0.345; a target of 0.34 is reached at
    180 * 0.14 / 0.145 = 173.8. An arm's own final at exactly the budget is reached at the budget."""
    learn = _learn()
    pts = [(0, "A", 0.2), (200, "A", 0.3), (400, "A", 0.5), (0, "B", 0.2), (180, "B", 0.4), (390, "B", 0.4)]
    assert learn._reach(pts, 0.34) == 174
    assert learn._reach(pts, 0.35) == 200
    final = (0.3 + 184 / 200 * 0.2 + 0.4) / 2  # each seed at exactly 384 completions
    assert learn._reach(pts, final) == 384
    assert learn._reach(pts, 0.6) is None
