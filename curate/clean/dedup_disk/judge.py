"""Step 5, the judge: the band pairs of a range of rows, every band's, judged once each on whole signatures and
features (``judge_near``), in worker processes once every band is done; only the near pairs that can decide a row
come back (``decides``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from curate.clean.dedup import DedupConfig, judge_near, loose_pairs, same_years
from curate.clean.dedup_disk.buckets import pair_path
from curate.clean.dedup_disk.folder import Work
from curate.clean.dedup_disk.signatures import JUDGE_FIELDS, record_dtype
from curate.clean.kernels import compiled as kernel_of
from curate.core.arrays import unique_inverse

JUDGE_PAIRS = 1_000_000  # band pairs a judge job takes at most, unless one range of rows holds more (a job of its own)


JUDGE_BYTES = 128 << 20  # judge records of a job's range of rows at most, unless one range of rows holds more


def judge_pairs(w: Work, u: np.ndarray, v: np.ndarray, chunk: int = 100_000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    n, dtype = len(u), record_dtype(w.cfg)
    if n == 0:
        return np.zeros(0, bool), np.zeros(0), np.zeros(0, bool)
    size = dtype.itemsize
    at = size - 8 * len(JUDGE_FIELDS)  # the features: 8 bytes each, after the signature
    ur, iu = unique_inverse(u)  # in a job, sorted: no sort
    by_v = np.argsort(v)  # any order within one first row: each pair's verdict is its own
    vs = v[by_v]
    shards = [(part.start, part.stop) for _, part in w.by_shard(vs)]  # each shard's first rows in ``vs``
    piece = max([min(chunk, b - a) for a, b in shards], default=0)
    buf = np.empty(len(ur) + piece, dtype)  # the later rows' records, then a shard's piece of first rows'
    # each record's features as a row of 8-byte words (a view: a gather of rows copies those only)
    feats = np.ndarray((len(buf), len(JUDGE_FIELDS)), np.uint64, buf, at, (size, 8))
    w.records(ur, buf[: len(ur)])
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
            w.records(vr, buf[len(ur) : len(ur) + len(vr)])
            iv += len(ur)
            pu = iu[sel]
            ag = np.empty(b - a)
            if kernel is not None:  # compared in place (the same shares): the records as rows of uint32 words
                kernel(words, w.cfg.num_perm, pu, iv, ag)
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
            got = w.columns(np.r_[cu[look], cv[look]], ["digits"])["digits"]
            return got[: len(look)], got[len(look) :]

        g = {k: (x[part], y[part]) for k, (x, y) in f.items()}
        (nu, nv), (cnu, cnv) = g["numh"], g["cnt"]
        good, st = judge_near(agree[part], nu == nv, w.cfg, cnu != cnv, digits, g["draw"], g["year"])
        good &= g["idh"][0] != g["idh"][1]  # one content id: the exact step's pair, never a near one
        good &= decides(w, cu, agree[part], st, good, {k: g[k] for k in ("year", "stmt", "ans")})
        ok[part], strict[part] = good, st
    return ok, agree, strict


def decides(w: Work, u: np.ndarray, agree: np.ndarray, strict: np.ndarray, near: np.ndarray,
            sides: dict[str, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Which near pairs can decide a row, by the caller's rules (``curate.clean.dedup_stage``): a strict
    pair, a loose pair that ``loose_ok`` admits (either may merge, or show a conflict when math-verify finds
    their golds different), or a pair of one statement (``stmt``) with gold strings that differ (a conflict
    when math-verify finds them different). Any other near pair links nothing: it neither merges nor
    conflicts. ``sides``: ``year``, ``stmt`` and ``ans`` of both rows of each pair; ``u``: their first rows."""
    (su, sv), (au, av) = sides["stmt"], sides["ans"]
    loose = loose_pairs(agree, strict, same_years(*sides["year"]), u, w.columns, w.cfg, among=near,
                        bound=w.n)
    return strict | loose | ((au != av) & (su == sv))


def pair_job(args: tuple[str, DedupConfig, list[int], str, list[tuple[int, int, int]]]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Judge the band pairs of one range of rows, every band's (``spans``: per band, its pairs in the file and the
    span of them in the range): each distinct pair once, at the first band that brings it. A pair's verdict is its
    own, whatever band brings it: a good one is new in the first band that brought it, and a bad one is bad in
    every band. Returns the good ones, band by band and each band's in row order, and how many each band has:
    ``(per_band, u, v, agree, strict)`` (``judge.judge_pairs``).
    Every pair of a row range lands in one job, so no pair is judged twice and no set of pairs judged is kept."""
    from curate.core.parallel import trim_memory

    folder, cfg, rows, token, spans = args
    w = _worker_work(folder, cfg, rows, token)
    span = max(w.n, 1)
    keys, bands = [], []
    for i, (m, a, b) in enumerate(spans):
        if b > a:
            path = pair_path(w.folder, i)
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
    ok, agree, strict = judge_pairs(w, u, v)
    trim_memory()
    band, u, v, agree, strict = band[ok], u[ok], v[ok], agree[ok], strict[ok]
    o = np.lexsort((u, band))  # band by band, each in row order (a row is the later row of at most one pair a band)
    return np.bincount(band, minlength=len(spans)), u[o], v[o], agree[o], strict[o]


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


@contextmanager
def in_this_process(w: Work) -> Iterator[None]:
    """Judge jobs run in this process (no pool) use ``w`` (its files mapped once)."""
    _WORKER_WORK[:] = [w]
    try:
        yield
    finally:
        _WORKER_WORK.clear()
