"""Step 2, the exact groups: the rows of one content id that carry one gold string, one year and one text are one node
from here on, their first row standing for the others, which step 3 skips (``stand_NNNNN.npy``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from curate.clean.dedup import DedupConfig
from curate.clean.dedup_disk.files import concat_rows, save
from curate.clean.dedup_disk.folder import Work
from curate.clean.dedup_disk.signatures import EXACT, ShardJob

GROUP = np.dtype([("idh", "<u8"), ("first", "<i8"), ("best", "<i8"), ("rank", "<i8"), ("size", "<i8")])


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


def exact_groups(w: Work) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows that share a content id: ``(groups, u, v, mixed)``.

    A group whose rows all carry the same gold string and year (``GROUP``: its first row, its best row by
    source rank then row, its size) is one node from here on: every pair its rows would make is the pair its
    first row makes, judged alike. The rows of the other groups (golds that differ, by a space or more) are
    paired each with the first row of its id, as the in-memory engine pairs them (``u``, ``v``); ``mixed``:
    their content id hashes, sorted."""
    groups, us, vs, mixed = [], [], [], []
    cuts = w.cuts("exact", 0)
    for p in range(w.parts):
        seg = _shared(w.slices("exact", 0, p, EXACT, cuts)[0], "idh")  # sorted by (idh, row): so are the shards' runs
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
        w.stands_in[seg["row"][np.repeat(one, size) & (np.arange(n) != first)]] = True
        member = np.repeat(dup & is_mixed, size) & (np.arange(n) != first)
        us.append(seg["row"][member])
        vs.append(seg["row"][first[member]])
    g = np.concatenate(groups) if groups else np.zeros(0, GROUP)
    return g, concat_rows(us), concat_rows(vs), np.sort(np.concatenate(mixed)) if mixed else np.zeros(0, np.uint64)


def prepare(todo: list[ShardJob], work: Path, cfg: DedupConfig) -> Work:
    """Step 2 once step 1 is done for every shard: the exact groups (``exact.exact_groups``), and for each shard the
    rows a group's first row stands for (``stand_NNNNN.npy``), which step 3 skips."""
    rows = [int(json.loads((work / f"ids_{j.index:05d}.json").read_text())["rows"]) for j in todo]
    w = Work(work, cfg, rows)
    w.exact = exact_groups(w)
    for j, m in zip(todo, rows, strict=True):
        path = work / f"stand_{j.index:05d}.npy"
        if not path.exists():
            save(path, w.stands_in[j.offset : j.offset + m])
    return w
