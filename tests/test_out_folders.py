"""gradus writes only into folders that are empty or its own, never deletes a file it did not write, and lets one
writer at a time into a folder: stages, the trainer, the flow. Each case is one a careless user met (issue 45)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict

import pytest

from curate.core.runner import StageError
from curate.pipeline import ingest
from flows.cli import main


def test_a_users_file_inside_a_stage_folder_is_refused_and_left_where_it_is(tmp_path, capsys):
    out = tmp_path / "ing"
    ingest("synthetic:n=20", out)
    mine = out / "kept" / "user_extra.parquet"
    mine.write_bytes((out / "kept" / "shard_00000.parquet").read_bytes())
    theirs = out / "rejected"
    theirs.mkdir(exist_ok=True)
    (theirs / "keepme.parquet").write_bytes(b"not a shard")
    for force in (False, True):
        with pytest.raises(StageError, match=r"holds files gradus did not write \(kept/user_extra.parquet, "
                                             r"rejected/keepme.parquet\)"):
            ingest("synthetic:n=20", out, force=force)
    assert mine.is_file() and (theirs / "keepme.parquet").is_file()
    assert main(["ingest", "synthetic:n=21", "--out", str(out)]) == 2
    assert "kept/user_extra.parquet" in capsys.readouterr().err and mine.is_file()


def test_two_stage_commands_on_one_folder_one_refuses_naming_the_holder(tmp_path):
    out = tmp_path / "busy"
    cmd = [sys.executable, "-m", "flows.cli", "ingest", "synthetic:n=400000", "--out", str(out)]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(600):  # until the first one holds the folder
        if (out / ".gradus-stage.lock").exists() and (out / ".gradus-stage.lock").stat().st_size:
            break
        time.sleep(0.05)
    second = subprocess.run(cmd, capture_output=True, text=True)
    assert first.wait(timeout=300) == 0
    assert second.returncode == 2
    assert f"is in use by pid {first.pid}" in second.stderr and "(gradus ingest)" in second.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["rows_kept"] == 400_023  # the first run's output is whole
    assert main(["filter", str(out), "--out", str(tmp_path / "f")]) == 0  # and reads


def _train_cfg(tmp_path, **kw):
    from rl_stage.trainer import TrainConfig

    return TrainConfig(data=[str(tmp_path / "data")], out=str(tmp_path / "run"), **kw)


def test_the_trainer_refuses_a_users_folder_and_a_resume_with_other_settings(tmp_path):
    from rl_stage import run_folder
    from rl_stage.run_folder import RunFolderError

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".bashrc").write_text("alias ll='ls -l'\n")
    with pytest.raises(RunFolderError, match=r"holds files gradus did not write \(.bashrc, .ssh\)"):
        run_folder.check(home, resume=False)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"my": "settings"}')
    (mine / "metrics.jsonl").write_text('{"acc": 1}\n')
    for resume in (False, True):  # following the old hint (--resume) no longer overwrites them
        with pytest.raises(RunFolderError, match="holds files gradus did not write"):
            run_folder.check(mine, resume=resume)
    died = tmp_path / "died"  # a run that took its lock and died before its marker (the disk was full)
    died.mkdir()
    (died / run_folder.LOCK).write_text("")
    run_folder.check(died, resume=False)
    run_folder.claim(died).release()
    assert sorted(e.name for e in died.iterdir()) == sorted([run_folder.LOCK, run_folder.RUN_MARKER])
    (died / run_folder.RUN_MARKER).unlink()
    (died / "notes.txt").write_text("mine")
    with pytest.raises(RunFolderError, match=r"holds files gradus did not write \(notes.txt\)"):
        run_folder.check(died, resume=False)  # beside a lock file, a user's file is still refused
    from curate.core.errors import LinkRefused

    linked = tmp_path / "linked"  # a link where the lock goes: refused by name, its target untouched
    linked.mkdir()
    (tmp_path / "victim.txt").write_text("precious\n")
    (linked / run_folder.LOCK).symlink_to(tmp_path / "victim.txt")
    run_folder.check(linked, resume=False)
    with pytest.raises(LinkRefused, match=r"\.gradus-train\.lock is a symbolic link"):
        run_folder.claim(linked)
    assert (tmp_path / "victim.txt").read_text() == "precious\n"
    assert sorted(e.name for e in linked.iterdir()) == [run_folder.LOCK]
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "empty", target_is_directory=True)
    with pytest.raises(RunFolderError, match="is a file or a link"):
        run_folder.check(link, resume=False)
    # a run's own folder: resuming with another lr or group size is refused; more steps are fine
    run = tmp_path / "run"
    cfg = _train_cfg(tmp_path, lr=1e-5, group_size=8, steps=4)
    run_folder.claim(run).release()
    (run / "config.json").write_text(json.dumps({**asdict(cfg), "resolved": {}}, default=str))
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(RunFolderError, match="already holds a run: use --resume"):
        run_folder.check(run, resume=False)
    run_folder.check(run, resume=True)
    other = asdict(_train_cfg(tmp_path, lr=2e-5, group_size=4, steps=8))
    assert run_folder.changed(run, other) == ["group_size 8 -> 4", "lr 1e-05 -> 2e-05"]
    assert run_folder.changed(run, asdict(_train_cfg(tmp_path, lr=1e-5, group_size=8, steps=8))) == []
    (run / "notes.txt").write_text("mine")
    with pytest.raises(RunFolderError, match=r"also holds files gradus did not write \(notes.txt\)"):
        run_folder.check(run, resume=True)


def test_the_trainer_folder_is_held_by_one_run(tmp_path):
    from rl_stage import run_folder
    from rl_stage.run_folder import RunFolderError

    lock = run_folder.claim(tmp_path / "run")
    code = ("from rl_stage import run_folder; import sys\n"
            f"try:\n    run_folder.claim(__import__('pathlib').Path({str(tmp_path / 'run')!r}))\n"
            "except run_folder.RunFolderError as e:\n    print(e); sys.exit(3)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 3 and "in use by pid" in p.stdout and "(gradus train)" in p.stdout
    lock.release()
    assert isinstance(RunFolderError("x"), Exception)


def test_vllm_starts_in_a_process_that_loaded_numba():
    """A served flow dedups (numba loads llvmlite) and then estimates in the same process: vLLM's start calls vars() on
    every module's objects, and llvmlite's library object answered with a function wrapper, failing every run."""
    pytest.importorskip("vllm")
    code = ("import numba, llvmlite.binding.ffi  # what dedup's kernels load\n"
            "from curate.difficulty.engines import SamplingConfig, VLLMEngine\n"
            "from curate.difficulty.models import resolve_model\n"
            "path, name = resolve_model(None)\n"
            "s = VLLMEngine(path, SamplingConfig(k=1, max_tokens=4, temperature=0.0), model_name=name)\n"
            "print('started', s.model_name)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "started" in p.stdout


@pytest.mark.engine
def test_a_run_killed_before_its_first_checkpoint_resumes_from_step_0_with_clean_logs(tmp_path):
    pytest.importorskip("transformers")
    from conftest import write_easy_sums

    from curate.select.export import ExportConfig, export
    from rl_stage.trainer import TrainConfig, Trainer

    export([write_easy_sums(tmp_path / "scored")], tmp_path / "data", ExportConfig())
    cfg = TrainConfig(data=[str(tmp_path / "data")], out=str(tmp_path / "run"), rollout_backend="hf", preset="dr_grpo",
                      prompts_per_step=2, group_size=2, max_tokens=8, steps=2, save_every=10, seed=1)
    Trainer(cfg).run(stop_after=1, progress=False)
    import shutil

    shutil.rmtree(tmp_path / "run" / "checkpoints")  # as if killed after step 1, before its checkpoint landed
    Trainer(cfg, resume=True).run(progress=False)
    steps = [json.loads(x)["step"] for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # step 1 once, not twice


@pytest.fixture()
def small_disk(tmp_path):
    """A 600 KB tmpfs (root only; skipped where mounting is not allowed)."""
    where = tmp_path / "disk"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "none", str(where)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    yield where
    subprocess.run(["umount", str(where)], capture_output=True)


def test_a_full_disk_and_a_read_only_folder_are_one_line_and_leave_nothing_half_written(tmp_path, small_disk, capsys):
    assert main(["ingest", "synthetic:n=400000", "--out", str(small_disk / "o")]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert not (small_disk / "o" / "manifest.json").exists() and not list((small_disk / "o").rglob("*.parquet*"))
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    assert main(["ingest", "synthetic:n=20", "--out", str(small_disk / "p")]) == 2
    assert "Read-only file system" in capsys.readouterr().err


def test_an_export_holds_its_folder_and_cleans_only_what_its_killed_runs_left(tmp_path, monkeypatch):
    """An export takes the folder's lock before it reads and keeps it to the swap: an ingest running in that folder
    makes it refuse (both used to exit 0, the ingest's output deleted). A killed export's temporary folders go at the
    next export; a failed first export leaves no claimed empty folder."""
    from conftest import write_easy_sums

    from curate.core.locks import FolderLock
    from curate.select.export import ExportConfig, export

    scored = write_easy_sums(tmp_path / "scored")
    out = tmp_path / "data"
    out.mkdir()
    held = FolderLock(out / ".gradus-stage.lock")
    held.acquire()  # a stage run (an ingest) writing into the folder
    with pytest.raises(StageError, match="is in use by pid"):
        export([scored], out, ExportConfig())
    held.release()
    assert sorted(x.name for x in out.iterdir()) == [".gradus-stage.lock"]
    (out / ".gradus-stage.lock").unlink()
    stale = [tmp_path / ".data.tmp-999999", tmp_path / ".data.old-999998"]  # a kill -9 during a build and a swap
    for d in stale:
        (d / "x").mkdir(parents=True)
    mine = tmp_path / ".data.tmp-notes"  # not a name gradus makes: kept
    mine.mkdir()
    export([scored], out, ExportConfig())
    assert not any(d.exists() for d in stale) and mine.is_dir()
    assert (out / "manifest.json").is_file() and not (out / ".gradus-stage.lock").exists()
    # a first export that fails after its claim (reading its input, here) leaves nothing behind
    import curate.select.export as ex

    def unreadable(folders):
        raise ex.ManifestError("the input cannot be read")

    monkeypatch.setattr(ex, "load_scored", unreadable)
    with pytest.raises(ex.ManifestError, match="cannot be read"):
        export([scored], tmp_path / "none", ExportConfig(seed=1))
    assert not (tmp_path / "none").exists()


def test_a_resume_on_training_data_replaced_by_as_many_other_problems_is_refused(tmp_path):
    """The run records what its data is (the content hashes of its shards), not only where it lies: an export replaced
    by other problems of the same count is refused on --resume (it was continued without a word)."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq
    from conftest import write_easy_sums

    from curate.select.export import ExportConfig, export
    from rl_stage import run_folder
    from rl_stage.trainer import Trainer, TrainError

    data = tmp_path / "data"
    export([write_easy_sums(tmp_path / "a")], data, ExportConfig())
    cfg = _train_cfg(tmp_path, template="chat")
    t = Trainer(cfg)
    run_folder.claim(tmp_path / "run").release()
    (tmp_path / "run" / "config.json").write_text(json.dumps({**asdict(t.cfg), "data_fingerprint": t._data_fingerprint(),
                                                              "resolved": {}}, default=str))
    (tmp_path / "run" / "metrics.jsonl").write_text('{"step": 1}\n')
    other = write_easy_sums(tmp_path / "b")  # the same 12 rows' shape, other problems
    shard = other / "kept" / "part_000000.parquet"
    rows = pq.read_table(shard).to_pylist()
    for r in rows:
        r["problem"], r["answer"] = r["problem"].replace("+", "*"), str(eval(r["problem"][9:-2].replace("+", "*")))
    pq.write_table(pa.Table.from_pylist(rows), shard)
    shutil.rmtree(data)
    export([other], data, ExportConfig())
    with pytest.raises(TrainError, match=r"--resume with other settings than the run .*\(data_fingerprint '"):
        Trainer(cfg, resume=True).setup()


def test_card_build_curate_and_flow_refuse_a_users_folder_before_any_work(tmp_path, capsys):
    """card build --out into a user's folder overwrote its card.json; curate overwrote a user's curate_summary.json
    (and with a README.md there ran every stage, then refused); a user's file named latest became a link."""
    src = tmp_path / "in.jsonl"
    src.write_text('{"problem": "What is 1+1?", "answer": "2"}\n{"problem": "What is 2+3?", "answer": "5"}\n')
    assert main(["ingest", str(src), "--out", str(tmp_path / "i")]) == 0
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "card.json").write_text('{"my": "card"}')
    (mine / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(["card", "build", str(tmp_path / "i"), "--out", str(mine)]) == 2
    assert capsys.readouterr().err.strip().endswith(f"{mine} holds files gradus did not write (card.json, notes.txt): "
                                                    "build the card into a new or empty folder (--out)")
    assert (mine / "card.json").read_text() == '{"my": "card"}' and not (mine / "card_rows.parquet").exists()
    assert main(["card", "build", str(tmp_path / "i"), "--out", str(tmp_path / "card")]) == 0
    assert main(["card", "build", str(tmp_path / "i"), "--out", str(tmp_path / "card")]) == 0  # its own card again
    cfg = tmp_path / "cur.toml"
    cfg.write_text(f'sources = ["{src}"]\n')
    for name, body in (("curate_summary.json", '{"mine": true}'), ("README.md", "# my notes\n")):
        out = tmp_path / f"cur_{name}"
        out.mkdir()
        (out / name).write_text(body)
        capsys.readouterr()
        assert main(["curate", str(cfg), "--out", str(out)]) == 2
        assert sorted(x.name for x in out.iterdir()) == [name] and (out / name).read_text() == body  # no stage ran
    from flows.runs import FlowFolderError, check_out

    flow = tmp_path / "flow"
    flow.mkdir()
    (flow / "latest").write_text("my file")
    with pytest.raises(FlowFolderError, match=r"holds files a gradus flow did not write \(latest\)"):
        check_out(flow, [str(src)])
    assert (flow / "latest").read_text() == "my file"


def test_a_rerun_leaves_a_users_files_under_names_gradus_uses(tmp_path, capsys):
    """README.md, card.json, plots/x.png and work/notes.json in an ingest's folder, data/mine.parquet in an export's:
    a rerun with other input (or export --force) deleted them and exited 0. Now they stop the run, named, and stay."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from conftest import write_easy_sums

    from curate.select.export import ExportConfig, export

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"problem": "What is 1+1?", "answer": "2"}\n')
    b.write_text('{"problem": "What is 2+2?", "answer": "4"}\n')
    out = tmp_path / "i"
    assert main(["ingest", str(a), "--out", str(out)]) == 0
    for rel, body in (("README.md", "# mine"), ("card.json", '{"mine": 1}'), ("plots/x.png", "png"), ("work/notes.json", "{}")):
        (out / rel).parent.mkdir(exist_ok=True)
        (out / rel).write_text(body)
        capsys.readouterr()
        assert main(["ingest", str(b), "--out", str(out), "--force"]) == 2
        assert rel in capsys.readouterr().err
        assert (out / rel).read_text() == body
        (out / rel).unlink()
    data = tmp_path / "export"
    export([write_easy_sums(tmp_path / "scored")], data, ExportConfig())
    pq.write_table(pa.table({"x": [1]}), data / "data" / "mine.parquet")
    with pytest.raises(StageError, match="data/mine.parquet"):
        export([tmp_path / "scored"], data, ExportConfig(seed=7), force=True)
    assert (data / "data" / "mine.parquet").is_file()


def test_model_convert_replaces_only_the_folders_it_made(tmp_path, monkeypatch, capsys):
    pytest.importorskip("transformers")
    from curate.difficulty import models

    try:
        models.gguf_path()
    except models.ModelError as e:
        pytest.skip(str(e))

    monkeypatch.setenv("GRADUS_HOME", str(tmp_path / "home"))
    dest = models.default_model_dir()
    dest.mkdir(parents=True)
    (dest / "notes.txt").write_text("mine")
    assert main(["model", "convert"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        f"{dest} holds files gradus did not write: move them away, or set GRADUS_HOME")
    assert (dest / "notes.txt").read_text() == "mine"
    (dest / "notes.txt").unlink()
    dest.rmdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("x")
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.symlink_to(victim)  # a link where the conversion builds its folder
    assert main(["model", "convert"]) == 2
    assert "is a link or a file, not a model folder gradus made" in capsys.readouterr().err
    assert (victim / "keep.txt").read_text() == "x" and tmp.is_symlink()
    tmp.unlink()
    tmp.mkdir()  # what a conversion killed part way leaves: its own marker and a part of the weights
    (tmp / "gradus_source.json").write_text("{}")
    (tmp / "model.safetensors").write_bytes(b"part")
    assert main(["model", "convert"]) == 0  # a real conversion, over the leftover
    assert capsys.readouterr().out.strip() == str(dest)
    assert not tmp.exists() and (dest / "model.safetensors").stat().st_size > 100_000_000
    assert json.loads((dest / "gradus_source.json").read_text())["model"] == models.DEFAULT_MODEL_NAME
