"""Sources that change under a scheduled flow: folders of shards, globs and save_to_disk folders fingerprinted file
by file; hub ids pinned to the commit they are read at (here from a hub cache laid out as huggingface_hub lays it
out, offline: no network in tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.core.errors import SourceError
from curate.core.manifest import Manifest
from curate.core.shards import iter_batches
from curate.pipeline import ingest
from curate.sources.readers import detect_format, file_fingerprint, read_source


def _rows(lo: int, hi: int) -> list[dict]:
    return [{"problem": f"What is ${i} + {i + 1}$?", "answer": str(2 * i + 1)} for i in range(lo, hi)]


def _shard(folder: Path, name: str, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / name)
    return folder / name


def _kept(out: Path, cols=("source_id", "problem")) -> list[dict]:
    return [r for t in iter_batches(out / "kept", columns=list(cols)) for r in t.to_pylist()]


def test_a_folder_a_glob_and_a_saved_dataset_are_one_source_each(tmp_path):
    snap = tmp_path / "snap"
    _shard(snap / "data", "train-00000-of-00002.parquet", _rows(0, 5))
    _shard(snap / "data", "train-00001-of-00002.parquet", _rows(5, 12))
    (snap / ".cache").mkdir()
    (snap / ".cache" / "train.parquet.lock").write_text("")  # what a hub download leaves: not data
    glob = str(snap / "data" / "train-*.parquet")
    assert detect_format(str(snap)) == detect_format(glob) == "parquet"
    assert sum(t.num_rows for t in read_source(str(snap))) == sum(t.num_rows for t in read_source(glob)) == 12

    import datasets

    datasets.Dataset.from_list(_rows(0, 12)).save_to_disk(str(tmp_path / "saved"))
    assert detect_format(str(tmp_path / "saved")) == "arrow"

    problems = {}
    for name, spec in (("folder", str(snap)), ("glob", glob), ("saved", str(tmp_path / "saved"))):
        m = ingest(spec, tmp_path / f"out_{name}")
        assert (m.rows_in, m.rows_kept) == (12, 12), name
        problems[name] = sorted(r["problem"] for r in _kept(tmp_path / f"out_{name}"))
    assert problems["folder"] == problems["glob"] == problems["saved"]
    ids = {r["source_id"] for r in _kept(tmp_path / "out_folder")}
    assert "snap/data/train-00001-of-00002.parquet:6" in ids  # the folder, the file, the row within the file
    assert Manifest.load(tmp_path / "out_folder").inputs[0]["files"] == 2

    (snap / "more").mkdir()
    (snap / "more" / "x.jsonl").write_text(json.dumps(_rows(20, 21)[0]) + "\n")
    with pytest.raises(SourceError, match=r"files of several formats \(jsonl, parquet\).*one glob per format"):
        detect_format(str(snap))
    with pytest.raises(SourceError, match="no data files"):
        detect_format(str(tmp_path / "nothing-*.parquet"))


def test_a_shard_added_or_changed_reingests_and_the_old_rows_keep_their_ids(tmp_path):
    snap = tmp_path / "shards"
    _shard(snap, "part-0.parquet", _rows(0, 5))
    _shard(snap, "part-1.parquet", _rows(5, 9))
    fp0 = file_fingerprint(str(snap))
    first = ingest(str(snap), tmp_path / "out")
    ids0 = {r["source_id"]: r["problem"] for r in _kept(tmp_path / "out")}
    assert ingest(str(snap), tmp_path / "out").skipped and file_fingerprint(str(snap)) == fp0

    _shard(snap, "part-00.parquet", _rows(9, 12))  # sorts between the two: the others' row numbers stay theirs
    fp1 = file_fingerprint(str(snap))
    again = ingest(str(snap), tmp_path / "out")
    assert fp1 != fp0 and not again.skipped and (first.rows_in, again.rows_in) == (9, 12)
    ids1 = {r["source_id"]: r["problem"] for r in _kept(tmp_path / "out")}
    assert {k: ids1[k] for k in ids0} == ids0 and len(ids1) == 12

    _shard(snap, "part-1.parquet", _rows(5, 8))  # one row fewer: same names, other content
    assert file_fingerprint(str(snap)) not in (fp0, fp1)


def _hub_cache(root: Path, name: str, commits: dict[str, list[dict]], main: str) -> Path:
    """A hub cache as huggingface_hub writes one: snapshots/<commit>/data/train-*.parquet and refs/main."""
    repo = root / ("datasets--" + name.replace("/", "--"))
    for sha, rows in commits.items():
        _shard(repo / "snapshots" / sha / "data", "train-00000-of-00001.parquet", rows)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(main)
    return repo


def test_a_hub_source_is_read_at_its_commit_and_a_new_commit_reingests_it(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    old, new = "1" * 40, "2" * 40
    repo = _hub_cache(tmp_path / "hub", "owner/toy", {old: _rows(0, 4)}, main=old)

    first = ingest("owner/toy", tmp_path / "out")
    assert first.inputs[0]["revision"] == old and first.rows_kept == 4
    assert first.stats["revision"] == {"commit": old, "resolved_by": "cache", "asked": None}
    assert ingest("owner/toy", tmp_path / "out").skipped  # the same commit: nothing to do

    _hub_cache(tmp_path / "hub", "owner/toy", {new: _rows(0, 6)}, main=new)  # main moved on (an online run fetched it)
    second = ingest("owner/toy", tmp_path / "out")
    assert not second.skipped and second.inputs[0]["revision"] == new and second.rows_kept == 6

    pinned = ingest("owner/toy", tmp_path / "pinned", revision=old)  # a config's revision: that commit, whatever main says
    assert pinned.inputs[0]["revision"] == old and pinned.rows_kept == 4

    from data_cards.render import write_card

    card = write_card(tmp_path / "out", tmp_path / "card").read_text()
    assert f"`owner/toy` at `{new}`" in card

    (repo / "refs" / "main").unlink()
    with pytest.raises(SourceError) as e:
        ingest("owner/toy", tmp_path / "gone")
    msg = str(e.value)
    assert msg.startswith("owner/toy: offline (HF_HUB_OFFLINE=1), and neither a cached snapshot") and "\n" not in msg
    assert "set the source's revision to a commit" in msg
    with pytest.raises(SourceError, match="a revision is for hub sources only"):
        ingest(str(tmp_path / "hub"), tmp_path / "x", revision=old)


def test_a_hub_that_cannot_be_reached_falls_back_to_the_cache(tmp_path, monkeypatch):
    """Online mode, but the HTTP client fails to connect (its own exception type, not an OSError): the cache's ref is
    used, and without one the source fails in one line."""
    from huggingface_hub import HfApi, constants

    from curate.sources.hub import resolve

    class ConnectError(Exception):  # what httpx raises on a refused connection or a failed DNS lookup
        pass

    def refuse(self, *a, **k):
        raise ConnectError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(HfApi, "dataset_info", refuse)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    _hub_cache(tmp_path / "hub", "owner/toy", {"3" * 40: _rows(0, 2)}, main="3" * 40)
    p = resolve("owner/toy")
    assert (p.commit, p.how) == ("3" * 40, "cache")
    with pytest.raises(SourceError, match=r"^owner/other: the Hub cannot be reached \(ConnectError\), and neither"):
        resolve("owner/other")
