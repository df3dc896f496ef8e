"""Data cards from recorded numbers: exact counts on a crafted run, a Hub-parseable README whose configs point at
files that exist, non-empty plots, and a diff that reports exactly what changed."""

from __future__ import annotations

import json

import pytest

from curate.clean.decontam import DecontamConfig
from curate.core.manifest import Manifest
from curate.difficulty.engines import Completion, Sampler, SamplingConfig
from curate.difficulty.estimate import EstimateConfig, estimate
from curate.pipeline import decontam_stage, dedup_stage, filter_stage, ingest
from curate.select.export import ExportConfig, export
from data_cards.card import build_card, spearman
from data_cards.render import CARD_JSON, diff_cards, write_card
from flows.cli import main

ROWS = [
    {"problem": "Compute 12 + 30.", "answer": "42", "level": "Level 1"},
    {"problem": "Compute 12 + 30.", "answer": "42", "level": "Level 1"},  # exact duplicate
    {"problem": "Prove that the square root of 2 is irrational.", "answer": "proof", "level": "Level 5"},
    {"problem": "Which is largest? (A) 1 (B) 2 (C) 3 (D) 4", "answer": "D", "level": "Level 2"},
    {"problem": "A rectangular garden is twice as long as it is wide and its perimeter is 60 meters. What is the area "
                "of the garden, in square meters?", "answer": "200", "level": "Level 2"},  # in the benchmark
    {"problem": "Compute 7 * 8 - 6.", "answer": "50", "level": "Level 2"},
    {"problem": "What is the remainder when 2^10 is divided by 7?", "answer": "2", "level": "Level 3"},
    {"problem": "How many primes are less than 30?", "answer": "10", "level": "Level 4"},
    {"problem": "Find the sum of the digits of 2^15.", "answer": "26", "level": "Level 5"},
]
BENCH = [{"problem": ROWS[4]["problem"], "answer": "200", "id": "b-1"}]


class Scripted(Sampler):
    """Right answers for lower levels: level L gets 5 - L of 4 samples right (k = 4)."""

    backend = "scripted"
    model_name = "scripted"
    model_path = "/nonexistent"

    def __init__(self, cfg, by_problem):
        super().__init__(cfg)
        self.by_problem = by_problem

    def stream(self, requests):
        for r in requests:
            gold, level = self.by_problem[r.prompt]
            n = max(0, 5 - level)
            yield r.id, [Completion(f"\\boxed{{{gold if j < n else -1}}}", 3, "stop") for j in range(4)]


def make_run(root, rows):
    root.mkdir(parents=True)
    (root / "src.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in BENCH))
    run = root / "run"
    ingest(str(root / "src.jsonl"), run / "1_ingest" / "00_src", adapter="generic", source_name="mine")
    filter_stage([run / "1_ingest" / "00_src"], run / "2_filter")
    decontam_stage([run / "2_filter"], run / "3_decontam", DecontamConfig(benchmarks=(f"bench={root / 'bench.jsonl'}",)))
    dedup_stage([run / "3_decontam"], run / "4_dedup")
    by_problem = {r["problem"]: (r["answer"], int(r["level"].split()[-1])) for r in rows}
    cfg = EstimateConfig(template="none", sampling=SamplingConfig(k=4, max_tokens=8), store=None, model_revision="r")
    estimate([run / "4_dedup"], run / "5_difficulty", cfg, sampler=Scripted(cfg.sampling, by_problem), progress=False)
    export([run / "5_difficulty"], run / "6_export", ExportConfig(curriculum=True, include_ends=True))
    return run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("card") / "a", ROWS)


def test_card_counts_are_exact_and_equal_the_manifests(run):
    card = build_card(run)
    wf = {s["stage"]: s for s in card["waterfall"]}
    assert (wf["ingest"]["rows_in"], wf["ingest"]["rows_out"]) == (9, 9)
    assert wf["filter"]["removed"] == {"proof": 1, "mcq": 1} and wf["filter"]["rows_out"] == 7
    assert wf["decontam"]["removed"] == {"contaminated_exact": 1} and wf["decontam"]["rows_out"] == 6
    assert wf["dedup"]["removed"] == {"dedup_exact": 1} and wf["dedup"]["rows_out"] == 5
    assert all(c["holds"] for c in card["conservation"])
    for s in card["waterfall"]:  # every count is the manifest's
        m = Manifest.load(s["folder"])
        assert (s["rows_in"], s["rows_out"], s["removed"]) == (m.rows_in, m.rows_kept, m.rejected_by_reason)
        assert set(s["examples"]) == set(m.rejected_by_reason)
    assert card["sources"]["mine"]["in"] == 9 and card["sources"]["mine"]["final"] == 5
    assert card["duplicates"]["exact"] == 1 and card["duplicates"]["cluster_sizes"] == {"2": 1}
    assert card["duplicates"]["kept_copy_from_source"] == {"mine": 1}
    c = card["contamination"]
    assert c["by_benchmark"] == {"bench": 1} and c["matches"][0]["benchmark_item"] == "b-1"
    d = card["difficulty"]
    # levels 1, 2, 3, 4, 5 -> 4, 3, 2, 1, 0 of 4 correct
    assert d["histogram"] == {"0": 1, "1": 1, "2": 1, "3": 1, "4": 1}
    assert (d["never_solved"], d["always_solved"]) == (1, 1)
    assert d["spearman_rho_pass_rate_vs_level"] == -1.0
    cur = card["curriculum"]
    assert cur["rows"] == 5 and {b: v["taken"] for b, v in cur["by_bucket"].items()} == {
        "unsolved": 1, "hard": 1, "medium": 1, "easy": 1, "solved": 1}


def test_readme_parses_on_the_hub_and_its_configs_point_at_files(run):
    from huggingface_hub import DatasetCard

    readme = write_card(run / "6_export")
    card = DatasetCard.load(readme)
    configs = card.data.to_dict()["configs"]
    assert [c["config_name"] for c in configs][:1] == ["all"]
    for c in configs:
        for f in c["data_files"]:
            assert list((run / "6_export").glob(f["path"])), f["path"]
    feats = {f["name"] for f in card.data.to_dict()["dataset_info"]["features"]}
    assert {"prompt", "answer", "pass_rate", "bucket", "sample_weight"} <= feats
    assert "## Filter waterfall" not in card.text and "## Selection and curriculum" in card.text
    whole = DatasetCard.load(write_card(run))
    for c in whole.data.to_dict()["configs"]:
        for f in c["data_files"]:
            assert list(run.glob(f["path"])), f["path"]
    assert "## Filter waterfall" in whole.text and "contaminated_exact: 1" in whole.text


def test_plots_are_non_empty_pngs(run):
    write_card(run)
    plots = sorted((run / "plots").glob("*.png"))
    assert {p.name for p in plots} >= {"waterfall.png", "pass_counts.png", "pass_rate_by_level.png", "sources.png",
                                       "buckets.png"}
    for p in plots:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    assert json.loads((run / CARD_JSON).read_text())["card_version"] == 1


def test_diff_reports_exactly_what_changed(run, tmp_path):
    more = ROWS + [{"problem": "What is 3 cubed?", "answer": "27", "level": "Level 1"}]
    other = make_run(tmp_path / "b", more)
    d = diff_cards(run, other)
    assert d["sources"] == {"mine": {"after_ingest": [9, 10], "final": [5, 6], "in": [9, 10]}}
    assert d["stages"] == {s: {"rows_in": v[0], "rows_out": v[1]} for s, v in {
        "ingest": ([9, 10], [9, 10]), "filter": ([9, 10], [7, 8]), "decontam": ([7, 8], [6, 7]),
        "dedup": ([6, 7], [5, 6])}.items()}
    assert d["difficulty_histogram"] == {"4": [1, 2]}
    assert (d["rows_added"], d["rows_removed"]) == (1, 0)
    assert "contamination" not in d
    same = diff_cards(run, run)
    assert set(same) <= {"old", "new", "rows_added", "rows_removed"} and same["rows_added"] == 0


def test_cli_card_and_bad_folders(run, tmp_path, capsys):
    assert main(["card", "show", str(run)]) == 0
    out = capsys.readouterr().out
    assert "filter" in out and "removed: mcq 1, proof 1" in out
    assert main(["card", "build", str(tmp_path)]) == 2
    assert "not a stage output or a run folder" in capsys.readouterr().err
    (tmp_path / "old" ).mkdir()
    (tmp_path / "old" / "manifest.json").write_text(json.dumps({"stage": "filter"}))
    assert main(["card", "build", str(tmp_path / "old")]) == 2
    assert "older gradus" in capsys.readouterr().err


def test_spearman_by_hand():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties take their mean rank: x ranks 1, 2.5, 2.5, 4; y ranks 1, 2, 3, 4 -> rho = 0.9487
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9487, abs=1e-4)
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def test_a_readme_gradus_did_not_write_is_never_overwritten(run, tmp_path):
    (tmp_path / "README.md").write_text("my project")
    with pytest.raises(Exception, match="gradus did not write"):
        write_card(run, tmp_path)
    assert (tmp_path / "README.md").read_text() == "my project"
    out = write_card(run, tmp_path / "elsewhere")  # a card written elsewhere points back at the data
    from huggingface_hub import DatasetCard

    for c in DatasetCard.load(out).data.to_dict()["configs"]:
        for f in c["data_files"]:
            assert list((tmp_path / "elsewhere").glob(f["path"])), f["path"]
