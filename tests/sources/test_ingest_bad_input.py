"""Ingest of malformed input: every row ends kept or rejected with a reason; clear one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from curate.core.errors import SourceError
from curate.core.shards import read_table
from curate.pipeline import ingest


def _write(p, lines: list[bytes]):
    p.write_bytes(b"\n".join(lines) + b"\n")
    return p


def test_malformed_jsonl_rows_become_rejects(tmp_path):
    src = _write(tmp_path / "bad.jsonl", [
        json.dumps({"problem": "What is $2+2$?", "answer": "4"}).encode(),
        json.dumps({"problem": "What is $3+3$?", "answer": 6}).encode(),  # number answer: fine, as text
        b'{"problem": "broken json", "answer": ',
        b'{"problem": "bad \xff\xfe utf8", "answer": "1"}',
        json.dumps({"problem": ["a", "list"], "answer": "1"}).encode(),
        json.dumps({"answer": "1"}).encode(),  # no problem at all
        json.dumps({"problem": "x" * 3_000_000, "answer": "1"}).encode(),  # enormous field
        json.dumps({"problem": "Unbalanced $\\frac{1}{2$", "answer": "1"}).encode(),  # kept here; filter rejects
    ])
    m = ingest(str(src), tmp_path / "out")
    assert m.rows_in == 8
    assert m.rows_kept + m.rows_rejected == 8
    assert m.rejected_by_reason == {
        "ingest_malformed_json": 1, "ingest_invalid_utf8": 1, "ingest_problem_not_string": 1,
        "ingest_missing_problem": 1, "ingest_oversized_field": 1,
    }
    kept = read_table(tmp_path / "out" / "kept").to_pylist()
    assert [r["answer"] for r in kept] == ["4", "6", "1"]
    assert m.stats["read_path"] == "python"  # the arrow reader failed, the line-by-line path took over
    rej = read_table(tmp_path / "out" / "rejected").to_pylist()
    assert all(r["reject_stage"] == "ingest" for r in rej)


def test_csv_with_invalid_utf8_and_ragged_rows(tmp_path):
    src = tmp_path / "a.csv"
    src.write_bytes(b'id,problem,answer\n1,"What is $1+1$?",2\n2,"bad \xff",3\n3,"short row"\n')
    m = ingest(str(src), tmp_path / "out")
    assert m.rows_in == 3 and m.rows_kept == 1
    assert m.rejected_by_reason == {"ingest_invalid_utf8": 1, "ingest_malformed_csv": 1}


def test_mapping_and_boxed_mapping(tmp_path):
    src = tmp_path / "m.jsonl"
    src.write_text(json.dumps({"q": "Compute $1+2$.", "sol": r"so $\boxed{3}$", "uid": "u1"}) + "\n")
    m = ingest(str(src), tmp_path / "out", mapping="problem=q,answer=boxed(sol),solution=sol,id=uid")
    row = read_table(tmp_path / "out" / "kept").to_pylist()[0]
    assert (row["problem"], row["answer"], row["source_id"], row["answer_type"]) == ("Compute $1+2$.", "3", "u1", "integer")
    assert m.rows_kept == 1


def test_clear_errors(tmp_path):
    with pytest.raises(SourceError, match="no such file"):
        ingest(str(tmp_path / "missing.jsonl"), tmp_path / "o")
    src = tmp_path / "m.jsonl"
    src.write_text(json.dumps({"q": "x"}) + "\n")
    with pytest.raises(SourceError, match="lacks"):
        ingest(str(src), tmp_path / "o2", mapping="problem=question")
    with pytest.raises(SourceError, match="bad mapping field"):
        ingest(str(src), tmp_path / "o3", mapping="problme=q")
    with pytest.raises(SourceError, match="unknown adapter"):
        ingest(str(src), tmp_path / "o4", adapter="nope")
    with pytest.raises(SourceError, match="cannot tell the source format"):
        ingest(str(src), tmp_path / "o5")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(SourceError, match="unknown file type"):
        ingest(str(tmp_path / "x.txt"), tmp_path / "o6")


def test_cli_error_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "flows.cli", "ingest", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no such file" in r.stderr


def test_ingest_rerun_is_a_no_op(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps({"problem": "What is $1+1$?", "answer": "2"}) + "\n")
    m1 = ingest(str(src), tmp_path / "out")
    before = (tmp_path / "out" / "kept" / "shard_00000.parquet").stat().st_mtime_ns
    m2 = ingest(str(src), tmp_path / "out")
    assert not m1.skipped and m2.skipped
    assert (tmp_path / "out" / "kept" / "shard_00000.parquet").stat().st_mtime_ns == before
    src.write_text(json.dumps({"problem": "What is $1+2$?", "answer": "3"}) + "\n")  # input changed: re-run
    assert not ingest(str(src), tmp_path / "out").skipped
