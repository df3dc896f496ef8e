"""The one stage contract: the manifest type, the registry, output-folder safety, skip, restart, conservation."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.core.manifest import MANIFEST_VERSION, STAGE_KINDS, Manifest, ManifestError, register_stage
from curate.core.runner import MARKER, StageError
from curate.difficulty.engines import Completion, Engine, SamplingConfig
from curate.difficulty.estimate import EstimateConfig, estimate
from curate.pipeline import dedup_stage, filter_stage, ingest
from curate.select.export import ExportConfig, export
from flows.cli import main


@pytest.fixture()
def src(tmp_path):
    p = tmp_path / "src" / "a.jsonl"
    p.parent.mkdir()
    rows = [{"problem": f"Compute {i} + {i + 1}.", "answer": str(2 * i + 1)} for i in range(30)]
    rows += [{"problem": "Prove that there are infinitely many primes.", "answer": "proof"}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_manifest_round_trips_and_checks_itself(tmp_path, src):
    m = ingest(str(src), tmp_path / "ing")
    again = Manifest.load(tmp_path / "ing")
    assert again == m and again.manifest_version == MANIFEST_VERSION and again.stage == "ingest"
    assert Manifest.from_dict(json.loads(json.dumps(m.to_dict()))) == m
    bad = m.to_dict() | {"rows_kept": m.rows_kept + 1}
    with pytest.raises(ManifestError, match="rows_in"):
        Manifest.from_dict(bad)
    old = {k: v for k, v in m.to_dict().items() if k != "manifest_version"}
    with pytest.raises(ManifestError, match="older gradus"):
        Manifest.from_dict(old)
    with pytest.raises(ManifestError, match="no manifest.json"):
        Manifest.load(tmp_path)


def test_registry_names_every_stage_and_refuses_duplicates():
    assert [k.name for k in sorted(STAGE_KINDS.values(), key=lambda k: k.order)] == [
        "ingest", "filter", "decontam", "dedup", "estimate", "export"]
    with pytest.raises(ValueError, match="already registered"):
        register_stage("filter", "again", "shards", 9)


def test_out_equal_to_or_containing_the_input_is_refused_and_nothing_is_deleted(tmp_path, src):
    ingest(str(src), tmp_path / "ing")
    before = sorted(p.name for p in (tmp_path / "ing" / "kept").iterdir())
    for out in (tmp_path / "ing", tmp_path):
        with pytest.raises(StageError, match="is or contains the input"):
            filter_stage([tmp_path / "ing"], out)
    with pytest.raises(StageError, match="lies inside the input"):
        dedup_stage([tmp_path / "ing"], tmp_path / "ing" / "sub")
    assert sorted(p.name for p in (tmp_path / "ing" / "kept").iterdir()) == before
    assert Manifest.load(tmp_path / "ing").rows_in == 31
    with pytest.raises(StageError, match="is or contains the input"):
        ingest(str(src), src.parent)


def test_a_folder_gradus_did_not_write_is_never_touched(tmp_path, src):
    ingest(str(src), tmp_path / "ing")
    mine = tmp_path / "mine"
    (mine / "kept").mkdir(parents=True)
    (mine / "thesis.tex").write_text("years of work")
    (mine / "kept" / "notes.txt").write_text("mine too")
    with pytest.raises(StageError, match="gradus did not write"):
        filter_stage([tmp_path / "ing"], mine)
    assert (mine / "thesis.tex").read_text() == "years of work" and (mine / "kept" / "notes.txt").exists()
    # a gradus output with a user's file dropped into it: refused as well, naming the file
    filter_stage([tmp_path / "ing"], tmp_path / "f")
    (tmp_path / "f" / "thesis.tex").write_text("x")
    with pytest.raises(StageError, match="thesis.tex"):
        filter_stage([tmp_path / "ing"], tmp_path / "f", force=True)
    assert (tmp_path / "f" / "thesis.tex").exists()


def test_a_claim_killed_before_its_marker_landed_is_taken_again(tmp_path, src):
    """A run killed between writing the marker's temporary file and renaming it leaves that file alone in the folder
    (the marker is written before any data): the next run takes the folder; next to a user's file it still refuses."""
    out = tmp_path / "ing"
    out.mkdir()
    (out / (MARKER + ".tmp")).write_text('{"stage": "ing')  # cut off mid-write
    m = ingest(str(src), out)
    assert (m.rows_in, m.rows_kept) == (31, 31) and not (out / (MARKER + ".tmp")).exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / (MARKER + ".tmp")).write_text("{}")
    (mine / "thesis.tex").write_text("years of work")
    with pytest.raises(StageError, match="gradus did not write"):
        ingest(str(src), mine)
    assert sorted(p.name for p in mine.iterdir()) == [MARKER + ".tmp", "thesis.tex"]


def test_export_refuses_a_user_folder_and_its_own_input(tmp_path, src):
    scored = _scored(tmp_path)
    user = tmp_path / "user"
    (user / "sub").mkdir(parents=True)
    (user / "thesis.tex").write_text("x")
    with pytest.raises(StageError, match="gradus did not write"):
        export([scored], user, ExportConfig())
    assert (user / "thesis.tex").exists() and (user / "sub").is_dir()
    with pytest.raises(StageError, match="is or contains the input"):
        export([scored], scored, ExportConfig())
    assert Manifest.load(scored).stage == "estimate"
    m = export([scored], tmp_path / "exp", ExportConfig(include_ends=False))
    assert (m.rows_in, m.rows_kept) == (8, 4) and m.rejected_by_reason == {"unsolved": 2, "solved": 2}
    m = export([scored], tmp_path / "all", ExportConfig())  # by default the ends are kept, flagged by their bucket
    assert (m.rows_in, m.rows_kept) == (8, 8) and m.rejected_by_reason == {}


def test_another_stage_kind_in_the_folder_is_refused(tmp_path, src):
    ingest(str(src), tmp_path / "ing")
    filter_stage([tmp_path / "ing"], tmp_path / "f")
    with pytest.raises(StageError, match="holds a filter stage output, not dedup"):
        dedup_stage([tmp_path / "ing"], tmp_path / "f")


def test_skip_verifies_shards_and_a_half_cleaned_folder_is_not_complete(tmp_path, src):
    ingest(str(src), tmp_path / "ing")
    m = filter_stage([tmp_path / "ing"], tmp_path / "f")
    assert filter_stage([tmp_path / "ing"], tmp_path / "f").skipped
    # a shard removed behind the manifest's back: not "complete", the stage runs again
    shard = tmp_path / "f" / "kept" / m.kept_shards[0]["path"]
    shard.unlink()
    again = filter_stage([tmp_path / "ing"], tmp_path / "f")
    assert not again.skipped and shard.exists() and again.rows_kept == m.rows_kept
    # a shard changed behind its back: the same
    shard.write_bytes(shard.read_bytes()[:-10] + b"0" * 10)
    assert not filter_stage([tmp_path / "ing"], tmp_path / "f").skipped
    # the runner deletes the manifest before anything else: a run killed while cleaning leaves no manifest
    (tmp_path / "f" / "rejected").mkdir(exist_ok=True)
    assert (tmp_path / "f" / MARKER).exists()


def test_conservation_is_checked_against_the_upstream_manifest(tmp_path, src):
    ingest(str(src), tmp_path / "ing")
    m = Manifest.load(tmp_path / "ing")
    # an upstream shard lost after its manifest was written: the next stage reads fewer rows than it says
    extra = tmp_path / "ing" / "kept" / "shard_00001.parquet"
    pq.write_table(pq.read_table(tmp_path / "ing" / "kept" / m.kept_shards[0]["path"]).slice(0, 3), extra)
    with pytest.raises(StageError, match="conservation broken: read 34 rows, but the inputs' manifests say they hold 31"):
        filter_stage([tmp_path / "ing"], tmp_path / "f")


def test_show_works_on_every_stage_kind_and_on_a_run_folder(tmp_path, src, capsys):
    run = tmp_path / "run"
    ingest(str(src), run / "1_ingest" / "00_a")
    filter_stage([run / "1_ingest" / "00_a"], run / "2_filter")
    dedup_stage([run / "2_filter"], run / "4_dedup")
    scored = _scored(run, name="5_difficulty", ing=tmp_path / "elsewhere")
    export([scored], run / "6_export", ExportConfig(curriculum=True))
    for d in ("1_ingest/00_a", "2_filter", "4_dedup", "5_difficulty", "6_export"):
        assert main(["show", str(run / d)]) == 0, d
        out = capsys.readouterr().out
        assert out.startswith(f"{run / d}: "), out
    assert "proof: 1" in _show(run / "2_filter", capsys)
    assert "pass-count histogram" in _show(run / "5_difficulty", capsys)
    assert "bucket      available" in _show(run / "6_export", capsys)
    text = _show(run, capsys)
    lines = [ln.split() for ln in text.splitlines()[2:] if ln.split() and ln.split()[0] in STAGE_KINDS]
    assert [(ln[0], ln[1], ln[2]) for ln in lines] == [
        ("ingest", "31", "31"), ("filter", "31", "30"), ("dedup", "30", "30"), ("estimate", "8", "8"), ("export", "8", "8")]
    assert "MISMATCH" not in text
    assert main(["show", str(run / "2_filter"), "--samples", "proof"]) == 0
    assert "Prove that there are infinitely many primes." in capsys.readouterr().out
    assert main(["show", str(tmp_path / "src")]) == 2
    assert "not a stage output or a run folder" in capsys.readouterr().err


def _show(d, capsys) -> str:
    assert main(["show", str(d)]) == 0
    return capsys.readouterr().out


class _Scripted(Engine):
    backend = "scripted"
    model_name = "scripted"
    model_path = "/nonexistent"

    def stream(self, requests):
        for r in requests:
            gold = r.prompt.split("=")[-1].strip()
            n = int(gold) % 4  # 0..3 of 3 samples right
            yield r.id, [Completion(f"\\boxed{{{gold if j < n else -1}}}", 3, "stop") for j in range(3)]


def _scored(tmp_path, name="est", ing=None):
    rows = [{"problem": f"Compute q{i} = {i}", "answer": str(i)} for i in range(8)]
    ing = ing or tmp_path
    ing.mkdir(parents=True, exist_ok=True)
    src = ing / f"{name}_src.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ingest(str(src), ing / f"{name}_ing", adapter="generic")
    cfg = EstimateConfig(template="none", sampling=SamplingConfig(k=3, max_tokens=8), store=None, model_revision="r")
    estimate([ing / f"{name}_ing"], tmp_path / name, cfg, engine=_Scripted(cfg.sampling), progress=False)
    return tmp_path / name


def test_estimate_output_is_a_manifest_like_every_other(tmp_path):
    d = _scored(tmp_path)
    m = Manifest.load(d)
    assert (m.stage, m.rows_in, m.rows_kept, m.rows_rejected) == ("estimate", 8, 8, 0)
    assert m.stats["pass_count_histogram"] == {"0": 2, "1": 2, "2": 2, "3": 2}
    assert m.by_source == {"generic": {"in": 8, "kept": 8}}
    assert pa.concat_tables(pq.read_table(p) for p in sorted((d / "kept").glob("*.parquet"))).num_rows == 8


def test_a_stray_manifest_or_a_user_file_inside_owned_folders_is_not_gradus(tmp_path, src):
    ingest(str(src), tmp_path / "ing")
    fake = tmp_path / "fake"
    (fake / "data").mkdir(parents=True)
    (fake / "manifest.json").write_text("{}")
    (fake / "data" / "important.parquet").write_text("x")
    with pytest.raises(StageError, match="gradus did not write"):
        filter_stage([tmp_path / "ing"], fake)
    scored = _scored(tmp_path)
    with pytest.raises(StageError, match="gradus did not write"):
        export([scored], fake, ExportConfig())
    assert (fake / "data" / "important.parquet").exists()
    m = filter_stage([tmp_path / "ing"], tmp_path / "f")
    (tmp_path / "f" / "kept" / "notes.txt").write_text("mine")
    with pytest.raises(StageError, match="kept"):
        filter_stage([tmp_path / "ing"], tmp_path / "f", force=True)
    assert (tmp_path / "f" / "kept" / "notes.txt").exists() and m.rows_kept == 30
    export([scored], tmp_path / "e", ExportConfig(curriculum=True))
    (tmp_path / "e" / "stage_notes.txt").write_text("mine")
    with pytest.raises(StageError, match="stage_notes.txt"):
        export([scored], tmp_path / "e", ExportConfig(curriculum=True), force=True)


def test_export_with_other_settings_is_refused_without_force(tmp_path):
    scored = _scored(tmp_path)
    export([scored], tmp_path / "e", ExportConfig(total=4))
    with pytest.raises(StageError, match="made with other settings"):
        export([scored], tmp_path / "e", ExportConfig(total=2))
    assert Manifest.load(tmp_path / "e").rows_kept == 4
    assert export([scored], tmp_path / "e", ExportConfig(total=2), force=True).rows_kept == 2


def test_a_model_changed_in_place_is_a_new_estimate(tmp_path):
    from dataclasses import replace

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"weights-1")
    rows = [{"problem": f"Compute q{i} = {i}", "answer": str(i)} for i in range(4)]
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    ingest(str(tmp_path / "s.jsonl"), tmp_path / "ing", adapter="generic")
    cfg = EstimateConfig(template="none", sampling=SamplingConfig(k=3, max_tokens=8), store=None)
    sampler = _Scripted(cfg.sampling)
    sampler.model_path = str(model)
    m = estimate([tmp_path / "ing"], tmp_path / "est", cfg, engine=sampler, progress=False)
    assert m.stats["model_revision"].startswith("sha256:") and m.stats["model"] == "scripted"
    assert estimate([tmp_path / "ing"], tmp_path / "est", cfg, engine=sampler, progress=False).skipped
    (model / "model.safetensors").write_bytes(b"weights-2")  # the checkpoint overwritten in place
    with pytest.raises(StageError, match="made with other settings"):
        estimate([tmp_path / "ing"], tmp_path / "est", cfg, engine=sampler, progress=False)
    again = estimate([tmp_path / "ing"], tmp_path / "est", replace(cfg), engine=sampler, force=True, progress=False)
    assert again.stats["model_revision"] != m.stats["model_revision"]


def test_a_finished_estimate_whose_part_was_changed_is_scored_again_not_resumed(tmp_path):
    d = _scored(tmp_path)
    part = sorted((d / "kept").glob("*.parquet"))[0]
    good = part.read_bytes()
    part.write_bytes(good[:-16] + b"\0" * 16)
    cfg = EstimateConfig(template="none", sampling=SamplingConfig(k=3, max_tokens=8), store=None, model_revision="r")
    m = estimate([tmp_path / "est_ing"], d, cfg, engine=_Scripted(cfg.sampling), progress=False)
    assert not m.skipped and m.stats["this_run"]["chunks_already_done"] == 0
    assert part.read_bytes() == good
