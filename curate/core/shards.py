"""Parquet shard I/O: bounded zstd shards written atomically, streamed back by batch, manifest last.

Layout of a stage's output folder::

    OUT/kept/shard_00000.parquet ...      rows of SCHEMA
    OUT/rejected/shard_00000.parquet ...  rows of REJECT_SCHEMA (reject_reason says why)
    OUT/manifest.json                     written last: if it exists, the shard set is complete

Each shard is written to ``*.tmp`` and ``os.replace``d into place; readers never look at ``*.tmp``.
The same rows in the same order give the same bytes (no timestamps inside shards).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from curate.core.errors import open_no_follow

ROWS_PER_SHARD = 100_000  # bounds memory: a stage holds at most one shard's worth of rows
ROW_GROUP_SIZE = 10_000
READ_BATCH = 16_384
MANIFEST = "manifest.json"


class ShardWriter:
    """Accumulates tables and writes ``prefix_{i:05d}.parquet`` shards of at most ``rows_per_shard`` rows.

    The encoding and writing happen in one background thread (pyarrow's writer releases the GIL), in the order the
    tables came, so a stage computes its next batch while the last one is compressed: the same calls in the same
    order, so the same bytes. At most ``PENDING`` tables wait; an error in the thread is raised by the next
    ``write`` or by ``close``."""

    PENDING = 2

    def __init__(self, folder: Path, schema: pa.Schema, rows_per_shard: int = ROWS_PER_SHARD, prefix: str = "shard"):
        self.folder = Path(folder)
        self.schema = schema
        self.rows_per_shard = rows_per_shard
        self.prefix = prefix
        self.shards: list[dict] = []
        self.rows = 0
        self._tmp: Path | None = None
        self._writer: pq.ParquetWriter | None = None
        self._in_shard = 0
        self._thread: ThreadPoolExecutor | None = None
        self._pending: deque[Future] = deque()

    def write(self, table: pa.Table) -> None:
        if table.schema != self.schema:
            table = table.select(self.schema.names).cast(self.schema)
        self.rows += table.num_rows
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="shard-writer")
        self._pending.append(self._thread.submit(self._write, table))
        while len(self._pending) > self.PENDING:
            self._pending.popleft().result()

    def _write(self, table: pa.Table) -> None:
        start = 0
        while start < table.num_rows:
            if self._writer is None:
                self._writer = self._open()
            take = min(self.rows_per_shard - self._in_shard, table.num_rows - start)
            self._writer.write_table(table.slice(start, take), row_group_size=ROW_GROUP_SIZE)
            self._in_shard += take
            start += take
            if self._in_shard >= self.rows_per_shard:
                self._close_shard()

    def _open(self) -> pq.ParquetWriter:
        self.folder.mkdir(parents=True, exist_ok=True)
        name = f"{self.prefix}_{len(self.shards):05d}.parquet"
        self._tmp = self.folder / (name + ".tmp")
        self._writer = pq.ParquetWriter(
            self._tmp, self.schema, compression="zstd", write_statistics=True, store_schema=True
        )
        self._in_shard = 0
        return self._writer

    def _close_shard(self) -> None:
        assert self._writer is not None and self._tmp is not None
        self._writer.close()
        final = self._tmp.with_suffix("")  # strip .tmp
        os.replace(self._tmp, final)
        self.shards.append({"path": final.name, "rows": self._in_shard, "sha256": file_sha256(final)})
        self._writer, self._tmp, self._in_shard = None, None, 0

    def flush(self) -> None:
        """Wait until every table handed over is written (an error in the thread is raised here)."""
        while self._pending:
            self._pending.popleft().result()

    def _wait(self) -> None:
        """``flush``, then the thread stopped."""
        try:
            self.flush()
        finally:
            self._pending.clear()
            if self._thread is not None:
                self._thread.shutdown(wait=True)
                self._thread = None

    def close(self) -> list[dict]:
        try:
            self._wait()
            if self._writer is not None:
                self._close_shard()
        except BaseException:
            self.abort()  # the shard being written goes; the ones closed before stay listed
            raise
        return self.shards

    def abort(self) -> None:
        try:
            self._wait()
        except Exception:  # noqa: BLE001 - aborting: what failed in the thread is moot, the partial shard goes
            pass
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # noqa: BLE001 - a writer that failed mid-shard: its file goes all the same
                pass
            if self._tmp is not None and self._tmp.exists():
                self._tmp.unlink()
            self._writer = None


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def shard_paths(folder: Path) -> list[Path]:
    """Complete shards of a folder in name order (``*.tmp`` are never returned)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.parquet") if p.is_file())


def iter_batches(
    folder: Path, columns: list[str] | None = None, batch_size: int = READ_BATCH, ahead: int = 2
) -> Iterator[pa.Table]:
    """Stream a shard folder as tables of at most ``batch_size`` rows; never loads a whole file. Up to ``ahead``
    batches are read and decoded in a background thread while the caller works on the last (pyarrow releases the
    GIL): a stage's reading overlaps its compute; 0 reads in the caller's thread."""
    def batches() -> Iterator[pa.Table]:
        for path in shard_paths(folder):
            pf = pq.ParquetFile(path)
            for rb in pf.iter_batches(batch_size=batch_size, columns=columns):
                yield pa.Table.from_batches([rb])

    yield from (read_ahead(batches(), ahead) if ahead > 0 else batches())


_DONE = object()


def read_ahead(items: Iterator, ahead: int) -> Iterator:
    """``items``, produced in a background thread at most ``ahead`` in advance. An error there is raised here, in
    order; a caller that stops early stops the thread."""
    q: queue.Queue = queue.Queue(maxsize=ahead)
    stop = threading.Event()

    def put(x) -> bool:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for x in items:
                if not put((x, None)):
                    return
            put((_DONE, None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            put((_DONE, e))

    t = threading.Thread(target=produce, name="read-ahead", daemon=True)
    t.start()
    try:
        while True:
            x, err = q.get()
            if x is _DONE:
                if err is not None:
                    raise err
                return
            yield x
    finally:
        stop.set()
        t.join()


def count_rows(folder: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in shard_paths(folder))


def read_table(folder: Path, columns: list[str] | None = None) -> pa.Table:
    """Whole folder as one table: for tests and small outputs only."""
    paths = shard_paths(folder)
    if not paths:
        raise FileNotFoundError(f"no parquet shards in {folder}")
    return pa.concat_tables(pq.read_table(p, columns=columns) for p in paths)


def kept_dirs(dirs: list[Path]) -> list[Path]:
    """The kept-rows folder of each stage output in ``dirs`` (``stage_dir``)."""
    return [stage_dir(Path(d)) for d in dirs]


def keep_rows(t: pa.Table, keep: pa.Array | pa.ChunkedArray, rejected: pa.Table) -> pa.Table:
    """The rows of ``t`` that ``keep`` marks: ``t`` itself when ``rejected`` (the batch's other rows) is empty, since a
    filter copies every kept row's text."""
    return t.filter(keep) if rejected.num_rows else t


def stage_dir(path: Path) -> Path:
    """The kept-rows folder of a stage output (``OUT/kept``), or ``path`` itself if it holds shards."""
    path = Path(path)
    if (path / "kept").is_dir():
        return path / "kept"
    if shard_paths(path):
        return path
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such folder")
    what = "an empty folder" if path.is_dir() and not any(path.iterdir()) else "not a gradus stage output"
    raise FileNotFoundError(f"{path}: {what}: no kept/ shards and no .parquet files to read (give a stage's output "
                            "folder, e.g. runs/demo/stages/1_ingest/00_synthetic)")


def read_manifest(out: Path) -> dict | None:
    p = Path(out) / MANIFEST
    if not p.exists():
        return None
    with open(p) as f:
        return json.load(f)


@contextlib.contextmanager
def atomic_path(path: Path, sync: bool = True) -> Iterator[Path]:
    """A temporary name beside ``path`` (``NAME.tmp``) to write to; on success it is synced (``sync``: off for scratch
    files a killed run computes again) and renamed to ``path``, so a reader never sees half a file; on failure it is
    removed. The one way gradus writes a file whole."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    # made here, refusing a link by that name (a writer opening the name would write the link's target); a plain file
    # there is a temporary a killed run of gradus left
    os.close(open_no_follow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
    try:
        yield tmp
        if sync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json_atomic(path: Path, obj: dict) -> None:
    """``obj`` as JSON, whole or not at all. A non-finite number (NaN, infinity: a mean of nothing, a setting given as
    nan) is written as null, so the file is JSON for every reader (Python's own ``NaN`` literal is not)."""
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        json.dump(finite(obj), f, indent=2, sort_keys=True, default=str, allow_nan=False)
        f.write("\n")


def finite(obj):
    """``obj`` with every non-finite float (NaN, +-infinity) inside it replaced by None."""
    import math

    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj
