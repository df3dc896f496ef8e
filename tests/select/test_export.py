"""Exports: round trips through Parquet, JSON lines and datasets.load_from_disk with identical rows;
determinism under a seed; curriculum folders; bad input gives clear errors."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.core.config import ConfigError
from curate.difficulty import templates
from curate.select.curriculum import SelectionError
from curate.select.export import EXPORT_SCHEMA, ExportConfig, export, read_export
from flows.cli import main


@pytest.fixture()
def scored(tmp_path):
    """A scored shard folder as `gradus estimate` writes it (k = 10), with a manifest."""
    rows = []
    spec = [(2, 6, "A"), (3, 4, "B"), (5, 3, "A"), (8, 8, "B"), (0, 5, "A"), (10, 4, "B")]
    for n, count, src in spec:
        for j in range(count):
            rows.append({"id": f"{src}{n}{j:02d}", "source": src, "source_id": str(j), "subject": ["alg", "geo"][j % 2],
                         "level": None, "problem": f"Compute ${n} + {j}$.", "answer": str(n + j), "n_correct": n,
                         "n_graded": 10, "k": 10, "pass_rate": n / 10, "pass_rate_low": 0.0, "pass_rate_high": 1.0,
                         "model": "m"})
    d = tmp_path / "scored"
    (d / "kept").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), d / "kept" / "part_000000.parquet")
    return d


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "hf"])
def test_round_trip_identical_rows(scored, tmp_path, fmt):
    cfg = ExportConfig(format=fmt, total=12, seed=1, template="qwen_math", rows_per_shard=5)
    m = export([scored], tmp_path / fmt, cfg)
    assert m.rows_kept == 12
    back = read_export(tmp_path / fmt)
    ref = export([scored], tmp_path / "ref", ExportConfig(format="parquet", total=12, seed=1, template="qwen_math"))
    assert ref.rows_kept == 12
    want = read_export(tmp_path / "ref")
    assert back.schema == EXPORT_SCHEMA and back.to_pylist() == want.to_pylist()
    if fmt == "hf":
        import datasets

        ds = datasets.load_from_disk(str(tmp_path / fmt / "data"))
        assert ds.num_rows == 12 and ds[0]["id"] == want["id"][0].as_py()
        assert ds[0]["messages"][0] == {"role": "system", "content": templates.BOXED_INSTRUCTION}
    if fmt == "jsonl":
        files = sorted((tmp_path / fmt / "data").glob("*.jsonl"))
        assert [sum(1 for _ in open(f)) for f in files] == [5, 5, 2]  # bounded shards
        first = json.loads(files[0].read_text().splitlines()[0])
        assert first["prompt"].startswith("<|im_start|>system") and first["answer"]
    if fmt == "parquet":
        assert [pq.ParquetFile(p).metadata.num_rows for p in sorted((tmp_path / fmt / "data").glob("*.parquet"))] == [5, 5, 2]


def test_exports_are_deterministic_under_a_seed(scored, tmp_path):
    for name in ("a", "b"):
        export([scored], tmp_path / name, ExportConfig(format="jsonl", total=12, seed=7))
    ja = (tmp_path / "a" / "data" / "part_00000.jsonl").read_bytes()
    assert ja == (tmp_path / "b" / "data" / "part_00000.jsonl").read_bytes()
    export([scored], tmp_path / "c", ExportConfig(format="jsonl", total=12, seed=8))
    assert ja != (tmp_path / "c" / "data" / "part_00000.jsonl").read_bytes()
    again = export([scored], tmp_path / "a", ExportConfig(format="jsonl", total=12, seed=7))
    assert again.skipped


def test_never_and_always_solved_rows_are_kept_flagged_by_default(scored, tmp_path):
    m = export([scored], tmp_path / "all", ExportConfig(format="parquet", curriculum=True))
    assert [(p["folder"], p["rows"]) for p in m.stats["parts"]] == [
        ("stage_1_solved", 4), ("stage_2_easy", 8), ("stage_3_medium", 3), ("stage_4_hard", 10), ("stage_5_unsolved", 5)]
    t = read_export(tmp_path / "all")
    assert Counter(t["bucket"].to_pylist()) == {"solved": 4, "easy": 8, "medium": 3, "hard": 10, "unsolved": 5}
    assert json.loads((tmp_path / "all" / "selection_report.json").read_text())["excluded"] == {}


def test_curriculum_folders_easy_to_hard_with_weights(scored, tmp_path):
    m = export([scored], tmp_path / "cur", ExportConfig(format="parquet", curriculum=True, include_ends=False))
    parts = m.stats["parts"]
    assert [(p["folder"], p["rows"]) for p in parts] == [("stage_1_easy", 8), ("stage_2_medium", 3), ("stage_3_hard", 10)]
    assert [p["pass_rate_mean"] for p in m.stats["parts"]] == pytest.approx([0.8, 0.5, 0.24])  # hard: (6*0.2 + 4*0.3) / 10
    t = read_export(tmp_path / "cur")
    assert t["stage"].to_pylist() == [1] * 8 + [2] * 3 + [3] * 10
    w = dict(zip(t["n_correct"].to_pylist(), t["sample_weight"].to_pylist(), strict=False))
    assert w == pytest.approx({8: 0.2, 5: 0.5, 2: 0.8, 3: 0.7})
    stage_m = json.loads((tmp_path / "cur" / "stage_3_hard" / "part.json").read_text())
    assert stage_m["bucket"] == "hard" and stage_m["rows"] == 10
    rep = json.loads((tmp_path / "cur" / "selection_report.json").read_text())
    assert rep["excluded"] == {"unsolved": 5, "solved": 4}


def test_bad_requests_are_clear_errors(scored, tmp_path):
    with pytest.raises(ConfigError, match="format: 'csv' is not one of parquet, jsonl, hf"):
        ExportConfig(format="csv")
    with pytest.raises(SelectionError, match="only 21 eligible"):
        export([scored], tmp_path / "x", ExportConfig(total=100, shortfall="fail", include_ends=False))
    unscored = tmp_path / "unscored" / "kept"
    unscored.mkdir(parents=True)
    pq.write_table(pa.table({"id": ["a"], "problem": ["p"], "answer": ["1"]}), unscored / "s.parquet")
    with pytest.raises(SelectionError, match="not difficulty-scored"):
        export([unscored.parent], tmp_path / "y", ExportConfig())
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()  # nothing half-written
    assert main(["export", str(scored), "--out", str(tmp_path / "z"), "--total", "100", "--shortfall", "fail"]) == 2
    assert main(["export", str(scored), "--out", str(tmp_path / "z"), "--target", "band:0.1-0.9", "--format", "jsonl"]) == 0
    assert read_export(tmp_path / "z").num_rows == 21  # pass rates 0.2 (6), 0.3 (4), 0.5 (3), 0.8 (8): inside the band


def test_pass_rates_are_recomputed_over_k():
    # a row scored before timeouts counted as failures: 1 correct of 1 graded out of 10 stored pass_rate 1.0
    import pyarrow as pa

    from curate.difficulty.estimate import wilson
    from curate.select.export import pass_rates_over_k

    t = pa.table({"n_correct": [1, 3], "n_graded": [1, 10], "k": [10, None], "pass_rate": [1.0, 0.3],
                  "pass_rate_low": [0.2, 0.1], "pass_rate_high": [1.0, 0.6]})
    out = pass_rates_over_k(t).to_pydict()
    assert out["pass_rate"][0] == pytest.approx(0.1) and out["pass_rate"][1] == pytest.approx(0.3)
    assert (out["pass_rate_low"][0], out["pass_rate_high"][0]) == pytest.approx(wilson(1, 10), abs=1e-6)
