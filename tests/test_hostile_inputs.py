"""What a careless or hostile user feeds gradus gets a one-line answer or a recorded rejection, never a traceback and
never a silent drop: each case one that was met on real commands (issue 45)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.core.shards import read_table
from curate.pipeline import ingest
from flows.cli import main


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err, "nothing said"
    assert not any(line.startswith("Traceback") for line in err), "\n".join(err)
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


def test_a_link_where_gradus_writes_its_lock_or_a_temporary_file_is_refused_and_its_target_kept(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text('{"problem": "What is 1+1?", "answer": "2"}\n')
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / ".gradus-stage.lock").symlink_to(victim)
    assert main(["ingest", str(src), "--out", str(out)]) == 2
    assert _err(capsys).endswith(".gradus-stage.lock is a symbolic link: gradus writes no file through a link; remove "
                                 "it or use another folder")
    (out / ".gradus-stage.lock").unlink()
    (out / ".gradus-stage.json.tmp").symlink_to(victim)  # named like the marker's temporary file
    assert main(["ingest", str(src), "--out", str(out)]) == 2
    assert ".gradus-stage.json.tmp is a symbolic link" in _err(capsys)
    assert victim.read_text() == "precious\n" and (out / ".gradus-stage.json.tmp").is_symlink()


def test_non_finite_numbers_never_reach_a_json_file_or_a_run(tmp_path, capsys):
    from curate.core.shards import write_json_atomic

    write_json_atomic(tmp_path / "m.json", {"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": -float("inf")}})
    strict = json.loads((tmp_path / "m.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the file"))
    assert strict == {"a": None, "b": [None, 1.5], "c": {"d": None}}
    for value in ("nan", "inf"):
        assert main(["estimate", str(tmp_path), "--out", str(tmp_path / "e"), "--temperature", value, "--dry-run"]) == 2
        assert f"temperature={value}" in _err(capsys)
        assert main(["train", "--data", str(tmp_path), "--out", str(tmp_path / "t"), "--temperature", value, "--dry-run"]) == 2
        assert _err(capsys) == f"gradus train: error: temperature must be a finite number, got {value}"
    assert main(["estimate", str(tmp_path), "--out", str(tmp_path / "e"), "--temperature", "0", "--dry-run"]) == 2
    assert "temperature 0 is greedy decoding: all k=10 samples would be one and the same" in _err(capsys)
    assert not (tmp_path / "e").exists() and not (tmp_path / "t").exists()


def test_golds_keep_the_digits_the_file_wrote_and_non_finite_ones_are_rejected(tmp_path):
    # through a float: 2^100 -> 1.2676506002282294e+30, 10^18 + 1 -> 1e+18, 2^60 + 1 -> 1.152921504606847e+18,
    # 1e400 -> inf, 0.33333333333333333 -> 0.3333333333333333, NaN and Infinity -> the golds "nan" and "inf"
    lines = ['{"problem": "What is 2^100?", "answer": 1267650600228229401496703205376}',
             '{"problem": "What is 10^18 + 1?", "answer": 1000000000000000001}',
             '{"problem": "What is 2^60 + 1?", "answer": 1152921504606846977}',
             '{"problem": "What is 10^400?", "answer": 1e400}',
             '{"problem": "What is 1/3 to 17 places?", "answer": 0.33333333333333333}',
             '{"problem": "What is 5/2 to two places?", "answer": 2.50}',
             '{"problem": "What is 0/0?", "answer": NaN}',
             '{"problem": "What is 1/0?", "answer": -Infinity}']
    src = tmp_path / "golds.jsonl"
    src.write_text("\n".join(lines) + "\n")
    arr = tmp_path / "golds.json"  # the same rows as one JSON array
    arr.write_text("[" + ",".join(lines) + "]")
    want = ["1267650600228229401496703205376", "1000000000000000001", "1152921504606846977", "1e400",
            "0.33333333333333333", "2.50"]
    for i, s in enumerate((src, arr)):
        out = tmp_path / f"o{i}"
        ingest(str(s), out)
        assert read_table(out / "kept")["answer"].to_pylist() == want
        rej = read_table(out / "rejected").to_pylist()
        assert [(r["reject_reason"], r["reject_detail"]) for r in rej] == [
            ("ingest_non_finite_number", "non_finite_number:answer=NaN"),
            ("ingest_non_finite_number", "non_finite_number:answer=-Infinity")]


def test_one_bad_byte_rejects_its_row_naming_file_and_line(tmp_path):
    src = tmp_path / "latin.jsonl"
    src.write_bytes(b'{"problem": "What is 1+1?", "answer": "2"}\n{"problem": "Caf\xe9: what is 2+2?", "answer": "4"}\n'
                    b'{"problem": "What is 3+3?", "answer": "6"}\n')
    ingest(str(src), tmp_path / "o")
    assert read_table(tmp_path / "o" / "kept")["answer"].to_pylist() == ["2", "6"]
    (r,) = read_table(tmp_path / "o" / "rejected").to_pylist()
    assert (r["source_id"], r["reject_reason"]) == ("latin.jsonl:1", "ingest_invalid_utf8")


def test_sources_refuse_fifos_follow_no_link_loop_and_read_each_file_once(tmp_path, capsys):
    import os
    import time

    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    rows = "".join(f'{{"problem": "What is {i}+1?", "answer": "{i + 1}"}}\n' for i in range(5))
    (d / "a.jsonl").write_text(rows)
    (d / "self").symlink_to(".")  # a loop: glob's recursive mode read a.jsonl 41 times through it
    (d / "sub" / "loop1").symlink_to("loop2")
    (d / "sub" / "loop2").symlink_to("loop1")
    (d / "alias.jsonl").symlink_to("a.jsonl")  # a second name of the same file
    os.mkfifo(d / "pipe.jsonl")  # opened, a FIFO blocks its reader forever
    os.mkfifo(tmp_path / "p.json")
    assert main(["ingest", str(tmp_path / "p.json"), "--out", str(tmp_path / "o0")]) == 2
    assert _err(capsys).endswith("p.json: not a regular file (a FIFO); gradus reads files, folders and globs")
    for i, spec in enumerate((str(d), f"{d}/**/*.jsonl", f"{d}/**")):
        t0 = time.monotonic()
        out = tmp_path / f"o{i + 1}"
        ingest(spec, out)
        assert time.monotonic() - t0 < 30
        assert read_table(out / "kept").num_rows == 5  # a.jsonl, once
        skipped = json.loads((out / "manifest.json").read_text())["stats"]["files_not_read"]
        assert skipped["alias.jsonl"] == "the same file as a.jsonl (read once)"
        assert skipped["pipe.jsonl"] == "not a regular file (a FIFO)"


def test_a_stage_refuses_an_input_changed_after_its_stage_and_reruns_over_a_lost_reject(tmp_path, capsys):
    import pyarrow.parquet as pq

    src = tmp_path / "in.jsonl"
    src.write_text('{"problem": "What is 1+1?", "answer": "2"}\n'
                   '{"problem": "Which is larger, 2 or 3? (A) 2 (B) 3", "answer": "B"}\n'
                   '{"problem": "What is 2+3?", "answer": "5"}\n')
    i, f = tmp_path / "i", tmp_path / "f"
    assert main(["ingest", str(src), "--out", str(i)]) == 0
    assert main(["filter", str(i), "--out", str(f)]) == 0
    (shard,) = (f / "kept").glob("*.parquet")
    good = shard.read_bytes()
    t = pq.read_table(shard)
    pq.write_table(t.set_column(t.schema.get_field_index("answer"), "answer", pa.array(["0"] * t.num_rows)), shard)
    assert main(["dedup", str(f), "--out", str(tmp_path / "d")]) == 2  # same row count, every answer "0"
    assert _err(capsys).endswith(f"{f}: an input changed after its filter stage finished: {shard} does not hash as its "
                                 "manifest says (it changed after its stage wrote it); run that stage again (--force), "
                                 "or restore the file")
    assert not (tmp_path / "d").exists()
    capsys.readouterr()
    assert main(["filter", str(i), "--out", str(f)]) == 0  # the stage itself: not "already complete", it runs again
    assert "already complete" not in capsys.readouterr().out and shard.read_bytes() == good
    for p in (f / "rejected").glob("*.parquet"):
        p.unlink()  # the rejected rows lost
    assert main(["filter", str(i), "--out", str(f)]) == 0
    assert "already complete" not in capsys.readouterr().out
    assert read_table(f / "rejected").num_rows == 1


def test_deep_json_duplicated_columns_and_foreign_parquet_get_a_line_or_a_rejected_row(tmp_path, capsys):
    deep_obj = '{"a": ' * 5000 + "1" + "}" * 5000  # parses, but json.dumps of it overflows ("while encoding")
    src = tmp_path / "deep.jsonl"
    src.write_text('{"problem": "What is 1+1?", "answer": "2"}\n{"problem": "p", "answer": "1", "x": ' + deep_obj + "}\n")
    assert main(["ingest", str(src), "--out", str(tmp_path / "o1")]) == 0
    assert _rejected(tmp_path / "o1") == {"ingest_malformed_json": 1}
    capsys.readouterr()  # its warning (the fast reader gave up) went to a handler an earlier test's main() installed
    arr = tmp_path / "deep.json"  # one JSON array: the whole parse fails, said in a line
    arr.write_text('[{"problem": "What is 1+1?", "answer": "2"}, ' + "[" * 100_000 + "]" * 100_000 + "]")
    assert main(["ingest", str(arr), "--out", str(tmp_path / "o2")]) == 2
    assert "a value nested deeper than Python's JSON reader goes" in _err(capsys)
    (tmp_path / "dup.csv").write_text("problem,answer,answer\nWhat is 1+1?,2,3\n")
    pq.write_table(pa.table([pa.array(["What is 1+1?"]), pa.array(["2"]), pa.array(["3"])],
                            names=["problem", "answer", "answer"]), tmp_path / "dup.parquet")
    for name in ("dup.csv", "dup.parquet"):
        out = tmp_path / f"o_{name}"
        assert main(["ingest", str(tmp_path / name), "--out", str(out)]) == 2
        assert _err(capsys).endswith(f"{name}: the column 'answer' appears 2 times; rename all but one in the file")
        assert not out.exists()  # the claim is undone: no empty folder left behind
    (tmp_path / "plain").mkdir()
    pq.write_table(pa.table({"question": ["q"], "x": [1]}), tmp_path / "plain" / "a.parquet")
    assert main(["filter", str(tmp_path / "plain"), "--out", str(tmp_path / "f")]) == 2
    assert _err(capsys).endswith(f"{tmp_path / 'plain'}: not gradus records (a.parquet has no 'id', 'problem', 'answer' "
                                 f"column); read it with `gradus ingest {tmp_path / 'plain'}` first")
    assert not (tmp_path / "f").exists()


def test_an_input_given_twice_and_an_out_inside_a_globs_folder_are_refused(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_text('{"problem": "What is 1+1?", "answer": "2"}\n')
    assert main(["ingest", f"{src}/*.jsonl", "--out", str(src / "out")]) == 2
    assert _err(capsys).endswith(f"--out {src / 'out'} lies inside the input {src}: choose a folder outside it")
    assert main(["ingest", str(src / "a.jsonl"), "--out", str(tmp_path / "i")]) == 0
    capsys.readouterr()
    assert main(["filter", str(tmp_path / "i"), str(tmp_path / "i" / "kept"), "--out", str(tmp_path / "f")]) == 2
    assert _err(capsys).endswith(f"{tmp_path / 'i' / 'kept'}: the same input as {tmp_path / 'i'}; give each input once")
    assert not (tmp_path / "f").exists()


def test_a_line_nested_past_arrows_reader_is_a_rejected_row_not_a_crash(tmp_path):
    deep = "[" * 20_000 + "]" * 20_000  # arrow's JSON reader overflows its stack on this (the process dies, SIGSEGV)
    src = tmp_path / "deep.jsonl"
    src.write_text('{"problem": "What is 1+1?", "answer": "2"}\n{"problem": "p", "answer": "1", "x": ' + deep + "}\n")
    out = tmp_path / "o"  # in a child process: a crash here would take the test session with it
    r = subprocess.run([sys.executable, "-m", "flows.cli", "ingest", str(src), "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _rejected(out) == {"ingest_malformed_json": 1}
    assert read_table(out / "kept").column("problem").to_pylist() == ["What is 1+1?"]
