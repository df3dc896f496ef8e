"""Data cards from recorded numbers: exact counts on a crafted run, a Hub-parseable README whose configs point at
files that exist, non-empty plots, and a diff that reports exactly what changed."""

from __future__ import annotations

import json

import pytest

from curate.clean.decontam import DecontamConfig
from curate.core.manifest import Manifest
from curate.difficulty.engines import Completion, Engine, SamplingConfig
from curate.difficulty.estimate import EstimateConfig, estimate
from curate.pipeline import decontam_stage, dedup_stage, filter_stage, ingest
from curate.select.export import ExportConfig, export
from data_cards.card import build_card, spearman
from data_cards.render import CARD_JSON, write_card
from data_cards.view import diff_cards, diff_text
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


class Scripted(Engine):
    """Right answers for lower levels: level L gets 5 - L of 4 samples right (k = 4)."""

    backend = "scripted"
    model_name = "scripted"
    model_path = "/nonexistent"

    def __init__(self, cfg, by_problem, shift=0):
        super().__init__(cfg)
        self.by_problem, self.shift = by_problem, shift

    def stream(self, requests):
        for r in requests:
            gold, level = self.by_problem[r.prompt]
            n = min(4, max(0, 5 - level - self.shift))
            yield r.id, [Completion(f"\\boxed{{{gold if j < n else -1}}}", 3, "stop") for j in range(4)]


def make_run(root, rows, limit=None, shift=0):
    root.mkdir(parents=True)
    (root / "src.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "bench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in BENCH))
    run = root / "run"
    ingest(str(root / "src.jsonl"), run / "1_ingest" / "00_src", adapter="generic", source_name="mine")
    filter_stage([run / "1_ingest" / "00_src"], run / "2_filter")
    decontam_stage([run / "2_filter"], run / "3_decontam", DecontamConfig(benchmarks=(f"bench={root / 'bench.jsonl'}",)))
    dedup_stage([run / "3_decontam"], run / "4_dedup")
    by_problem = {r["problem"]: (r["answer"], int(r["level"].split()[-1])) for r in rows}
    cfg = EstimateConfig(template="none", sampling=SamplingConfig(k=4, max_tokens=8), store=None, model_revision="r",
                         limit=limit)
    estimate([run / "4_dedup"], run / "5_difficulty", cfg, engine=Scripted(cfg.sampling, by_problem, shift), progress=False)
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
    infos = card.data.to_dict()["dataset_info"]  # one entry per config, as datasets writes multi-config cards
    assert [i["config_name"] for i in infos] == [c["config_name"] for c in configs]
    feats = {f["name"] for f in infos[0]["features"]}
    assert {"prompt", "answer", "pass_rate", "bucket", "sample_weight"} <= feats
    # the export's card tells the whole story: sources, waterfall, contamination, difficulty, selection
    for section in ("## Sources", "## Filter waterfall", "## Contamination", "## Difficulty", "## Selection and curriculum"):
        assert section in card.text, section
    assert card.data.pretty_name == "gradus: mine" and "contaminated_exact: 1" in card.text
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
    assert list(d["stages"]) == ["ingest", "filter", "decontam", "dedup"]  # pipeline order
    # the one new problem (level 1: 4 of 4) is scored on one side only: not a change of difficulty
    assert d["scored"] == {"old": 5, "new": 6, "both": 5, "added": 1, "removed": 0}
    assert "difficulty_histogram" not in d and d["pass_count_changed"] == 0
    assert len(d["rows_added"]) == 1 and d["rows_removed"] == []
    assert "contamination" not in d
    text = diff_text(d)
    assert f"rows added 1: {d['rows_added'][0]}" in text and "scored 5 -> 6 rows (5 in both, 1 newly scored" in text
    same = diff_cards(run, run)
    assert set(same) <= {"old", "new", "rows_added", "rows_removed", "scored", "pass_count_changed"}
    assert same["rows_added"] == [] and diff_text(same).endswith("no change")


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
    out = write_card(run, tmp_path / "elsewhere")  # a card written away from its data points at nothing outside it
    header = _yaml(out)
    assert "configs" not in header and "dataset_info" not in header and "../" not in out.read_text()
    assert "the data lies in `6_export`" in out.read_text() and "`6_export/README.md`" in out.read_text()
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "elsewhere" / "card_rows.parquet").to_pylist()
    assert sum(r["final"] for r in rows) == 5 and sorted(r["n_correct"] for r in rows) == [0, 1, 2, 3, 4]


def _declared(readme):
    """The card's dataset_info as datasets' own reader parses it: {config name: (Features, rows)}."""
    from datasets.info import DatasetInfosDict
    from huggingface_hub import DatasetCard

    infos = DatasetInfosDict.from_dataset_card_data(DatasetCard.load(readme).data)
    return {name: (info.features, info.splits["train"].num_examples) for name, info in infos.items()}


@pytest.mark.parametrize("fmt,curriculum", [("parquet", True), ("parquet", False), ("jsonl", False), ("hf", True),
                                            ("trl", False), ("verl", True), ("openrlhf", False)])
def test_every_export_loads_with_exactly_the_features_its_card_declares(run, tmp_path, fmt, curriculum):
    """Loaded as a folder (the card is read: its features are applied by config name) and loaded from the data files
    alone (no card: what the files hold), every config gives the card's declared features and row count."""
    import shutil

    import datasets

    out = tmp_path / fmt
    export([run / "5_difficulty"], out, ExportConfig(format=fmt, curriculum=curriculum, include_ends=True))
    readme = write_card(out)
    declared = _declared(readme)
    configs = {c["config_name"]: c for c in _yaml(readme)["configs"]}
    assert set(declared) == set(configs) and ("all" in declared) == curriculum
    builder = {"parquet": "parquet", "trl": "parquet", "verl": "parquet", "jsonl": "json", "openrlhf": "json",
               "hf": "arrow"}[fmt]
    copy = tmp_path / "elsewhere" / "published"
    shutil.copytree(out, copy)  # the export folder is self-contained: uploaded or moved, it still loads
    for name, (features, rows) in declared.items():
        ds = datasets.load_dataset(str(copy), name, split="train", cache_dir=str(tmp_path / "cache"))
        assert ds.features == features and ds.num_rows == rows, name
        files = [str(p) for p in sorted(copy.glob(configs[name]["data_files"][0]["path"]))]
        bare = datasets.load_dataset(builder, data_files=files, split="train", cache_dir=str(tmp_path / "cache2"))
        assert bare.features == features, (name, bare.features)
    text = readme.read_text()
    assert str(tmp_path) not in text and "../" not in text
    assert str(tmp_path) not in (out / "card.json").read_text()
    if fmt == "openrlhf":  # chat messages in the list form datasets writes, with the types the JSON lines hold
        feats = {f["name"]: f for f in _yaml(readme)["dataset_info"]["features"]}
        assert feats["input"] == {"name": "input", "list": [{"name": "role", "dtype": "string"},
                                                           {"name": "content", "dtype": "string"}]}
        assert feats["pass_rate"]["dtype"] == "float64" and feats["n_correct"]["dtype"] == "int64"


def _yaml(readme):
    from huggingface_hub import DatasetCard

    return DatasetCard.load(readme).data.to_dict()


def test_diff_compares_difficulty_over_the_problems_scored_in_both(run, tmp_path):
    """A run that scored only the first 3 rows has another pass-count histogram, but the same problems did not get
    harder: nothing changed on the 3 scored in both. A run whose model does one level worse changes them."""
    fewer = make_run(tmp_path / "fewer", ROWS, limit=3)
    d = diff_cards(run, fewer)
    assert d["scored"] == {"old": 5, "new": 3, "both": 3, "added": 0, "removed": 2}
    assert diff_cards(run / "6_export", fewer / "6_export")["scored"] == d["scored"]  # exports: scored rows upstream
    assert "difficulty_histogram" not in d and d["pass_count_changed"] == 0
    worse = make_run(tmp_path / "worse", ROWS, shift=1)  # 3, 2, 1, 0, 0 correct instead of 4, 3, 2, 1, 0
    d = diff_cards(run, worse)
    assert d["scored"]["both"] == 5 and d["pass_count_changed"] == 4
    assert d["difficulty_histogram"] == {"0": [1, 2], "4": [1, 0]}
    assert "pass counts over the 5 problems scored in both (4 changed): 0 correct 1 -> 2, 4 correct 1 -> 0" in diff_text(d)


def test_control_bytes_are_escaped_and_a_flow_folder_card_has_its_ingests(tmp_path):
    """A row whose problem holds a NUL is shown as \\x00 in the card (which stays text); a flow's output folder keeps
    its ingests one level deeper (stages/1_ingest/NN_source), and its card and `gradus show` still find them."""
    from curate.pipeline import filter_stage

    src = tmp_path / "src.jsonl"
    src.write_text(json.dumps({"problem": "What is 1+1?\u0000\u0007", "answer": "2"}) + "\n"
                   + json.dumps({"problem": "Compute $3 \\cdot 4$.", "answer": "12"}) + "\n")
    out = tmp_path / "flowout" / "stages"
    ingest(str(src), out / "1_ingest" / "00_src", adapter="generic", source_name="mine")
    filter_stage([out / "1_ingest" / "00_src"], out / "2_filter")
    card = build_card(tmp_path / "flowout")
    assert card["sources"]["mine"]["in"] == 2 and [s["stage"] for s in card["waterfall"]][0] == "ingest"
    readme = write_card(tmp_path / "flowout", tmp_path / "cardout")
    raw = readme.read_bytes()
    assert not any(b < 0x20 and b not in (0x0a,) for b in raw), "control bytes in the card"
    assert card["waterfall"][1]["removed"] == {"problem_not_text": 1}
    assert "What is 1+1?\\x00\\x07" in raw.decode()  # the example row, its bytes visible
    assert main(["show", str(tmp_path / "flowout")]) == 0


def test_published_paths_are_relative_and_maths_is_left_alone(tmp_path):
    """public() rewrites what names a path on this machine and nothing else: a gold like \\sqrt{2}/2 or (n+1)/2 in a
    shown row keeps its slash."""
    from data_cards.render import public

    stage = tmp_path / "p" / "stages" / "2_filter"
    stage.mkdir(parents=True)
    card = {"folder": str(tmp_path / "p"), "stages": [{"folder": str(stage)}],
            "rows": ["\\sqrt{2}/2", "(n+1)/2", "5!/3!", "x /y", "1/2", "http://h:8000/v1", f"read {tmp_path}/src.jsonl",
                     str(stage / "kept")]}
    (tmp_path / "src.jsonl").write_text("")
    out = public(card)
    assert out["rows"] == ["\\sqrt{2}/2", "(n+1)/2", "5!/3!", "x /y", "1/2", "http://h:8000/v1", "read src.jsonl",
                           "stages/2_filter/kept"]
    assert out["stages"][0]["folder"] == "stages/2_filter"
