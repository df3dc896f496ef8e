"""The work folder of one disk-engine run (``WORK``, inside the stage's output folder until the stage is done): its
layout's version, the jobs of the per-shard steps, ``Work`` (the reads every later step makes of the shards' files),
and the files dropped once the pairs are found."""

from __future__ import annotations

import json
import mmap
import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from curate.clean.dedup import DedupConfig
from curate.clean.dedup_disk.files import RANGES
from curate.clean.dedup_disk.signatures import EXACT, FEATURES, TEXT_FEATURES, ShardJob, record_dtype
from curate.core.arrays import unique_inverse

WORK = "work"  # the step-1 files, inside the stage's output folder until the stage is done


FORMAT = 5  # the work files' layout (2: exact groups before signatures; 3: features as Arrow IPC; 4: band entries as
# columns of 24 bytes, counts in the features; 5: judge records, signatures with the judge's features); another
# starts over


PART_ENTRIES = 1_000_000  # entries merged at once (24 bytes each; with the sort's copies about 80 MB)


def parts_for(entries: int) -> int:
    """Key ranges per band: a power of two, so that one range holds about ``PART_ENTRIES`` entries at most."""
    p = 1
    while entries / p > PART_ENTRIES and p < RANGES:
        p *= 2
    return p


def jobs(shards: list[Path], work: Path, cfg: DedupConfig, prio: dict[str, int]) -> list[ShardJob]:
    """The job of steps 1 and 3 for each input shard (its global row offset from the shards' metadata)."""
    rows = [pq.ParquetFile(p).metadata.num_rows for p in shards]
    offsets = np.r_[0, np.cumsum(rows)].astype(int).tolist()
    return [ShardJob(i, str(p), offsets[i], str(work), cfg, tuple(prio.items())) for i, p in enumerate(shards)]


def claim_work(work: Path) -> None:
    """The work folder, emptied first when it holds files of another layout (a run killed under another version)."""
    mark = work / "format.json"
    if work.is_dir() and any(work.iterdir()):
        try:
            same = json.loads(mark.read_text()).get("format") == FORMAT
        except (OSError, ValueError, AttributeError):
            same = False
        if not same:
            for f in work.iterdir():
                if f.is_file():
                    f.unlink()
    work.mkdir(parents=True, exist_ok=True)
    if not mark.exists():
        mark.write_text(json.dumps({"format": FORMAT}))


_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)  # POSIX (elsewhere the pages stay mapped until the run ends)


class Work:
    """The files of one dedup run in its work folder (``WORK``), and reads of them: the steps 2, 4 and 5 that
    follow (``exact``, ``buckets``, ``judge``) read the shards' files through it."""

    def __init__(self, folder: Path, cfg: DedupConfig, rows: list[int]):
        self.folder, self.cfg, self.rows = folder, cfg, rows
        self.offsets = np.r_[0, np.cumsum(rows)].astype(np.int64)
        self.n = int(self.offsets[-1])
        if self.n >= 1 << 31:  # pair keys are u * n + v in int64; a group's best row is found as rank << 40 | row
            raise ValueError(f"dedup: {self.n} rows; the disk engine takes at most 2^31 rows a run")
        self.entries = list(rows)  # band entries per shard (``shard_work``: the rows no other row stands for)
        self.parts = parts_for(self.n)
        # the rows a group's first row stands for (``exact_groups``): one byte a row, the only per-row array held
        self.stands_in = np.zeros(self.n, bool)
        self.exact: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None  # ``exact_groups()``
        self._ids: tuple[int, np.ndarray] | None = None  # the shard ``ids`` holds
        # each shard's feature table and signature array, mapped once (``_mapped``); a read lets go of the pages it
        # touched when done (``_let_go``), so that what this process holds stays what it reads at once
        self._maps: dict[tuple[str, int], tuple[mmap.mmap | None, object]] = {}
        self.token = os.urandom(8).hex()  # this run's Work, as a worker process keeps it between jobs (``_worker_work``)

    def cuts(self, kind: str, row: int) -> list[np.ndarray]:
        """Where each key range starts in row ``row`` of every shard's sorted ``kind`` file."""
        return [np.array(np.load(self.folder / f"{kind}_{i:05d}.cuts.npy", mmap_mode="r")[row])
                for i in range(len(self.rows))]

    def slices(self, kind: str, row: int, part: int, dtype: np.dtype, cuts: list[np.ndarray],
                columns: int = 1) -> list[np.ndarray]:
        """Key range ``part`` (of ``self.parts``) of row ``row`` of every shard's sorted ``kind`` file, in shard
        order (``cuts``: ``cuts(kind, row)``); a file of ``columns`` stores each row as that many arrays of
        ``dtype`` one after the other (the band files), and each comes back as its own array."""
        step = RANGES // self.parts
        sizes = self.entries if kind == "bands" else self.rows
        spans = [(int(c[part * step]), int(c[(part + 1) * step])) for c in cuts]
        total, size = sum(b - a for a, b in spans), dtype.itemsize
        outs = [np.empty(total, dtype) for _ in range(columns)]
        views, at = [o.view(np.uint8) for o in outs], 0  # read straight into place: no copy per shard, no concatenation
        for i, ((a, b), m) in enumerate(zip(spans, sizes, strict=True)):
            if b > a:
                with open(self.folder / f"{kind}_{i:05d}.bin", "rb") as f:
                    for c, view in enumerate(views):
                        f.seek(((row * columns + c) * m + a) * size)
                        got = f.readinto(view[at * size : (at + b - a) * size].data)
                        if got != (b - a) * size:
                            raise RuntimeError(f"dedup: {kind}_{i:05d}.bin is shorter than its cuts say (a run killed "
                                               "mid-write?)")
                at += b - a
        return outs

    def _shard_of(self, rows: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.offsets, rows, "right") - 1

    def by_shard(self, rows: np.ndarray) -> list[tuple[int, slice]]:
        """For sorted ``rows``, each shard that holds some of them with the slice of ``rows`` that are its."""
        cut = np.searchsorted(rows, self.offsets)
        return [(i, slice(int(cut[i]), int(cut[i + 1]))) for i in np.flatnonzero(np.diff(cut)).tolist()]

    def columns(self, rows: np.ndarray, names: list[str], arrow: bool = False) -> dict:
        """The feature columns ``names`` of ``rows`` (any order, repeats allowed), read shard by shard: numpy arrays,
        or with ``arrow`` arrow arrays (strings without a Python object each)."""
        # sorted distinct rows (the stage's nodes) are in their own order already: no second gather
        in_order = len(rows) < 2 or bool((rows[1:] > rows[:-1]).all())
        uniq, inv = (rows, None) if in_order else unique_inverse(rows, self.n)
        if set(names) & set(TEXT_FEATURES) and self.stands_in[uniq].any():
            raise RuntimeError("dedup: text features read for a row its group's first row stands for (not computed)")
        out: dict[str, list] = {k: [] for k in names}
        for i, part in self.by_shard(uniq):
            local = uniq[part] - self.offsets[i]
            t = self._mapped("feat", i).select(names).take(pa.array(local))
            for k in names:
                out[k].append(t[k].combine_chunks() if arrow else t[k].to_numpy(zero_copy_only=False))
            self._let_go("feat", i)  # what was taken is copied
        got: dict = {}
        for k, parts in out.items():
            if arrow:
                whole = pa.concat_arrays(parts) if parts else pa.nulls(0, FEATURES.field(k).type)
                got[k] = whole if in_order else whole.take(pa.array(inv))
            else:
                whole = np.concatenate(parts) if parts else np.zeros(0, object)
                got[k] = whole if in_order else whole[inv]
        return got

    def ids(self, start: int, m: int) -> np.ndarray:
        """The content id hashes of rows ``start .. start + m``, for a pass that reads the rows in order: each
        shard's column is read once and held while the pass is in it."""
        out = []
        while m > 0:
            i = int(self._shard_of(np.array([start]))[0])
            if self._ids is None or self._ids[0] != i:
                if self._ids is not None:
                    self._let_go("feat", self._ids[0])  # the pass has left that shard
                self._ids = (i, self._mapped("feat", i)["idh"].to_numpy())  # a view of the mapped file
            a = start - int(self.offsets[i])
            part = self._ids[1][a : a + m]
            if len(part) == 0:
                raise RuntimeError(f"dedup: feat_{i:05d}.arrow holds fewer rows than its shard (a damaged work folder)")
            out.append(part)
            start, m = start + len(part), m - len(part)
        return np.concatenate(out) if out else np.zeros(0, np.uint64)

    def rows_of_ids(self, comp_of: dict[int, int]) -> dict[int, int]:
        """Every row whose content id hash is a key of ``comp_of``, with its value (a scan of the id files)."""
        keys = np.array(sorted(comp_of), np.uint64)
        out: dict[int, int] = {}
        for i in range(len(self.rows)):
            e = np.fromfile(self.folder / f"exact_{i:05d}.bin", dtype=EXACT)
            hit = np.flatnonzero(np.isin(e["idh"], keys))
            for h, r in zip(e["idh"][hit].tolist(), e["row"][hit].tolist(), strict=True):
                out[int(r)] = comp_of[int(h)]
        return out

    def records(self, rows: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """The judge records (``record_dtype``) of sorted unique ``rows``, read shard by shard (only the pages that
        hold them). A shard's record file holds its rows that no other row stands for, in order. ``out``: an array
        of at least as many records to fill (the first ``len(rows)``, returned)."""
        if self.stands_in[rows].any():
            raise RuntimeError("dedup: a signature read for a row its group's first row stands for (not computed)")
        if out is None:
            out = np.empty(len(rows), record_dtype(self.cfg))
        out = out[: len(rows)]
        for i, sel in self.by_shard(rows):
            a, b = int(self.offsets[i]), int(self.offsets[i + 1])
            local = rows[sel] - a
            stands = self.stands_in[a:b]
            if stands.any():  # each row's place in the file: its rows that no other row stands for
                local = (np.cumsum(~stands) - 1)[local]
            np.take(self._mapped("rec", i), local, axis=0, out=out[sel])  # straight into place: no gathered copy
            self._let_go("rec", i)
        return out

    def _mapped(self, kind: str, i: int):
        """Shard ``i``'s feature table (``feat``: an Arrow table over the mapped file) or judge records (``rec``),
        mapped on first use and kept: a judge reads every shard for each chunk of pairs, and opening a file each
        time (the IPC footer, the npy header, a new mapping) cost more than the reads."""
        got = self._maps.get((kind, i))
        if got is None:
            path = self.folder / (f"feat_{i:05d}.arrow" if kind == "feat" else f"rec_{i:05d}.npy")
            with open(path, "rb") as f:
                if kind == "rec":
                    version = np.lib.format.read_magic(f)
                    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                    shape, _, dtype = read(f)
                    start = f.tell()
                size = os.fstat(f.fileno()).st_size
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
            if kind == "feat":
                obj: object = pa.ipc.open_file(pa.py_buffer(mm)).read_all()
            elif mm is None or int(np.prod(shape)) == 0:
                obj = np.zeros(shape, dtype)
            else:
                obj = np.frombuffer(mm, dtype, int(np.prod(shape)), start).reshape(shape)
            got = self._maps[(kind, i)] = (mm, obj)
        return got[1]

    def close(self, kind: str | None = None) -> None:
        """Drop the mapped files, or those of one ``kind`` (``feat``, ``rec``; unmapped once no array read from them
        is left)."""
        for key in [k for k in self._maps if kind is None or k[0] == kind]:
            del self._maps[key]

    def _let_go(self, kind: str, i: int) -> None:
        """Let go of the pages of shard ``i``'s mapped file that a read touched (the mapping stays): they count in
        this process's resident memory until then, and a judge's chunk touches pages all over every file."""
        mm = self._maps[(kind, i)][0]
        if mm is not None and _DONTNEED is not None:
            mm.madvise(_DONTNEED)  # a read-only file mapping: the pages stay in the page cache


def drop_pair_inputs(w: Work) -> threading.Thread | None:
    """Once ``pairs`` is done: the band files and the judge records go, deleted in a thread of its own (started here)
    while the caller goes on. Only the feature files are read after the pairs, and deleting a file frees its page
    cache pages, which costs the kernel about 0.3 s a GB (10 GB at 10M rows without copies): at the stage's end it
    took 3.4 s with nothing else running; here it runs beside the stage's next steps, which use one core.

    Each shard's ``done_`` marker goes first and its files are moved into ``dropped/`` before the thread starts, so
    that a run killed after this computes them again, and one started again in this process writes new files that
    the thread cannot reach. None when there are no such files (``near`` off)."""
    if not w.cfg.near:
        return None
    w.close("rec")  # judged in this process (no pool): its mappings go first
    trash = w.folder / "dropped"
    trash.mkdir(exist_ok=True)
    for i in range(len(w.rows)):
        (w.folder / f"done_{i:05d}.json").unlink(missing_ok=True)
        for name in (f"bands_{i:05d}.bin", f"bands_{i:05d}.cuts.npy", f"rec_{i:05d}.npy"):
            try:
                os.replace(w.folder / name, trash / name)
            except OSError:  # gone already, or held open where that forbids a move: the stage's end deletes it
                pass
    thread = threading.Thread(target=shutil.rmtree, args=(trash,), kwargs={"ignore_errors": True},
                              name="dedup-drop", daemon=True)
    thread.start()
    return thread
