"""Decontamination rules (``curate.clean.decontam``): exact, n-gram and boilerplate matches, template siblings and
other figures kept, rows whose ids are not content ids refused."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from curate.clean.decontam import BenchmarkIndex, DecontamConfig


def _index(tmp_path, rows):
    p = tmp_path / "bench.jsonl"

    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return BenchmarkIndex.build((f"mybench={p}",), 8)


def test_decontam_exact_ngram_and_boilerplate(tmp_path):
    bench_problem = ("Let N be the number of ordered pairs of positive integers whose product is a perfect "
                     "square below 500. Find the remainder when N is divided by 1000.")
    idx = _index(tmp_path, [{"id": "b1", "problem": bench_problem, "answer": "7"},
                            {"id": "b2", "problem": "What is $1+1$?", "answer": "2"}])
    rows = pa.array([
        "What is $1 + 1$ ?",  # exact after normalization
        "Here: " + bench_problem[:-1] + " please.",  # near-verbatim copy
        "A different problem about circles. Find the remainder when N is divided by 1000.",  # boilerplate only
    ])
    bench, bid, kind = idx.match(rows, DecontamConfig())
    assert kind == ["exact", "ngram", None]
    assert bid[:2] == ["b2", "b1"] and bench[:2] == ["mybench", "mybench"]
    # Open-R1's rule (any shared 8-gram) also flags the boilerplate row
    _, _, kind0 = idx.match(rows, DecontamConfig(min_overlap=0.0, min_shared=1, require_numbers=False))
    assert kind0 == ["exact", "ngram", "ngram"]
    # a reworded copy below min_overlap is still caught when it keeps all the item's numbers (500, 1000)
    reworded = pa.array(["Find the remainder when N is divided by 1000, where N counts the ordered pairs of positive "
                         "integers whose product is a perfect square below 500."])
    assert idx.match(reworded, DecontamConfig())[2] == ["ngram"]
    assert idx.match(reworded, DecontamConfig(min_overlap_numbers=1.0))[2] == [None]


def test_decontam_keeps_template_siblings_and_other_figures(tmp_path):

    bench = tmp_path / "b.jsonl"
    item = ("Let $f(x) = 2x - 3$ and $g(x) = x + 1$. What is the value of $f(1 + g(2))$ when both are applied "
            "in this order?")
    fig = "The graph of $y = f(x)$ is shown below. [asy]draw((0,0)--(1,2));[/asy] Find $f(1)$."
    bench.write_text(json.dumps({"id": "b1", "problem": item}) + "\n" + json.dumps({"id": "b2", "problem": fig}) + "\n")
    idx = BenchmarkIndex.build((f"b={bench}",), 8)
    rows = pa.array([item.replace("g(2)", "g(5)"),  # a sibling: the numbers of the item are not all there
                     item.replace("$f(x) = 2x - 3$", "\\(f(x) = 2x - 3\\)"),  # a copy
                     fig.replace("(1,2)", "(1,3)"),  # the same words around another drawing
                     fig])
    _, bid, kind = idx.match(rows, DecontamConfig())
    assert kind == [None, "exact", None, "exact"] and bid[1] == "b1" and bid[3] == "b2"


def test_decontam_refuses_rows_whose_ids_are_not_content_ids(tmp_path):
    """Exact matches compare the rows' ids with the benchmark items' content ids: shards whose ids are something
    else (not written by ingest) would miss every exact copy, so the stage refuses them with a clear error."""

    import pyarrow.parquet as pq

    from curate.core.runner import StageError
    from curate.pipeline import decontam_stage, ingest

    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"id": "b1", "problem": "What is the sum of the first 100 positive integers?"}) + "\n")
    src = tmp_path / "rows.jsonl"
    src.write_text(json.dumps({"id": "r1", "problem": "What is the sum of the first 100 positive integers?",
                               "answer": "5050"}) + "\n")
    ingest(str(src), tmp_path / "i")
    cfg = DecontamConfig(benchmarks=(f"b={bench}",))
    assert decontam_stage([tmp_path / "i"], tmp_path / "d", cfg).rows_kept == 0  # the exact copy is found
    shard = next((tmp_path / "i" / "kept").glob("*.parquet"))
    t = pq.read_table(shard)
    bare = tmp_path / "bare"  # record shards without a manifest: their ids are whatever wrote them made
    bare.mkdir()
    pq.write_table(t.set_column(t.schema.get_field_index("id"), "id", pa.array(["row-1"])), bare / shard.name)
    with pytest.raises(StageError, match="not the content ids"):
        decontam_stage([bare], tmp_path / "d2", cfg)
    pq.write_table(t.set_column(t.schema.get_field_index("id"), "id", pa.array(["row-1"])), shard)
    with pytest.raises(StageError, match="an input changed after its ingest stage finished"):  # under its manifest
        decontam_stage([tmp_path / "i"], tmp_path / "d3", cfg)
