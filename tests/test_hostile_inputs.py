"""What a careless or hostile user feeds gradus gets a one-line answer or a recorded rejection, never a traceback and
never a silent drop: each case one that was met on real commands (issue 45)."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.core.shards import read_table
from curate.pipeline import ingest
from flows.cli import main


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "nothing said"
    assert not any(line.startswith("Traceback") for line in err)
    return err[-1]


def _rejected(out) -> dict:
    return json.loads((out / "manifest.json").read_text())["rejected_by_reason"]


def test_json_nested_ten_thousand_deep_is_a_rejected_row(tmp_path, capsys):
    deep = "[" * 10_000 + "]" * 10_000
    src = tmp_path / "deep.jsonl"
    src.write_text('{"problem": "What is 1+1?", "answer": "2"}\n' + '{"problem": ' + deep + ', "answer": "1"}\n' + deep + "\n")
    assert main(["ingest", str(src), "--out", str(tmp_path / "o")]) == 0
    assert _rejected(tmp_path / "o") == {"ingest_malformed_json": 2}
    assert not (tmp_path / "o" / ".gradus-stage.json.tmp").exists()


def test_a_foreign_manifest_is_named_as_such(tmp_path, capsys):
    for i, body in enumerate(("[1, 2]", '{"a": 1}')):
        d = tmp_path / f"f{i}"
        d.mkdir()
        (d / "manifest.json").write_text(body)
        assert main(["show", str(d)]) == 2
        assert "not a gradus manifest" in _err(capsys)
        assert main(["filter", str(d), "--out", str(tmp_path / f"out{i}")]) == 2
        assert "not a gradus manifest" in _err(capsys) and not (tmp_path / f"out{i}").exists()
    (tmp_path / "empty").mkdir()
    assert main(["filter", str(tmp_path / "empty"), "--out", str(tmp_path / "x")]) == 2
    assert "empty: an empty folder: no kept/ shards" in _err(capsys)


def test_numbers_for_problems_and_objects_for_answers_are_rejected(tmp_path):
    src = tmp_path / "n.jsonl"
    src.write_text('{"problem": 1, "answer": "1"}\n{"problem": 2, "answer": "2"}\n'
                   '{"problem": "What is 1+1?", "answer": {"value": 2}}\n{"problem": "What is 2+2?", "answer": 4}\n')
    ingest(str(src), tmp_path / "j")
    assert _rejected(tmp_path / "j") == {"ingest_problem_not_string": 2, "ingest_answer_not_scalar": 1}
    assert read_table(tmp_path / "j" / "kept").column("answer").to_pylist() == ["4"]  # a number is a fine answer
    pq.write_table(pa.table({"problem": [1, 2, 3], "answer": ["1", "2", "3"]}), tmp_path / "n.parquet")
    ingest(str(tmp_path / "n.parquet"), tmp_path / "p")
    assert _rejected(tmp_path / "p") == {"ingest_problem_not_string": 3}


def test_a_folder_source_never_leaves_its_folder_and_says_what_it_skipped(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "away").mkdir()
    (tmp_path / "src" / "a.jsonl").write_text('{"problem": "What is 1+1?", "answer": "2"}\n')
    (tmp_path / "src" / "notes.txt").write_text("my notes\n")
    (tmp_path / "away" / "secret.jsonl").write_text('{"problem": "secret", "answer": "1"}\n')
    (tmp_path / "src" / "link.jsonl").symlink_to(tmp_path / "away" / "secret.jsonl")
    m = ingest(str(tmp_path / "src"), tmp_path / "o")
    assert m.rows_in == 1 and m.inputs[0]["files"] == 1
    assert set(m.stats["files_not_read"]) == {"link.jsonl", "notes.txt"}
    assert "outside the source folder" in m.stats["files_not_read"]["link.jsonl"]


def test_a_wrong_format_and_a_truncated_gzip_are_named_and_keep_their_rows(tmp_path, capsys):
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"problem": f"What is {i}+1?", "answer": str(i + 1)}) + "\n" for i in range(3000)))
    assert main(["ingest", str(src), "--format", "parquet", "--out", str(tmp_path / "o")]) == 2
    assert _err(capsys).startswith(f"gradus ingest: error: {src}: not a readable Parquet file (its name says jsonl")
    whole = gzip.compress(src.read_bytes())
    (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    m = ingest(str(tmp_path / "cut.jsonl.gz"), tmp_path / "gz")
    assert m.rows_kept > 1000 and m.rejected_by_reason == {"ingest_truncated_file": 1}


def test_a_csv_quote_never_closed_swallows_nothing(tmp_path):
    src = tmp_path / "q.csv"
    src.write_text('problem,answer\n"What is 1+1?,2\nWhat is 2+2?,4\nWhat is 3+3?,6\n')
    m = ingest(str(src), tmp_path / "o")
    assert (m.rows_in, m.rows_kept, m.rejected_by_reason) == (3, 2, {"ingest_malformed_csv": 1})


def test_small_mistakes_get_small_answers(tmp_path, capsys):
    for n in ("-5", "0"):
        assert main(["ingest", f"synthetic:n={n}", "--out", str(tmp_path / f"s{n}")]) == 2
        assert "n must be >= 1" in _err(capsys)
    src = tmp_path / "a.jsonl"
    src.write_text('{"problem": "What is 1+1?", "answer": "2"}\n')
    assert main(["ingest", str(src), "--mapping", "problem=question", "--out", str(tmp_path / "m")]) == 2
    msg = _err(capsys)
    assert "['question'] which the source lacks (has: ['problem', 'answer'])" in msg and "_row" not in msg
    from rl_stage.trainer import TrainConfig, TrainError

    with pytest.raises(TrainError, match="lr must be > 0, got -1"):
        TrainConfig(data=["x"], lr=-1).check()


def test_the_flow_refuses_a_folder_inside_its_source_and_a_link(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.jsonl").write_text('{"problem": "What is 1+1?", "answer": "2"}\n')
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f'sources = [{{spec = "{tmp_path / "src"}", name = "a"}}]\n')
    assert main(["flow", "run", str(cfg), "--out", str(tmp_path / "src" / "out")]) == 2
    assert "lies inside the source" in _err(capsys)
    assert sorted(p.name for p in (tmp_path / "src").iterdir()) == ["a.jsonl"]  # nothing written there
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty", target_is_directory=True)
    assert main(["flow", "run", str(cfg), "--out", str(tmp_path / "link")]) == 2
    assert f"--out {tmp_path / 'link'} is a file or a link" in _err(capsys)
    assert not any((tmp_path / "empty").iterdir())


def test_a_flow_whose_every_source_fails_says_so_in_a_line(tmp_path, capsys, prefect_harness):
    (tmp_path / "a.jsonl").write_text('{"problem": "What is 1+1?", "answer": "2"}\n')
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(f'sources = [{{spec = "{tmp_path / "a.jsonl"}", name = "a", format = "parquet"}}]\n')
    assert main(["flow", "run", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert _err(capsys).startswith("gradus flow: error: no source could be read: ")
