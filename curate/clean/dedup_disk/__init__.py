"""Dedup at scale: exact groups first, then signatures and LSH band keys per shard on disk, candidate pairs from
band files cut into key ranges. ``build`` runs steps 1-3 and ``pairs`` steps 4-5; each step is a module:

- ``signatures``: steps 1 and 3, the passes over each input shard;
- ``exact``: step 2, the exact groups;
- ``buckets``: step 4, the band keys' collisions;
- ``judge``: step 5, the collisions judged;
- ``folder``: the work folder and ``Work``, the reads every step after the first makes of its files;
- ``files``: how the scratch files are written.

The in-memory engine (``curate.clean.dedup_stage`` with ``engine="memory"``) holds a MinHash signature and a
dozen values per row: 1.6 GB at a million rows, sixteen at ten million. This engine holds one input shard's worth
at a time, one byte a row, and the texts that have a duplicate. It decides every row exactly as the in-memory
engine does: the same pairs, judged by the same ``judge_near`` and clustered by the same ``clusters``. Its steps
follow the design of datatrove's MinHash pipeline (signatures, buckets, cluster, filter), with exact duplicates
taken out first, as datatrove's users run its exact stage before MinHash. The steps, numbered in the order they
run (the same numbers in ``build``, the flow's tasks and docs/dedup-decontam.md):

1. **Content ids per shard, in worker processes** (``signatures.shard_ids``): ``exact_NNNNN.bin``, the rows' content
   id hashes with their gold, year, source rank and a hash of their text, sorted by content id. Cheap: no canonical
   form.
2. **Exact groups** (``exact.prepare``, ``exact.exact_groups``). The rows of one content id that carry one gold string,
   one year and one text are one node from here on: the group's first row stands for it (``stands_in`` marks the
   others; ``stand_NNNNN.npy`` per shard). Every pair another row of the group would make is the pair the first
   row makes, judged alike. The rows of the other groups (golds that differ, or the same content id spelled with
   other spaces, which can tokenize differently) are paired each with the first row of its id, as in memory.
3. **Signatures and band keys per shard, in worker processes** (``signatures.shard_work``), for the rows no other row
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
4. **Pairs per band and key range** (``buckets.band_pairs``, one band per worker process). The slices of that key range are read
   from every shard's band file, and each entry whose key an earlier entry holds is paired with the first row of its
   key (the in-memory rule): ``buckets._key_pairs``, a hash table per bucket of the keys (``kernels.pair_loop``), or a sort
   of them (``_by_key``) where numba is missing. The entries carry what rejects most collisions without a
   signature: other numbers in as many of them (a collision that the entry's short word of the numbers cannot
   reject goes on to the judge, which reads the whole hash). The key ranges split each band so that one range holds
   at most ``PART_ENTRIES`` entries, whatever the number of rows. A band's pairs go to its file
   (``pairs_NNN.bin``, in row order) with where each of ``PAIR_RANGES`` ranges of rows starts in it.
5. **Judging** (``judge.pair_job``: ``judge.judge_pairs``, in the worker processes, once every band is done). A job takes a run of
   consecutive row ranges from every band's file, so every copy of a pair lands in one job: each distinct pair is
   judged once, at the first band that brings it (its verdict is its own whatever band brings it), and no set of the
   pairs judged is kept anywhere. Pairs are judged on their whole signatures and features (the judge records), the
   later rows' read once a job and held, the first rows' read shard by shard so that each shard's pages are mapped
   once a job; two rows of one content id are never a near pair (their own exact step pairs them).
   A near pair comes back only when it can decide a row (``judge.decides``: it may merge or show a gold conflict),
   so what the caller holds grows with those, not with every collision.

The band files and judge records then go (``drop_pair_inputs``, in a thread), and the caller compares golds,
clusters the nodes that have a pair (union-find over them only) and streams the shards again to write them out.
"""

from __future__ import annotations

import threading
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from curate.clean.dedup import DedupConfig
from curate.clean.dedup_disk.buckets import PAIR_RANGES, band_job, pair_path, range_starts
from curate.clean.dedup_disk.exact import GROUP, exact_groups, prepare
from curate.clean.dedup_disk.folder import WORK, Work, claim_work, drop_pair_inputs, jobs, parts_for
from curate.clean.dedup_disk.judge import JUDGE_BYTES, JUDGE_PAIRS, in_this_process, pair_job
from curate.clean.dedup_disk.signatures import (
    EXACT,
    FEATURES,
    READ_COLUMNS,
    ShardJob,
    features,
    record_dtype,
    shard_ids,
    shard_work,
)

__all__ = ["EXACT", "FEATURES", "GROUP", "READ_COLUMNS", "WORK", "ShardJob", "Work", "build", "claim_work",
           "drop_pair_inputs", "features", "jobs", "pairs", "parts_for", "pool_size", "prepare", "shard_ids",
           "shard_work"]


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


def pairs(w: Work, pool=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The candidate pairs ``(u, v, agree, strict)`` (rows as int32) in the in-memory engine's order (exact pairs by
    row, then each band's new near pairs by row), with each group of ``exact_groups`` standing as its first row, less the near
    pairs that cannot decide a row (``judge.decides``); and the groups
    and the sorted content id hashes of the groups paired row by row. ``pool``: worker processes (``worker_pool``)
    that find the bands' pairs (``band_job``: a file each) and then judge them by ranges of rows (``pair_job``);
    this process holds only the good pairs."""
    from curate.core.parallel import ordered_map, trim_memory

    groups, u, v, mixed = w.exact if w.exact is not None else exact_groups(w)
    order = np.argsort(u, kind="stable")
    # rows < 2^31 (``Work``): int32, half the bytes the stage holds to its end
    exact: tuple[np.ndarray, ...] = (u[order].astype(np.int32), v[order].astype(np.int32), np.ones(len(u)), np.ones(len(u), bool))
    del u, v, order
    if not w.cfg.near:
        return exact[0], exact[1], exact[2], exact[3], groups, mixed
    jobs = [(str(w.folder), w.cfg, w.rows, w.entries, w.parts, b) for b in range(w.cfg.bands)]
    cuts = np.array(list(ordered_map(band_job, jobs, pool=pool)), np.int64).reshape(w.cfg.bands, PAIR_RANGES + 1)
    sizes = np.diff(cuts, axis=1).sum(0)  # band pairs per range of rows, every band's
    # consecutive ranges to a job: at most JUDGE_PAIRS band pairs, and at least four jobs a worker to share out
    most = min(JUDGE_PAIRS, int(sizes.sum()) // (4 * max(getattr(pool, "_max_workers", 1), 1)) + 1)
    # and a range of rows whose judge records fit in JUDGE_BYTES (the later rows' records, held for the whole job:
    # ``judge.judge_pairs``)
    span = np.diff(range_starts(w.n)).tolist()
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
    # judged here without a pool: with this run's Work (its files mapped once)
    with in_this_process(w) if pool is None else nullcontext():
        got: list = list(ordered_map(pair_job, jobs2, pool=pool))
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
        pair_path(w.folder, b).unlink(missing_ok=True)
    return outs[0], outs[1], outs[2], outs[3], groups, mixed
