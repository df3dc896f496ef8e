"""Schema/dataclass agreement, atomic shard writes, streaming reads, manifest-last skip and restart."""

from __future__ import annotations

import dataclasses
import json
import types
import typing

import pyarrow as pa
import pytest

from curate.core.manifest import Manifest
from curate.core.runner import StageError, run_stage
from curate.core.schema import REJECT_SCHEMA, SCHEMA, Record, records_to_table
from curate.core.shards import ShardWriter, count_rows, iter_batches, read_table, shard_paths

_PY = {pa.string(): str, pa.int32(): int, pa.int64(): int, pa.float32(): float, pa.bool_(): bool}


def test_dataclass_matches_schema():
    fields = dataclasses.fields(Record)
    assert [f.name for f in fields] == SCHEMA.names
    hints = typing.get_type_hints(Record)
    for f in SCHEMA:
        args = [a for a in typing.get_args(hints[f.name]) if a is not type(None)] or [hints[f.name]]
        if pa.types.is_list(f.type):
            assert typing.get_origin(args[0]) is list
        else:
            assert args[0] is _PY[f.type], f.name
        # non-nullable columns are the ones without a None default in the dataclass
        nullable = isinstance(hints[f.name], types.UnionType) and type(None) in typing.get_args(hints[f.name])
        assert nullable == f.nullable, f.name
    assert REJECT_SCHEMA.names[-3:] == ["reject_stage", "reject_reason", "reject_detail"]


def _recs(n):
    return [Record(id=f"{i:016x}", source="t", source_id=str(i), origin="mem", problem=f"p{i}", answer=str(i))
            for i in range(n)]


def test_shard_writer_bounds_shards_and_leaves_no_tmp(tmp_path):
    w = ShardWriter(tmp_path, SCHEMA, rows_per_shard=4)
    w.write(records_to_table(_recs(5)))
    w.write(records_to_table(_recs(5)))
    shards = w.close()
    # 10 rows at 4 per shard -> 4, 4, 2
    assert [s["rows"] for s in shards] == [4, 4, 2]
    assert [p.name for p in shard_paths(tmp_path)] == ["shard_00000.parquet", "shard_00001.parquet", "shard_00002.parquet"]
    assert not list(tmp_path.glob("*.tmp"))
    assert count_rows(tmp_path) == 10
    assert sum(t.num_rows for t in iter_batches(tmp_path, batch_size=3)) == 10


def test_readers_ignore_tmp_files(tmp_path):
    w = ShardWriter(tmp_path, SCHEMA, rows_per_shard=100)
    w.write(records_to_table(_recs(3)))
    # a crash mid-shard leaves only a .tmp: nothing is visible to readers
    assert shard_paths(tmp_path) == []
    w.abort()
    assert not list(tmp_path.iterdir())


def test_same_rows_same_bytes(tmp_path):
    for sub in ("a", "b"):
        w = ShardWriter(tmp_path / sub, SCHEMA)
        w.write(records_to_table(_recs(7)))
        w.close()
    assert (tmp_path / "a/shard_00000.parquet").read_bytes() == (tmp_path / "b/shard_00000.parquet").read_bytes()


def test_run_stage_skips_complete_output_and_restarts_incomplete(tmp_path):
    calls = []

    def body(run):
        calls.append(1)
        run.emit(records_to_table(_recs(3)))

    m1 = run_stage("ingest", tmp_path, [{"x": 1}], {"c": 1}, body)
    assert m1.rows_kept == 3 and not m1.skipped and len(calls) == 1
    m2 = run_stage("ingest", tmp_path, [{"x": 1}], {"c": 1}, body)
    assert m2.skipped and len(calls) == 1  # complete manifest, same inputs and config: nothing done
    with pytest.raises(StageError, match="made with other settings"):  # new config: refused without force
        run_stage("ingest", tmp_path, [{"x": 1}], {"c": 2}, body)
    assert len(calls) == 1 and Manifest.load(tmp_path).config == {"c": 1}  # and nothing was touched
    run_stage("ingest", tmp_path, [{"x": 1}], {"c": 2}, body, force=True)
    assert len(calls) == 2
    run_stage("ingest", tmp_path, [{"x": 2}], {"c": 2}, body)  # new inputs, same settings: re-run
    assert len(calls) == 3
    # an interrupted run leaves no manifest; the next run starts clean, rows are not doubled
    (tmp_path / "manifest.json").unlink()
    m4 = run_stage("ingest", tmp_path, [{"x": 1}], {"c": 2}, body)
    assert m4.rows_kept == 3 and read_table(tmp_path / "kept").num_rows == 3
    assert json.loads((tmp_path / "manifest.json").read_text())["rows_in"] == 3


def test_run_stage_failure_writes_no_manifest(tmp_path):
    def body(run):
        run.emit(records_to_table(_recs(2)))
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        run_stage("ingest", tmp_path, [], {}, body)
    assert not (tmp_path / "manifest.json").exists()
    assert not list((tmp_path / "kept").glob("*.tmp"))


def test_stage_reset_discards_closed_shards(tmp_path):
    # the ingest fallback restarts a stage after the fast reader failed part way: shards it already
    # closed must not survive next to the new ones, and counters start again
    from curate.core.runner import StageRun

    run = StageRun("t", tmp_path, rows_per_shard=2)
    run.emit(records_to_table(_recs(5)))  # closes 2 shards, 1 row pending in a .tmp
    run.kept.flush()  # written in the writer's thread
    assert len(shard_paths(tmp_path / "kept")) == 2
    run.reset()
    assert shard_paths(tmp_path / "kept") == [] and run.rows_in == 0 and run.kept.rows == 0
    run.emit(records_to_table(_recs(1)))
    run.kept.close()
    assert count_rows(tmp_path / "kept") == 1


def test_shard_writer_raises_what_failed_in_its_thread(tmp_path):
    # shards are written in a background thread: a failure there (here the folder is a file) surfaces at close
    from curate.core.shards import ShardWriter

    (tmp_path / "kept").write_text("not a folder")
    w = ShardWriter(tmp_path / "kept", SCHEMA, rows_per_shard=2)
    with pytest.raises(OSError):
        w.write(records_to_table(_recs(3)))
        w.close()


def test_a_write_that_fails_in_the_writer_thread_at_the_end_leaves_nothing_half_written(tmp_path, monkeypatch):
    # the last batches may still be in the writers' threads when the body returns: their failure (a full disk)
    # surfaces at close, and both writers are aborted then as after a failing body
    import pyarrow.parquet as pq

    from curate.core.runner import reject_table

    real = pq.ParquetWriter.write_table
    calls = {"kept": 0}

    def flaky(self, table, *a, **k):
        if "/kept/" in str(self.where):
            calls["kept"] += 1
            if calls["kept"] == 2:
                raise OSError(28, "No space left on device")
        return real(self, table, *a, **k)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", flaky)

    def body(run):
        t = records_to_table(_recs(4))
        run.emit(t.slice(0, 2), reject_table(t.slice(2, 1), "ingest", ["x"]))
        run.emit(t.slice(3, 1))

    with pytest.raises(OSError):
        run_stage("ingest", tmp_path, [], {}, body)
    assert not list(tmp_path.rglob("*.tmp")) and not (tmp_path / "manifest.json").exists()
