"""Steps 1 and 3, the passes over each input shard (one worker process each): the rows' content ids (step 1,
``shard_ids``), then for the rows no other row stands for their features, judge records and LSH band keys (step 3,
``shard_work``). Both engines compute a batch's features and signatures here (``features``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.feather as feather
import pyarrow.parquet as pq

from curate.clean.dedup import DedupConfig, hash_strings, minhash, numbers_with_counts, statement_hashes
from curate.clean.dedup_disk.files import RANGE_BITS, RANGES, mix, save, save_sorted, write
from curate.clean.kernels import compiled as kernel_of
from curate.clean.text import asy_keys, canonical, tokens
from curate.core.shards import atomic_path

# a band entry's columns: the band key's two words, and the row (high 32 bits) with ``_num_word`` (low 32 bits)
BAND_COLUMNS = ("hi", "lo", "rn")


SATURATED = 255  # a count of numbers this high or higher, in ``_num_word``'s low byte: unknown, never rejects


# gh: a hash of the gold string; fh: a hash of the statement's text (two spellings of one content id, "$A B C$" and
# "$ABC$", may tokenize differently, so only rows of one text are one node)
EXACT = np.dtype([("idh", "<u8"), ("row", "<i8"), ("gh", "<u8"), ("fh", "<u8"), ("year", "<i8"), ("rank", "<i8")])


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
        e["fh"] = mix(hash_strings(rb["problem"], compiled=True))
        e["year"] = pc.fill_null(rb["year"], -1).cast(pa.int64()).to_numpy(zero_copy_only=False)
        e["rank"] = _ranks(rb["source"], prio)
        parts.append(e)
    exact = np.concatenate(parts) if parts else np.zeros(0, EXACT)
    m = len(exact)
    exact["row"] = np.arange(job.offset, job.offset + m, dtype=np.int64)
    exact = exact[np.lexsort((exact["row"], exact["idh"]))]
    save_sorted(work, f"exact_{i:05d}", exact, exact["idh"][None, :])
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
    # each batch's judge records go to the file as they come (``_record_file``); what the band files need is kept
    with _record_file(work / f"rec_{i:05d}.npy", len(own), record_dtype(cfg)) if cfg.near else nullcontext() as rec_file:
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
        write(f, sink.getvalue())
    if cfg.near and words is not None:
        if done_rows != len(own):
            raise RuntimeError(f"dedup: shard {i}: {done_rows} signatures for {len(own)} rows")
        mine = feat.select(["numh", "cnt"]).take(pa.array(own))  # no nulls: to_numpy keeps the types
        _save_bands(work, f"bands_{i:05d}", words, cfg, own + job.offset, mine["numh"].to_numpy(),
                    mine["cnt"].to_numpy())
    done.write_text(json.dumps({"rows": m, "entries": int(len(own)) if cfg.near else 0}))
    return m, int(len(own)) if cfg.near else 0


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


class _Records:
    """Writes a shard's judge records (``record_dtype``) batch by batch into an open ``.npy`` file."""

    def __init__(self, f, dtype: np.dtype):
        self.f, self.dtype, self.done = f, dtype, 0

    def write(self, sig: np.ndarray, feat: pa.Table) -> None:
        """A batch's records: its rows' signatures and their ``JUDGE_FIELDS`` (``feat``, the same rows: no nulls)."""
        rec = np.empty(len(sig), self.dtype)
        rec["sig"] = sig
        for k in JUDGE_FIELDS:
            rec[k] = feat[k].to_numpy()
        write(self.f, rec)
        self.done += len(sig)


@contextmanager
def _record_file(path: Path, rows: int, dtype: np.dtype) -> Iterator[_Records]:
    """A shard's judge record file (``.npy`` of ``rows`` records of ``dtype``), written under a temporary name and
    renamed once every row is there; removed on an error or a short count."""
    with atomic_path(path, sync=False) as tmp, open(tmp, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (rows,)})
        records = _Records(f, dtype)
        yield records
        if records.done != rows:
            raise RuntimeError(f"dedup: {records.done} records for {rows} rows ({path.name})")


def _num_word(numh: np.ndarray, cnt: np.ndarray) -> np.ndarray:
    """A band entry's word of its numbers: 24 bits of their hash above their count (``SATURATED`` at most). Two
    rows with the same numbers have the same word; two whose words differ in the hash but not in a known count
    hold other numbers in as many of them, never a near pair."""
    count = np.minimum(cnt.astype(np.int64), SATURATED).astype(np.uint64)
    return ((numh & np.uint64(0xFFFFFF)) << np.uint64(8)) | count


def _range_order(hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The order a band file needs of entries with first key words ``hi``: by key range (the words' top bits),
    position within a range (the entries of one key in row order); and where each range starts, and the end. A
    stable sort of 16-bit integers, which numpy does as a radix sort (7 ns an entry against 50 for a sort of the whole
    words)."""
    top = (hi >> np.uint64(64 - RANGE_BITS)).astype(np.uint16)
    return np.argsort(top, kind="stable"), np.r_[0, np.cumsum(np.bincount(top, minlength=RANGES))].astype(np.int64)


def _save_bands(work: Path, name: str, words: np.ndarray, cfg: DedupConfig, rows: np.ndarray, numh: np.ndarray,
                cnt: np.ndarray) -> None:
    """A shard's band entries (``BAND_COLUMNS``), each band's in ``_range_order``: band after band, each as its
    columns one after the other, with each band's key-range cuts. ``words``: ``_band_words`` of the rows. The first
    word of a key goes through a bijection (``mix``): a MinHash value is a minimum, crowded near 0, and the key
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
                    write(f, out)
                    continue
                hi, lo = mix(words[b, 0]), words[b, 1]
                order, cuts[b] = _range_order(hi)
                for col in (hi[order], lo[order], rn[order]):
                    write(f, col)
        save(work / f"{name}.cuts.npy", cuts)
