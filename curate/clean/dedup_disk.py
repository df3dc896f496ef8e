"""Dedup at scale: exact groups first, then signatures and LSH band keys per shard on disk, candidate pairs from
band files cut into key ranges.

The in-memory engine (``curate.clean.dedup_stage`` with ``engine="memory"``) holds a MinHash signature and a
dozen values per row: 1.6 GB at a million rows, sixteen at ten million. This engine holds one input shard's worth
at a time, one byte a row, and the texts that have a duplicate. It decides every row exactly as the in-memory
engine does: the same pairs, judged by the same ``judge_near`` and clustered by the same ``clusters``. Its steps
follow the design of datatrove's MinHash pipeline (signatures, buckets, cluster, filter), with exact duplicates
taken out first, as datatrove's users run its exact stage before MinHash. The steps, numbered in the order they
run (the same numbers in ``build``, the flow's tasks and docs/dedup-decontam.md):

1. **Content ids per shard, in worker processes** (``shard_ids``): ``exact_NNNNN.bin``, the rows' content id hashes with
    their gold, year, source rank and a hash of their text, sorted by content id. Cheap: no canonical form.
2. **Exact groups** (``prepare``, ``Work.exact_groups``). The rows of one content id that carry one gold string,
   one year and one text are one node from here on: the group's first row stands for it (``stands_in`` marks the
   others; ``stand_NNNNN.npy`` per shard). Every pair another row of the group would make is the pair the first
   row makes, judged alike. The rows of the other groups (golds that differ, or the same content id spelled with
   other spaces, which can tokenize differently) are paired each with the first row of its id, as in memory.
3. **Signatures and band keys per shard, in worker processes** (``shard_work``), for the rows no other row
    stands for only (on inputs made of copies, most rows need no signature):
   - ``feat_NNNNN.arrow``: the features later steps read (content id, gold, source, year for every row;
     numbers, drawing and statement key for those rows);
   - ``rec_NNNNN.npy``: their judge records (``record_dtype``): the signature, ``num_perm`` uint32, with the
     fixed-width features the judge reads (``JUDGE_FIELDS``), so that judging a pair gathers one record a row;
   - ``bands_NNNNN.bin``: for each band, the band key (its ``rows`` hashes, 16 bytes) with the row and a word of
     its numbers (part of their hash and their count), ordered by key range (the key's top bits), row order within
     a range: 24 bytes an entry, stored as columns (each band's key words, then its second words, then its rows), so
     that the reader gathers from plain arrays (ordered and gathered by ``kernels.band_loop``, a counting sort);
   - ``*.cuts.npy``: where each of 4096 key ranges starts in the band files (and in the sorted ``exact`` files), so
     that later steps read a key range with plain reads.

   Each file is written to a temporary name and renamed, and ``ids_NNNNN.json`` / ``done_NNNNN.json`` last, so a
   killed run restarts from the shards already done.
4. **Pairs per band and key range** (``band_pairs``, one band per worker process). The slices of that key range are read
   from every shard's band file, and each entry whose key an earlier entry holds is paired with the first row of its
   key (the in-memory rule): ``_key_pairs``, a hash table per bucket of the keys (``kernels.pair_loop``), or a sort
   of them (``_by_key``) where numba is missing. The entries carry what rejects most collisions without a
   signature: other numbers in as many of them (a collision that the entry's short word of the numbers cannot
   reject goes on to the judge, which reads the whole hash). The key ranges split each band so that one range holds
   at most ``PART_ENTRIES`` entries, whatever the number of rows. A band's pairs go to its file
   (``pairs_NNN.bin``, in row order) with where each of ``PAIR_RANGES`` ranges of rows starts in it.
5. **Judging** (``_pair_job``: ``judge``, in the worker processes, once every band is done). A job takes a run of
   consecutive row ranges from every band's file, so every copy of a pair lands in one job: each distinct pair is
   judged once, at the first band that brings it (its verdict is its own whatever band brings it), and no set of the
   pairs judged is kept anywhere. Pairs are judged on their whole signatures and features (the judge records), the
   later rows' read once a job and held, the first rows' read shard by shard so that each shard's pages are mapped
   once a job; two rows of one content id are never a near pair (their own exact step pairs them).
   A near pair comes back only when it can decide a row (``Work.decides``: it may merge or show a gold conflict),
   so what the caller holds grows with those, not with every collision.

The band files and judge records then go (``drop_pair_inputs``, in a thread), and the caller compares golds,
clusters the nodes that have a pair (union-find over them only) and streams the shards again to write them out.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import threading
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather
import pyarrow.parquet as pq

from curate.clean.dedup import (
    DedupConfig,
    hash_strings,
    judge_near,
    loose_pairs,
    minhash,
    numbers_with_counts,
    same_years,
    statement_hashes,
)
from curate.clean.kernels import compiled as kernel_of
from curate.clean.kernels import pair_scratch
from curate.clean.text import asy_keys, canonical, tokens
from curate.core.arrays import unique_inverse
from curate.core.shards import atomic_path

# a band entry's columns: the band key's two words, and the row (high 32 bits) with ``_num_word`` (low 32 bits)
BAND_COLUMNS = ("hi", "lo", "rn")
SATURATED = 255  # a count of numbers this high or higher, in ``_num_word``'s low byte: unknown, never rejects
# gh: a hash of the gold string; fh: a hash of the statement's text (two spellings of one content id, "$A B C$" and
# "$ABC$", may tokenize differently, so only rows of one text are one node)
EXACT = np.dtype([("idh", "<u8"), ("row", "<i8"), ("gh", "<u8"), ("fh", "<u8"), ("year", "<i8"), ("rank", "<i8")])
GROUP = np.dtype([("idh", "<u8"), ("first", "<i8"), ("best", "<i8"), ("rank", "<i8"), ("size", "<i8")])
WORK = "work"  # the step-1 files, inside the stage's output folder until the stage is done
PART_ENTRIES = 1_000_000  # entries merged at once (24 bytes each; with the sort's copies about 80 MB)
READ_COLUMNS = ["id", "source", "source_id", "answer", "problem", "year"]
FEATURES = pa.schema([("id", pa.string()), ("source", pa.string()), ("source_id", pa.string()),
                      ("gold", pa.string()), ("digits", pa.string()), ("rank", pa.int64()), ("idh", pa.uint64()),
                      ("ans", pa.uint64()), ("year", pa.int64()), ("numh", pa.uint64()), ("draw", pa.uint64()),
                      ("stmt", pa.uint64()), ("cnt", pa.int32())])


def features(t: pa.Table, cfg: DedupConfig, prio: dict[str, int],
             some: np.ndarray | None = None) -> tuple[pa.Table, np.ndarray | None]:
    """What dedup reads of a batch of rows: the features table (``FEATURES``) and the MinHash signatures (or None
    when near dedup is off). Both engines compute them here. ``some``: a mask of the rows whose text features
    (``TEXT_FEATURES``) and signatures are computed (the signatures of those rows only, in order); the others' text
    features are null (the rows an exact group's first row stands for, which no later step reads)."""
    gold = pc.fill_null(t["answer"], "")
    cheap = {
        "id": t["id"], "source": t["source"], "source_id": t["source_id"], "gold": gold,
        "rank": pa.array(_ranks(t["source"], prio)),
        "idh": hash_strings(t["id"], compiled=True),
        "ans": hash_strings(pc.replace_substring_regex(gold, r"\s+", ""), compiled=True),
        "year": pc.fill_null(t["year"], -1).cast(pa.int64()),
    }
    if some is None or some.all():
        text, sig = _text_features(t["problem"], cfg)
        return pa.table({**cheap, **text}, schema=FEATURES), sig
    at = np.flatnonzero(some)
    text, part = _text_features(pc.take(t["problem"], pa.array(at)), cfg)
    index = np.full(t.num_rows, len(at), np.int64)  # a row not computed takes the null appended below
    index[at] = np.arange(len(at))
    for k, v in text.items():
        v = pa.array(v) if isinstance(v, np.ndarray) else v
        text[k] = pa.concat_arrays([v, pa.nulls(1, v.type)]).take(pa.array(index))
    return pa.table({**cheap, **text}, schema=FEATURES), part


TEXT_FEATURES = ("digits", "numh", "draw", "stmt", "cnt")  # read from the statement's text (with the signature)
JUDGE_FIELDS = ("idh", "numh", "draw", "stmt", "ans", "year", "cnt")  # the features a judge record holds


def record_dtype(cfg: DedupConfig) -> np.dtype:
    """A judge record (``rec_NNNNN.npy``): a row's signature and its ``JUDGE_FIELDS``, 8 bytes each (440 bytes at 96
    permutations). The judge gathers one record per row of its pairs: the features stored by rows rather than as the
    feature table's columns, one page touched a row rather than one a column (a take of seven Arrow columns of the
    mapped table cost the judge more than the signatures did)."""
    return np.dtype([("sig", "<u4", (cfg.num_perm,))] + [(k, "<i8" if k in ("year", "cnt") else "<u8")
                                                         for k in JUDGE_FIELDS])


def _text_features(problems: pa.Array | pa.ChunkedArray, cfg: DedupConfig) -> tuple[dict, np.ndarray | None]:
    canon = canonical(problems, compiled=True)  # once a batch: numbers, tokens, keys and shingles read it
    toks = tokens(problems, canon, compiled=True)
    nums, cnt = numbers_with_counts(problems, canon, compiled=True)
    asy = asy_keys(problems)
    text = {
        "digits": nums,
        "numh": hash_strings(nums, compiled=True),
        "draw": np.where(pc.equal(asy, "").to_numpy(zero_copy_only=False), np.uint64(0), hash_strings(asy, compiled=True)),
        "stmt": statement_hashes(problems, toks, compiled=True),
        "cnt": cnt,
    }
    return text, (minhash(problems, cfg, toks) if cfg.near else None)


def _ranks(sources: pa.Array | pa.ChunkedArray, prio: dict[str, int]) -> np.ndarray:
    """Each row's source priority (``prio``; unlisted sources rank after every listed one)."""
    if not prio:
        return np.zeros(len(sources), np.int64)
    values = np.r_[np.array(list(prio.values()), np.int64), len(prio)]
    at = pc.fill_null(pc.index_in(sources, value_set=pa.array(list(prio), pa.string())), len(prio))
    return values[at.to_numpy(zero_copy_only=False)]


def _save(path: Path, arr: np.ndarray) -> None:
    with atomic_path(path, sync=False) as tmp, open(tmp, "wb") as f:
        np.save(f, arr)


WRITE_CHUNK = 1 << 16  # bytes per write(2) of the scratch files (``_write``)


def _write(f, data) -> None:
    """``data`` (an array, C order, or any buffer) into the open binary file ``f`` in writes of ``WRITE_CHUNK``
    bytes: the bytes ``ndarray.tofile`` writes. On Linux 6.18's ext4 (this project's 2-core machines) a buffered
    write of 128 KB or more into new pages of the page cache runs at about 370 MB/s and one of 64 KB at about
    3.3 GB/s (``dev/write_sizes.py``); the scratch files are about 1 KB per row with a signature, so a large
    write would spend more time in the kernel than the signatures cost to compute."""
    if isinstance(data, np.ndarray):
        view = np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
    else:
        view = memoryview(data).cast("B")
    for at in range(0, len(view), WRITE_CHUNK):
        f.write(view[at : at + WRITE_CHUNK])


@dataclass(frozen=True)
class ShardJob:
    index: int
    path: str
    offset: int  # global row number of the shard's first row
    work: str
    cfg: DedupConfig
    prio: tuple[tuple[str, int], ...]


def shard_ids(job: ShardJob) -> int:
    """Step 1 for one input shard: its rows' content ids, golds, years, source ranks and a hash of their text,
    sorted by content id (``exact_NNNNN``); returns its rows. Cheap: no canonical form, no signature. Skips a shard
    whose files are there."""
    work, i = Path(job.work), job.index
    work.mkdir(parents=True, exist_ok=True)
    done = work / f"ids_{i:05d}.json"
    if done.exists():
        return int(json.loads(done.read_text())["rows"])
    prio = dict(job.prio)
    parts = []
    for rb in pq.ParquetFile(job.path).iter_batches(batch_size=65_536, columns=["id", "source", "answer", "problem",
                                                                                 "year"]):
        e = np.empty(rb.num_rows, EXACT)
        e["idh"], e["gh"] = hash_strings(rb["id"], compiled=True), hash_strings(pc.fill_null(rb["answer"], ""), compiled=True)
        # two spellings of one content id ("$A B C$", "$ABC$") may differ in what dedup reads of the text: only
        # rows of the same text stand for one another
        e["fh"] = _mix(hash_strings(rb["problem"], compiled=True))
        e["year"] = pc.fill_null(rb["year"], -1).cast(pa.int64()).to_numpy(zero_copy_only=False)
        e["rank"] = _ranks(rb["source"], prio)
        parts.append(e)
    exact = np.concatenate(parts) if parts else np.zeros(0, EXACT)
    m = len(exact)
    exact["row"] = np.arange(job.offset, job.offset + m, dtype=np.int64)
    exact = exact[np.lexsort((exact["row"], exact["idh"]))]
    _save_sorted(work, f"exact_{i:05d}", exact, exact["idh"][None, :])
    done.write_text(json.dumps({"rows": m}))
    return m


def shard_work(job: ShardJob) -> tuple[int, int]:
    """Step 3 for one input shard (see the module), for the rows no other row stands for (``stand_NNNNN.npy``, from
    ``prepare``); returns its rows and its band entries. Skips a shard whose files are all there."""
    work, i, cfg = Path(job.work), job.index, job.cfg
    done = work / f"done_{i:05d}.json"
    if done.exists():
        d = json.loads(done.read_text())
        return int(d["rows"]), int(d["entries"])
    prio = dict(job.prio)
    stand = np.load(work / f"stand_{i:05d}.npy")
    own = np.flatnonzero(~stand)  # the rows with a signature and band entries
    feats = []
    start = done_rows = 0
    # the band files' words of every own row, filled batch by batch (one copy of the signatures, no list to join)
    words = np.empty((cfg.bands, 2, len(own)), np.uint64) if cfg.near else None
    # each batch's judge records go to the file as they come (``_RecordFile``); what the band files need is kept
    with _RecordFile(work / f"rec_{i:05d}.npy", len(own), record_dtype(cfg)) if cfg.near else nullcontext() as rec_file:
        for rb in pq.ParquetFile(job.path).iter_batches(batch_size=65_536, columns=READ_COLUMNS):
            some = ~stand[start : start + rb.num_rows]
            feat, sig = features(pa.Table.from_batches([rb]), cfg, prio, some)
            start += rb.num_rows
            feats.append(feat)
            if sig is not None and rec_file is not None and words is not None:
                rec_file.write(sig, feat.select(list(JUDGE_FIELDS)).take(pa.array(np.flatnonzero(some))))
                _band_words(sig, cfg, words[:, :, done_rows : done_rows + len(sig)])
                done_rows += len(sig)
    feat = pa.concat_tables(feats) if feats else FEATURES.empty_table()
    m = feat.num_rows
    if m != len(stand):
        raise RuntimeError(f"dedup: shard {i} holds {m} rows, its first step read {len(stand)}")
    sink = pa.BufferOutputStream()
    feather.write_feather(feat, sink, compression="uncompressed")  # scratch, read back in this run: Arrow IPC, as is
    with atomic_path(work / f"feat_{i:05d}.arrow", sync=False) as tmp, open(tmp, "wb") as f:
        _write(f, sink.getvalue())
    if cfg.near and words is not None:
        if done_rows != len(own):
            raise RuntimeError(f"dedup: shard {i}: {done_rows} signatures for {len(own)} rows")
        mine = feat.select(["numh", "cnt"]).take(pa.array(own))  # no nulls: to_numpy keeps the types
        _save_bands(work, f"bands_{i:05d}", words, cfg, own + job.offset, mine["numh"].to_numpy(),
                    mine["cnt"].to_numpy())
    done.write_text(json.dumps({"rows": m, "entries": int(len(own)) if cfg.near else 0}))
    return m, int(len(own)) if cfg.near else 0


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a bijection of uint64 that spreads its input over the whole range."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _band_words(sig: np.ndarray, cfg: DedupConfig, out: np.ndarray) -> None:
    """Into ``out`` ((bands, 2, rows) uint64): each band's ``cfg.rows`` uint32 hashes of each row as two words (equal
    words: equal band; with fewer than 4 hashes the rest of the 16 bytes are zeros), each band's words contiguous."""
    n = len(sig)
    if cfg.rows == 4:  # one transposing copy of the signatures: band b of a row is its words 2b and 2b + 1
        out[...] = np.ascontiguousarray(sig).view(np.uint64).reshape(n, cfg.bands, 2).transpose(1, 2, 0)
        return
    chunk = np.zeros((n, cfg.bands, 4), np.uint32)
    chunk[:, :, : cfg.rows] = sig[:, : cfg.bands * cfg.rows].reshape(n, cfg.bands, cfg.rows)
    out[...] = chunk.view(np.uint64).transpose(1, 2, 0)


class _RecordFile:
    """A shard's judge record file (``.npy`` of ``rows`` records of ``dtype``, ``record_dtype``), written batch by
    batch under a temporary name and renamed once every row is there."""

    def __init__(self, path: Path, rows: int, dtype: np.dtype):
        self.path, self.rows, self.dtype, self.done = path, rows, dtype, 0
        self._atomic = atomic_path(path, sync=False)

    def __enter__(self) -> _RecordFile:
        self.f = open(self._atomic.__enter__(), "wb")
        np.lib.format.write_array_header_1_0(
            self.f, {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": (self.rows,)})
        return self

    def write(self, sig: np.ndarray, feat: pa.Table) -> None:
        """A batch's records: its rows' signatures and their ``JUDGE_FIELDS`` (``feat``, the same rows: no nulls)."""
        rec = np.empty(len(sig), self.dtype)
        rec["sig"] = sig
        for k in JUDGE_FIELDS:
            rec[k] = feat[k].to_numpy()
        _write(self.f, rec)
        self.done += len(sig)

    def __exit__(self, kind, value, tb) -> None:
        self.f.close()
        if kind is None and self.done != self.rows:
            err = RuntimeError(f"dedup: {self.done} records for {self.rows} rows ({self.path.name})")
            self._atomic.__exit__(RuntimeError, err, None)  # the temporary file removed
            raise err
        self._atomic.__exit__(kind, value, tb)  # renamed when whole, removed on an error


def _num_word(numh: np.ndarray, cnt: np.ndarray) -> np.ndarray:
    """A band entry's word of its numbers: 24 bits of their hash above their count (``SATURATED`` at most). Two
    rows with the same numbers have the same word; two whose words differ in the hash but not in a known count
    hold other numbers in as many of them, never a near pair."""
    count = np.minimum(cnt.astype(np.int64), SATURATED).astype(np.uint64)
    return ((numh & np.uint64(0xFFFFFF)) << np.uint64(8)) | count


RANGE_BITS = 12
RANGES = 1 << RANGE_BITS  # the key ranges a sorted file's cuts are written for (top 12 bits); a run reads groups of them


def _range_order(hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The order a band file needs of entries with first key words ``hi``: by key range (the words' top bits),
    position within a range (the entries of one key in row order); and where each range starts, and the end. A
    stable sort of 16-bit integers, which numpy does as a radix sort (7 ns an entry against 50 for a sort of the whole
    words)."""
    top = (hi >> np.uint64(64 - RANGE_BITS)).astype(np.uint16)
    return np.argsort(top, kind="stable"), np.r_[0, np.cumsum(np.bincount(top, minlength=RANGES))].astype(np.int64)


def _high_bit_order(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Along the last axis, an order of ``words`` (uint64) by their high bits, position within equal high bits, and
    those high bits in that order. The low bits give way to the position, so one plain sort of integers does it
    (no stable argsort)."""
    n = words.shape[-1]
    bits = np.uint64(max(n.bit_length(), 1))
    low = (np.uint64(1) << bits) - np.uint64(1)
    comp = (words & ~low) | np.arange(n, dtype=np.uint64)
    comp.sort(axis=-1)
    return (comp & low).astype(np.int64), comp >> bits


def parts_for(entries: int) -> int:
    """Key ranges per band: a power of two, so that one range holds about ``PART_ENTRIES`` entries at most."""
    p = 1
    while entries / p > PART_ENTRIES and p < RANGES:
        p *= 2
    return p


def _save_bands(work: Path, name: str, words: np.ndarray, cfg: DedupConfig, rows: np.ndarray, numh: np.ndarray,
                cnt: np.ndarray) -> None:
    """A shard's band entries (``BAND_COLUMNS``), each band's in ``_range_order``: band after band, each as its
    columns one after the other, with each band's key-range cuts. ``words``: ``_band_words`` of the rows. The first
    word of a key goes through a bijection (``_mix``): a MinHash value is a minimum, crowded near 0, and the key
    ranges cut on its top bits."""
    cuts = np.empty((cfg.bands, RANGES + 1), np.int64)
    rn = (rows.astype(np.uint64) << np.uint64(32)) | _num_word(numh, cnt)
    kernel = kernel_of("band_loop") if len(rn) else None
    if kernel is not None:  # its columns and scratch, reused band after band
        out, pos = np.empty((3, len(rn)), np.uint64), np.empty(RANGES, np.int64)
    with atomic_path(work / f"{name}.bin", sync=False) as tmp:  # the .bin last: it marks the pair whole
        with open(tmp, "wb") as f:
            for b in range(cfg.bands):
                if kernel is not None:  # mixed, ordered and gathered in one loop (the same bytes)
                    kernel(words[b, 0], words[b, 1], rn, np.uint64(64 - RANGE_BITS), out, cuts[b], pos)
                    _write(f, out)
                    continue
                hi, lo = _mix(words[b, 0]), words[b, 1]
                order, cuts[b] = _range_order(hi)
                for col in (hi[order], lo[order], rn[order]):
                    _write(f, col)
        _save(work / f"{name}.cuts.npy", cuts)


def _save_sorted(work: Path, name: str, arr: np.ndarray, keys: np.ndarray) -> None:
    """A sorted entry file as raw bytes (``name.bin``, read back by ranges with plain reads: no mapping, whose pages
    would count against the reader's memory) and, per row of ``keys``, where each of the ``RANGES`` key ranges
    starts (``name.cuts.npy``)."""
    cuts = np.stack([_ranges(np.ascontiguousarray(k), RANGES) for k in keys])
    _save(work / f"{name}.cuts.npy", cuts)
    with atomic_path(work / f"{name}.bin", sync=False) as tmp, open(tmp, "wb") as f:
        _write(f, arr)


def _ranges(keys: np.ndarray, parts: int) -> np.ndarray:
    """Start of each key range in sorted ``keys`` (uint64, split on their top bits), and the end."""
    if parts == 1:
        return np.array([0, len(keys)], np.int64)
    shift = np.uint64(64 - int(parts).bit_length() + 1)
    starts = np.searchsorted(keys, np.arange(parts, dtype=np.uint64) << shift, "left")
    return np.r_[starts, len(keys)].astype(np.int64)


def _shared(seg: np.ndarray, field: str) -> dict[str, np.ndarray]:
    """The entries whose ``field`` another entry shares (the only ones that can pair), sorted by it, ties in
    their order in ``seg``, as columns. A stable sort merges the shards' sorted runs in about linear time."""
    order = np.argsort(seg[field], kind="stable")
    keys = seg[field][order]
    eq = keys[1:] == keys[:-1]
    shared = np.zeros(len(seg), bool)
    shared[1:] |= eq
    shared[:-1] |= eq
    take = order[shared]
    return {k: seg[k][take] for k in (seg.dtype.names or ())}


def _by_key(seg) -> np.ndarray:
    """Where in ``seg`` (band entries as columns, ``hi`` and ``lo`` read: the shards' runs, in shard order, so
    row order within a key) the entries are whose key another entry shares, grouped by key (the groups in no set
    order), a key's entries in row order.

    One plain sort of integers finds the candidates: a word of each entry's key (the first word, ``_mix``ed, xor a
    multiple of the second) with its low bits given to its position. Among the entries whose high bits another entry
    shares, a run of equal high bits that holds more than one key (two keys may share high bits and differ below)
    is sorted on the whole key and position."""
    n = len(seg["hi"])
    if n == 0:
        return np.zeros(0, np.int64)
    with np.errstate(over="ignore"):  # both words: near duplicates often share a band's first word, not its second
        word = seg["hi"] ^ (seg["lo"] * np.uint64(0x9E3779B97F4A7C15))
    order, top = _high_bit_order(word)
    eq = top[1:] == top[:-1]
    near = np.zeros(n, bool)
    near[1:] |= eq
    near[:-1] |= eq
    cand, top = order[near], top[near]  # by high bits, then position
    if len(cand) == 0:
        return cand
    hi, lo = seg["hi"][cand], seg["lo"][cand]
    new = np.r_[True, top[1:] != top[:-1]]
    run = np.cumsum(new) - 1
    first = np.flatnonzero(new)[run]
    odd = (hi != hi[first]) | (lo != lo[first])
    if odd.any():  # runs of one high part and more than one key: those entries sorted by key within their run
        at = np.flatnonzero(np.isin(run, run[odd]))
        o = at[np.lexsort((cand[at], lo[at], hi[at], run[at]))]
        cand[at], hi[at], lo[at] = cand[o], hi[o], lo[o]
    same = (hi[1:] == hi[:-1]) & (lo[1:] == lo[:-1])
    keep = np.zeros(len(cand), bool)
    keep[1:] |= same
    keep[:-1] |= same
    return cand[keep]


def _key_pairs(seg: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The ``rn`` words of each entry of ``seg`` (band entries as columns, the shards' runs in shard order) whose key
    an earlier entry holds, and of the first entry of its key: ``kernels.pair_loop``, or ``_by_key`` and ``_groups``
    where it is not compiled (the same pairs, in another order)."""
    kernel = kernel_of("pair_loop")
    n = len(seg["hi"])
    if kernel is None:
        at = _by_key(seg)
        later, first = _groups([seg["hi"][at], seg["lo"][at]])
        return seg["rn"][at[later]], seg["rn"][at[first]]
    global _SCRATCH
    if len(_SCRATCH[0]) < n:  # held from band to band in a worker: new pages cost more than the loop
        _SCRATCH = pair_scratch(max(n, 2 * len(_SCRATCH[0])))
    later, first = _SCRATCH[0], _SCRATCH[1]
    # at most 256 buckets: the counting sort's copies go to as many places at once (more thrash the TLB)
    m = kernel(seg["hi"], seg["lo"], min(8, max(1, n.bit_length() - 10)), *_SCRATCH)
    return seg["rn"][later[:m]], seg["rn"][first[:m]]


_SCRATCH = pair_scratch(0)  # ``_key_pairs``' scratch, kept in the process


def _groups(sorted_keys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """For rows sorted by keys (then row): which are not the first of their key, and the position of that first."""
    n = len(sorted_keys[0])
    new = np.zeros(n, bool)
    if n:
        new[0] = True
        for k in sorted_keys:
            new[1:] |= k[1:] != k[:-1]
    start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    later = np.flatnonzero(~new)
    return later, start[later]


class Work:
    """The step-1 files of one dedup run and the steps that read them."""

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

    def _cuts(self, kind: str, row: int) -> list[np.ndarray]:
        """Where each key range starts in row ``row`` of every shard's sorted ``kind`` file."""
        return [np.array(np.load(self.folder / f"{kind}_{i:05d}.cuts.npy", mmap_mode="r")[row])
                for i in range(len(self.rows))]

    def _slices(self, kind: str, row: int, part: int, dtype: np.dtype, cuts: list[np.ndarray],
                columns: int = 1) -> list[np.ndarray]:
        """Key range ``part`` (of ``self.parts``) of row ``row`` of every shard's sorted ``kind`` file, in shard
        order (``cuts``: ``_cuts(kind, row)``); a file of ``columns`` stores each row as that many arrays of
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

    def _by_shard(self, rows: np.ndarray) -> list[tuple[int, slice]]:
        """For sorted ``rows``, each shard that holds some of them with the slice of ``rows`` that are its."""
        cut = np.searchsorted(rows, self.offsets)
        return [(i, slice(int(cut[i]), int(cut[i + 1]))) for i in np.flatnonzero(np.diff(cut)).tolist()]

    def exact_groups(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The rows that share a content id: ``(groups, u, v, mixed)``.

        A group whose rows all carry the same gold string and year (``GROUP``: its first row, its best row by
        source rank then row, its size) is one node from here on: every pair its rows would make is the pair its
        first row makes, judged alike. The rows of the other groups (golds that differ, by a space or more) are
        paired each with the first row of its id, as the in-memory engine pairs them (``u``, ``v``); ``mixed``:
        their content id hashes, sorted."""
        groups, us, vs, mixed = [], [], [], []
        cuts = self._cuts("exact", 0)
        for p in range(self.parts):
            seg = _shared(self._slices("exact", 0, p, EXACT, cuts)[0], "idh")  # sorted by (idh, row): so are the shards' runs
            n = len(seg["idh"])
            if n == 0:
                continue
            start = np.flatnonzero(np.r_[True, seg["idh"][1:] != seg["idh"][:-1]])
            size = np.diff(np.r_[start, n])
            first = np.repeat(start, size)
            odd = ((seg["gh"] != seg["gh"][first]) | (seg["fh"] != seg["fh"][first])
                   | (seg["year"] != seg["year"][first])).astype(np.int8)
            is_mixed = np.maximum.reduceat(odd, start).astype(bool)
            dup = size > 1
            one = dup & ~is_mixed
            # per group, its best row: the least (rank, row), as one integer (ranks are small, rows < 2^40)
            best = np.minimum.reduceat((seg["rank"].astype(np.int64) << 40) | seg["row"], start)[one]
            g = np.empty(int(one.sum()), GROUP)
            g["idh"], g["first"], g["size"] = seg["idh"][start[one]], seg["row"][start[one]], size[one]
            g["best"], g["rank"] = best & ((1 << 40) - 1), best >> 40
            groups.append(g)
            mixed.append(seg["idh"][start[dup & is_mixed]])
            self.stands_in[seg["row"][np.repeat(one, size) & (np.arange(n) != first)]] = True
            member = np.repeat(dup & is_mixed, size) & (np.arange(n) != first)
            us.append(seg["row"][member])
            vs.append(seg["row"][first[member]])
        g = np.concatenate(groups) if groups else np.zeros(0, GROUP)
        return g, _cat(us), _cat(vs), np.sort(np.concatenate(mixed)) if mixed else np.zeros(0, np.uint64)

    def band_pairs(self, band: int) -> tuple[np.ndarray, np.ndarray]:
        """The band's collisions, each row with the first row of its key, that may be near pairs: with
        ``require_same_numbers``, those whose numbers may be the same or not as many (one may hold the other's), as
        far as ``_num_word`` tells. A group of ``exact_groups`` takes part by its first row only: the band files
        hold no row it stands for."""
        us, vs = [], []
        cuts = self._cuts("bands", band)
        low = np.uint64(0xFFFFFFFF)
        for p in range(self.parts):
            seg = dict(zip(BAND_COLUMNS, self._slices("bands", band, p, np.dtype("<u8"), cuts, len(BAND_COLUMNS)),
                           strict=True))
            ra, rb = _key_pairs(seg)
            if self.cfg.require_same_numbers:
                na, nb = ra & low, rb & low
                ca, cb = na & np.uint64(0xFF), nb & np.uint64(0xFF)
                keep = (na == nb) | (ca != cb) | (ca == SATURATED)
                ra, rb = ra[keep], rb[keep]
            us.append(ra >> np.uint64(32))
            vs.append(rb >> np.uint64(32))
        u, v = _cat(us), _cat(vs)
        o = np.argsort(u, kind="stable")  # row order (a row is the later row of at most one pair a band)
        return u[o].astype(np.int32), v[o].astype(np.int32)  # rows < 2^31: half the bytes to send and to hold

    def columns(self, rows: np.ndarray, names: list[str], arrow: bool = False) -> dict:
        """The feature columns ``names`` of ``rows`` (any order, repeats allowed), read shard by shard: numpy arrays,
        or with ``arrow`` arrow arrays (strings without a Python object each)."""
        # sorted distinct rows (the stage's nodes) are in their own order already: no second gather
        in_order = len(rows) < 2 or bool((rows[1:] > rows[:-1]).all())
        uniq, inv = (rows, None) if in_order else unique_inverse(rows, self.n)
        if set(names) & set(TEXT_FEATURES) and self.stands_in[uniq].any():
            raise RuntimeError("dedup: text features read for a row its group's first row stands for (not computed)")
        out: dict[str, list] = {k: [] for k in names}
        for i, part in self._by_shard(uniq):
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
        for i, sel in self._by_shard(rows):
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

    def judge(self, u: np.ndarray, v: np.ndarray, chunk: int = 100_000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Judge band pairs on whole signatures and features (``judge_near``): ``(ok, agree, strict)``. ``u``: each
        pair's later row (sorted, as a judge job's pairs come), ``v`` its first row.

        The records (``record_dtype``: 440 bytes each) are read from the mapped record files, and a read maps the
        pages around each record it touches. The later rows lie in the job's range of rows: their records are read
        once, in order, and held (``JUDGE_BYTES`` bounds the range). The first rows lie anywhere before them, about
        one a page: they are read shard by shard, every pair whose first row a shard holds at once (at most ``chunk``
        at a time), so that each shard's pages are mapped once a job and let go after. (Read in chunks of pairs in
        row order, every chunk mapped every shard's pages again: at 10M rows without copies the judge's page faults
        were 40% of its time.)

        ``ok`` holds the near pairs that can decide a row only (``decides``): a near pair that can neither merge
        nor show a gold conflict changes no row, and the caller would hold it to the end for nothing (three in
        four of the near pairs on rows without copies)."""
        n, dtype = len(u), record_dtype(self.cfg)
        if n == 0:
            return np.zeros(0, bool), np.zeros(0), np.zeros(0, bool)
        size = dtype.itemsize
        at = size - 8 * len(JUDGE_FIELDS)  # the features: 8 bytes each, after the signature
        ur, iu = unique_inverse(u)  # in a job, sorted: no sort
        by_v = np.argsort(v)  # any order within one first row: each pair's verdict is its own
        vs = v[by_v]
        shards = [(part.start, part.stop) for _, part in self._by_shard(vs)]  # each shard's first rows in ``vs``
        piece = max([min(chunk, b - a) for a, b in shards], default=0)
        buf = np.empty(len(ur) + piece, dtype)  # the later rows' records, then a shard's piece of first rows'
        # each record's features as a row of 8-byte words (a view: a gather of rows copies those only)
        feats = np.ndarray((len(buf), len(JUDGE_FIELDS)), np.uint64, buf, at, (size, 8))
        self.records(ur, buf[: len(ur)])
        agree = np.empty(n)
        fu, fv = feats[iu], np.empty((n, len(JUDGE_FIELDS)), np.uint64)  # each pair's features, both rows (``fv``
        # in ``by_v``'s order, put in the pairs' order once filled)
        kernel = kernel_of("agree_loop")
        words = buf.view(np.uint32).reshape(len(buf), size // 4) if kernel is not None else None
        for a0, b0 in shards:
            for a in range(a0, b0, chunk):
                b = min(a + chunk, b0)
                sel = by_v[a:b]
                vr, iv = unique_inverse(vs[a:b])  # sorted: no sort
                self.records(vr, buf[len(ur) : len(ur) + len(vr)])
                iv += len(ur)
                pu = iu[sel]
                ag = np.empty(b - a)
                if kernel is not None:  # compared in place (the same shares): the records as rows of uint32 words
                    kernel(words, self.cfg.num_perm, pu, iv, ag)
                for c in range(0, b - a if kernel is None else 0, 16_384):  # the compared copies stay small
                    eq = buf["sig"][pu[c : c + 16_384]] == buf["sig"][iv[c : c + 16_384]]
                    ag[c : c + 16_384] = np.count_nonzero(eq, axis=1) / eq.shape[1]  # the mean, as exactly
                agree[sel] = ag
                fv[a:b] = feats[iv]
        del buf, feats, words
        place = np.empty(n, np.int64)
        place[by_v] = np.arange(n)
        fv = fv[place]
        f = {k: (fu[:, j], fv[:, j]) if dtype[k] == np.uint64 else (fu[:, j].view(dtype[k]), fv[:, j].view(dtype[k]))
             for j, k in enumerate(JUDGE_FIELDS)}

        ok, strict = np.empty(n, bool), np.empty(n, bool)
        for s0 in range(0, n, chunk):  # the rules in chunks: the numbers' strings and golds they read stay small
            part = slice(s0, s0 + chunk)
            cu, cv = u[part], v[part]

            def digits(look: np.ndarray, cu=cu, cv=cv) -> tuple[np.ndarray, np.ndarray]:
                """The numbers (strings) of both rows of the pairs ``look``: the few whose counts differ."""
                got = self.columns(np.r_[cu[look], cv[look]], ["digits"])["digits"]
                return got[: len(look)], got[len(look) :]

            g = {k: (x[part], y[part]) for k, (x, y) in f.items()}
            (nu, nv), (cnu, cnv) = g["numh"], g["cnt"]
            good, st = judge_near(agree[part], nu == nv, self.cfg, cnu != cnv, digits, g["draw"], g["year"])
            good &= g["idh"][0] != g["idh"][1]  # one content id: the exact step's pair, never a near one
            good &= self.decides(cu, agree[part], st, good, {k: g[k] for k in ("year", "stmt", "ans")})
            ok[part], strict[part] = good, st
        return ok, agree, strict

    def decides(self, u: np.ndarray, agree: np.ndarray, strict: np.ndarray, near: np.ndarray,
                sides: dict[str, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """Which near pairs can decide a row, by the caller's rules (``curate.clean.dedup_stage``): a strict
        pair, a loose pair that ``loose_ok`` admits (either may merge, or show a conflict when math-verify finds
        their golds different), or a pair of one statement (``stmt``) with gold strings that differ (a conflict
        when math-verify finds them different). Any other near pair links nothing: it neither merges nor
        conflicts. ``sides``: ``year``, ``stmt`` and ``ans`` of both rows of each pair; ``u``: their first rows."""
        (su, sv), (au, av) = sides["stmt"], sides["ans"]
        loose = loose_pairs(agree, strict, same_years(*sides["year"]), u, self.columns, self.cfg, among=near,
                            bound=self.n)
        return strict | loose | ((au != av) & (su == sv))


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


def _cat(xs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(xs).astype(np.int64) if xs else np.zeros(0, np.int64)


def jobs(shards: list[Path], work: Path, cfg: DedupConfig, prio: dict[str, int]) -> list[ShardJob]:
    """The job of steps 1 and 3 for each input shard (its global row offset from the shards' metadata)."""
    rows = [pq.ParquetFile(p).metadata.num_rows for p in shards]
    offsets = np.r_[0, np.cumsum(rows)].astype(int).tolist()
    return [ShardJob(i, str(p), offsets[i], str(work), cfg, tuple(prio.items())) for i, p in enumerate(shards)]


FORMAT = 5  # the work files' layout (2: exact groups before signatures; 3: features as Arrow IPC; 4: band entries as
# columns of 24 bytes, counts in the features; 5: judge records, signatures with the judge's features); another
# starts over


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


def prepare(todo: list[ShardJob], work: Path, cfg: DedupConfig) -> Work:
    """Step 2 once step 1 is done for every shard: the exact groups (``Work.exact_groups``), and for each shard the
    rows a group's first row stands for (``stand_NNNNN.npy``), which step 3 skips."""
    rows = [int(json.loads((work / f"ids_{j.index:05d}.json").read_text())["rows"]) for j in todo]
    w = Work(work, cfg, rows)
    w.exact = w.exact_groups()
    for j, m in zip(todo, rows, strict=True):
        path = work / f"stand_{j.index:05d}.npy"
        if not path.exists():
            _save(path, w.stands_in[j.offset : j.offset + m])
    return w


def pool_size(shards: int, workers: int) -> int:
    """Worker processes for a run over ``shards`` input shards: ``workers``, or the usable cores (one: none)."""
    from curate.core.parallel import usable_cores

    return min(workers or usable_cores(), max(shards, 1))


def _warm_up() -> bool:
    """Load the compiled loops in this worker process (numba's import and its cache: about 0.6 s)."""
    from curate.clean.kernels import warm

    return warm()


def _first_step(todo: list[ShardJob], pool=None) -> list[int]:
    """Step 1 over ``todo`` (``shard_ids``), each shard's rows in order. While the pool's first process is not ready
    (a fork server loading numba, about 1 s), this process takes shards itself (with the numpy twins of the
    compiled loops: the same ids, 0.12-0.15 s per 100k rows); the pool takes the rest."""
    from curate.core.parallel import ordered_map

    if pool is None:
        return list(ordered_map(shard_ids, todo))
    ready: list = []
    starter = threading.Thread(target=lambda: ready.append(pool.submit(_warm_up)), daemon=True)
    starter.start()  # submitting starts a process, which waits for the fork server
    got, i = [], 0
    while i < len(todo) and not (ready and ready[0].done()):
        got.append(shard_ids(todo[i]))
        i += 1
    starter.join()
    return got + list(ordered_map(shard_ids, todo[i:], pool=pool))


def build(shards: list[Path], work: Path, cfg: DedupConfig, prio: dict[str, int], pool=None) -> Work:
    """Steps 1, 2 and 3 over every input shard (1 and 3 in ``pool``'s processes, from ``worker_pool``, when
    given; shards whose files are there already, from a killed run or from a scheduler's tasks, are not computed
    again)."""
    from curate.core.parallel import ordered_map

    claim_work(work)
    todo = jobs(shards, work, cfg, prio)
    rows = [pq.ParquetFile(p).metadata.num_rows for p in shards]
    got = _first_step(todo, pool)
    if got != rows:
        raise RuntimeError(f"dedup: the shards changed while read ({got} rows, expected {rows})")
    # the workers load the compiled loops (``kernels``) while this process finds the exact groups
    warm = [pool.submit(_warm_up) for _ in range(getattr(pool, "_max_workers", 1))] if pool is not None and cfg.near else []
    w = prepare(todo, work, cfg)
    for f in warm:
        f.result()
    done = list(ordered_map(shard_work, todo, pool=pool))
    if [r for r, _ in done] != rows:
        raise RuntimeError(f"dedup: the shards changed while read ({done} rows, expected {rows})")
    w.entries = [e for _, e in done]
    return w


JUDGE_PAIRS = 1_000_000  # band pairs a judge job takes at most, unless one range of rows holds more (a job of its own)
JUDGE_BYTES = 128 << 20  # judge records of a job's range of rows at most, unless one range of rows holds more
PAIR_RANGES = 256  # row ranges of a band's pair file: a judge job takes some consecutive ones of every band


def _pair_path(folder: Path, band: int) -> Path:
    return folder / f"pairs_{band:03d}.bin"


def _band_job(args: tuple[str, DedupConfig, list[int], list[int], int, int]) -> np.ndarray:
    """``Work.band_pairs`` of one band, in a worker process, written to the band's pair file (``u`` then ``v``, int32,
    in row order); returns where each of ``PAIR_RANGES`` ranges of rows starts in it (and its end)."""
    from curate.core.parallel import trim_memory

    folder, cfg, rows, entries, parts, band = args
    w = Work(Path(folder), cfg, rows)
    w.entries, w.parts = entries, parts
    u, v = w.band_pairs(band)
    with atomic_path(_pair_path(w.folder, band), sync=False) as tmp, open(tmp, "wb") as f:
        _write(f, u)
        _write(f, v)
    cuts = np.searchsorted(u, _range_starts(w.n)).astype(np.int64)
    trim_memory()  # a band's key ranges in, its pairs out: what is left of it goes back
    return cuts


def _range_starts(n: int) -> np.ndarray:
    """The first row of each of ``PAIR_RANGES`` ranges of ``n`` rows, and ``n``."""
    return (np.arange(PAIR_RANGES + 1, dtype=np.int64) * n) // PAIR_RANGES


def _pair_job(args: tuple[str, DedupConfig, list[int], str, list[tuple[int, int, int]]]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Judge the band pairs of one range of rows, every band's (``spans``: per band, its pairs in the file and the
    span of them in the range): each distinct pair once, at the first band that brings it. A pair's verdict is its
    own, whatever band brings it: a good one is new in the first band that brought it, and a bad one is bad in
    every band. Returns the good ones, band by band and each band's in row order, and how many each band has:
    ``(per_band, u, v, agree, strict)`` (``Work.judge``).
    Every pair of a row range lands in one job, so no pair is judged twice and no set of pairs judged is kept."""
    from curate.core.parallel import trim_memory

    folder, cfg, rows, token, spans = args
    w = _worker_work(folder, cfg, rows, token)
    span = max(w.n, 1)
    keys, bands = [], []
    for i, (m, a, b) in enumerate(spans):
        if b > a:
            path = _pair_path(w.folder, i)
            u = np.fromfile(path, np.int32, b - a, offset=4 * a)
            v = np.fromfile(path, np.int32, b - a, offset=4 * (m + a))
            if len(u) != b - a or len(v) != b - a:
                raise RuntimeError(f"dedup: {path.name} is shorter than its band's pairs (a damaged work folder)")
            keys.append(u.astype(np.int64) * span + v)
            bands.append(np.full(b - a, i, np.int16))
    if not keys:
        z = np.zeros(0, np.int32)
        return np.zeros(len(spans), np.int64), z, z, np.zeros(0), np.zeros(0, bool)
    k = np.concatenate(keys)
    del keys
    o = np.argsort(k, kind="stable")  # a key's copies stay in band order: its first is its first band's
    k = k[o]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    first = o[starts]
    del o
    distinct = k[starts]
    del k, starts
    band = np.concatenate(bands)[first]
    u, v = (distinct // span).astype(np.int32), (distinct % span).astype(np.int32)
    del distinct, first
    ok, agree, strict = w.judge(u, v)
    trim_memory()
    band, u, v, agree, strict = band[ok], u[ok], v[ok], agree[ok], strict[ok]
    o = np.lexsort((u, band))  # band by band, each in row order (a row is the later row of at most one pair a band)
    return np.bincount(band, minlength=len(spans)), u[o], v[o], agree[o], strict[o]


_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)  # POSIX (elsewhere the pages stay mapped until the run ends)
_WORKER_WORK: list[Work] = []  # a worker process's Work of the run it judges for (``_worker_work``)


def _worker_work(folder: str, cfg: DedupConfig, rows: list[int], token: str) -> Work:
    """The run's ``Work`` in a worker process, kept between its jobs (its mapped files with it): made on the first
    job of the run whose ``Work.token`` is ``token`` (reading which rows have a signature from the
    ``stand_NNNNN.npy`` files)."""
    if not _WORKER_WORK or _WORKER_WORK[0].token != token:
        w = Work(Path(folder), cfg, rows)
        w.token = token
        if rows:
            w.stands_in = np.concatenate([np.load(w.folder / f"stand_{i:05d}.npy") for i in range(len(rows))])
        _WORKER_WORK[:] = [w]
    return _WORKER_WORK[0]


def pairs(w: Work, pool=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The candidate pairs ``(u, v, agree, strict)`` (rows as int32) in the in-memory engine's order (exact pairs by
    row, then each band's new near pairs by row), with each group of ``exact_groups`` standing as its first row, less the near
    pairs that cannot decide a row (``Work.decides``); and the groups
    and the sorted content id hashes of the groups paired row by row. ``pool``: worker processes (``worker_pool``)
    that find the bands' pairs (``_band_job``: a file each) and then judge them by ranges of rows (``_pair_job``);
    this process holds only the good pairs."""
    from curate.core.parallel import ordered_map, trim_memory

    groups, u, v, mixed = w.exact if w.exact is not None else w.exact_groups()
    order = np.argsort(u, kind="stable")
    # rows < 2^31 (``Work``): int32, half the bytes the stage holds to its end
    exact: tuple[np.ndarray, ...] = (u[order].astype(np.int32), v[order].astype(np.int32), np.ones(len(u)), np.ones(len(u), bool))
    del u, v, order
    if not w.cfg.near:
        return exact[0], exact[1], exact[2], exact[3], groups, mixed
    jobs = [(str(w.folder), w.cfg, w.rows, w.entries, w.parts, b) for b in range(w.cfg.bands)]
    cuts = np.array(list(ordered_map(_band_job, jobs, pool=pool)), np.int64).reshape(w.cfg.bands, PAIR_RANGES + 1)
    sizes = np.diff(cuts, axis=1).sum(0)  # band pairs per range of rows, every band's
    # consecutive ranges to a job: at most JUDGE_PAIRS band pairs, and at least four jobs a worker to share out
    most = min(JUDGE_PAIRS, int(sizes.sum()) // (4 * max(getattr(pool, "_max_workers", 1), 1)) + 1)
    # and a range of rows whose judge records fit in JUDGE_BYTES (the later rows' records, held for the whole job:
    # ``Work.judge``)
    span = np.diff(_range_starts(w.n)).tolist()
    most_rows = max(1, JUDGE_BYTES // record_dtype(w.cfg).itemsize)
    ends, held, held_rows = [], 0, 0
    for r, s in enumerate(sizes.tolist()):
        if held and (held + s > most or held_rows + span[r] > most_rows):
            ends.append(r)
            held = held_rows = 0
        held += s
        held_rows += span[r]
    bounds = [0, *ends, PAIR_RANGES]
    total = cuts[:, -1].tolist()
    jobs2 = [(str(w.folder), w.cfg, w.rows, w.token,
              [(total[b], int(cuts[b, lo]), int(cuts[b, hi])) for b in range(w.cfg.bands)])
             for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
    if pool is None:  # judged here: with this run's Work (its files mapped once)
        _WORKER_WORK[:] = [w]
    try:
        got: list = list(ordered_map(_pair_job, jobs2, pool=pool))
    finally:
        if pool is None:
            _WORKER_WORK.clear()
    # after the exact pairs, band by band, and in each band the jobs' pairs in job order (their ranges of rows,
    # in order): row order. Each job's arrays go straight to their places and are dropped, so that the pairs are
    # held about once (the jobs' arrays joined band by band, then joined to the exact pairs, held them three
    # times over: at 10M rows without copies 5.8M pairs, 17 bytes each, the main process's peak)
    counts = np.array([g[0] for g in got], np.int64).reshape(len(got), w.cfg.bands)
    starts = np.cumsum(counts, axis=1) - counts  # where each band's pairs start in each job's arrays
    flat = counts.T.reshape(-1)  # band by band, job by job
    at = (len(exact[0]) + np.cumsum(flat) - flat).reshape(w.cfg.bands, len(got)).T  # where they go
    outs = [np.empty(len(exact[0]) + int(flat.sum()), x.dtype) for x in exact]
    for out, x in zip(outs, exact, strict=True):
        out[: len(x)] = x
    del exact
    for j in range(len(got)):
        for k, out in enumerate(outs):
            for b in range(w.cfg.bands):
                c = int(counts[j, b])
                out[at[j, b] : at[j, b] + c] = got[j][k + 1][starts[j, b] : starts[j, b] + c]
        got[j] = None
        trim_memory()  # what the job's arrays held goes back before the next job's places are filled
    del got
    for b in range(w.cfg.bands):
        _pair_path(w.folder, b).unlink(missing_ok=True)
    return outs[0], outs[1], outs[2], outs[3], groups, mixed
