"""The dedup stage: exact and near copies removed, one row of each cluster kept (the engine: ``curate.clean.dedup``
in memory, ``curate.clean.dedup_disk`` at scale); clusters whose golds disagree handled by the stated rule.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.clean import dedup_disk
from curate.clean.dedup import DedupConfig, candidate_pairs, clusters, conflict_pairs, loose_pairs
from curate.clean.dedup_disk import FEATURES, READ_COLUMNS, WORK, features
from curate.core.arrays import in_sorted, marked_places, search, unique
from curate.core.manifest import Manifest
from curate.core.parallel import trim_memory, worker_pool
from curate.core.runner import (
    StageError,
    StageRun,
    input_entries,
    reject_table,
    run_stage,
)
from curate.core.shards import iter_batches, keep_rows, kept_dirs, shard_paths

FORK_SERVER = "curate.clean.fork_server"  # what dedup's worker pool preloads (its modules and compiled loops)

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------- dedup
class _MemoryRows:
    """The in-memory engine's features: every row's, in one table (``Work.columns`` reads them from disk)."""

    def __init__(self, feat: pa.Table):
        self.feat, self.n = feat, feat.num_rows

    def columns(self, rows: np.ndarray, names: list[str], arrow: bool = False) -> dict:
        t = self.feat.select(names).take(pa.array(rows, pa.int64()))
        return {k: t[k].combine_chunks() if arrow else t[k].to_numpy(zero_copy_only=False) for k in names}

    def ids(self, start: int, m: int) -> np.ndarray:
        return self.feat["idh"].slice(start, m).to_numpy()

    def rows_of_ids(self, comp_of: dict[int, int]) -> dict[int, int]:
        idh = self.feat["idh"].to_numpy()
        hit = np.flatnonzero(np.isin(idh, np.array(list(comp_of), np.uint64)))
        return {int(r): comp_of[int(idh[r])] for r in hit}


def _memory_pairs(dirs: list[Path], cfg: DedupConfig, prio: dict[str, int]):
    """The in-memory engine: every row's features and signature at once, ``candidate_pairs`` over them."""
    feats, sigs = [], []
    for d in dirs:
        for t in iter_batches(d, columns=READ_COLUMNS):
            f, s = features(t, cfg, prio)
            feats.append(f)
            if s is not None:
                sigs.append(s)
    feat = pa.concat_tables(feats) if feats else FEATURES.empty_table()
    col = (lambda k: feat[k].to_numpy(zero_copy_only=False))  # noqa: E731
    u, v, agree, strict = candidate_pairs(col("idh"), col("numh"), np.concatenate(sigs) if sigs else None, cfg,
                                          col("digits"), col("draw"), col("year"))
    return (u, v, agree, strict), _MemoryRows(feat)


def dedup_stage(inputs: list[Path], out: Path, cfg: DedupConfig | None = None, force: bool = False) -> Manifest:
    """Exact + near dedup across all input shards; one representative per cluster by source priority; clusters
    whose golds disagree are reported as ``gold_conflict`` (and keep no row by default).

    ``cfg.engine``: ``disk`` (default) holds one shard at a time and the texts that have a duplicate
    (``curate.clean.dedup_disk``); ``memory`` holds every row's signature. Both decide every row alike, so the
    engine (and ``workers``) are not part of the stage's identity."""
    cfg = cfg or DedupConfig()
    return run_stage("dedup", out, input_entries(inputs), _dedup_config(cfg),
                     lambda run: _dedup(run, inputs, out, cfg), force=force, input_folders=inputs)


def _dedup(run: StageRun, inputs: list[Path], out: Path, cfg: DedupConfig) -> None:
    """The stage's body: the pairs, what each pair shares, the clusters and each row's fate, then one pass that
    writes every row kept or rejected. Each step's arrays are dropped as soon as the next no longer needs them (at 10M
    rows each is tens of MB), and what they freed is handed back (``trim_memory``) before the next is read."""
    dirs = kept_dirs(inputs)
    work = out / WORK
    u, v, agree, strict, groups, mixed, rows, dropping = _pairs(run, dirs, work, cfg)
    n = rows.n
    # the rows that have a pair (a group's first row stands for the group), and each pair's rows as node numbers
    nodes, (cu, cv) = marked_places(n, u, v)  # ``nodes[cu]``: at 10M rows without copies 5.8M pairs, 23 MB each
    del u, v
    # the nodes' columns are read one at a time, each dropped once used (at 10M rows, 40-60 MB each)
    with run.timed("pairs"):
        year = rows.columns(nodes, ["year"])["year"]
        same_year = _equal_at(year, cu, cv) & (year >= 0)[cu]  # ``same_years``, without gathered copies
        del year
        trim_memory()  # what the pairs' places and the years took and freed goes back before the golds are read
        loose = loose_pairs(agree, strict, same_year, nodes[cu], rows.columns, cfg, bound=n)
        del same_year, agree
        trim_memory()  # each column read leaves freed pieces behind: they go back before the next is read
        idh = rows.columns(nodes, ["idh"])["idh"]
        same_statement = _equal_at(idh, cu, cv)
        stmt = rows.columns(nodes, ["stmt"])["stmt"]
        same_statement |= _equal_at(stmt, cu, cv)
        del stmt
        trim_memory()
    with run.timed("golds"):
        same, differ = _same_golds(run, rows, nodes, cu, cv, strict | loose | same_statement, cfg)
    with run.timed("clusters"):
        grouped = np.zeros(len(nodes), bool) if mixed is None else ~np.isin(idh, mixed)  # stands for its id
        ranks, best = rows.columns(nodes, ["rank"])["rank"], nodes.copy()  # written below
        if not ranks.flags.writeable:  # the memory engine's column is arrow's
            ranks = ranks.copy()
        at = np.searchsorted(groups["idh"], idh)
        by_id = grouped & (at < len(groups))  # the nodes that stand for an exact group (``_Decided``)
        by_id[by_id] = groups["idh"][at[by_id]] == idh[by_id]
        ranks[by_id], best[by_id] = groups["rank"][at[by_id]], groups["best"][at[by_id]]
        del at
        trim_memory()  # what the columns' reads and the pairs' tests freed (175 MB at 10M rows without copies)
        rep_c, kind = clusters(len(nodes), cu, cv, strict, loose, same, differ, same_statement, idh, ranks, cfg,
                               tiebreak=best)
        del strict, loose, same, ranks
    conflicts = _conflict_clusters(rep_c, cu, cv, differ, same_statement, nodes, best, grouped, rows, cfg)
    # the pairs go before the decisions are gathered (each step's arrays are tens of MB at 10M rows)
    del cu, cv, same_statement, differ, grouped
    with run.timed("clusters"):
        in_group = None
        if len(groups):  # the disk engine's groups: their first rows and the rows those stand for
            in_group = rows.stands_in.copy()
            in_group[groups["first"]] = True
        decided = _Decided(nodes, by_id, best[rep_c], idh[rep_c], kind == 3, idh, groups, in_group)
        del nodes, idh, best, by_id, rep_c, kind, in_group
    counts, clusters_with_copies = _write(run, dirs, decided, rows, _conflict_details(conflicts), n)
    run.extra["dedup"] = {
        "clusters_with_duplicates": clusters_with_copies,
        "exact_duplicates": counts[1],
        "near_duplicates": counts[2],
        "gold_conflict_rows": int(sum(len(c["rows"]) for c in conflicts)),
        "gold_conflict_clusters": len(conflicts),
    }
    run.extra["gold_conflicts"] = conflicts[:500]
    getattr(rows, "close", lambda: None)()  # its mapped work files
    if dropping is not None:
        dropping.join()
    shutil.rmtree(work, ignore_errors=True)


def _pairs(run: StageRun, dirs: list[Path], work: Path, cfg: DedupConfig):
    """Every candidate pair, by the configured engine: (u, v, agree, strict) of ``candidate_pairs``, the disk engine's
    exact groups and the ids of theirs paired by row (none for the memory engine, which pairs every row itself), the
    rows' columns (``_MemoryRows`` or the disk engine's work files) and the deletion of the files only the pairs read."""
    prio = {s: i for i, s in enumerate(cfg.source_priority)}
    if cfg.engine == "memory":
        with run.timed("signatures"):
            (u, v, agree, strict), rows = _memory_pairs(dirs, cfg, prio)
        return u, v, agree, strict, np.zeros(0, dedup_disk.GROUP), None, rows, None
    shards = [p for d in dirs for p in shard_paths(d)]
    size = dedup_disk.pool_size(len(shards), cfg.workers)
    with worker_pool(size, preload=FORK_SERVER) as pool:  # the per-shard steps
        with run.timed("signatures"):
            w = dedup_disk.build(shards, work, cfg, prio, pool)
    trim_memory()  # the first steps' arrays: the pairs' sets take their place
    # the bands and the judge in new processes (forked from the same warm fork server, its modules and
    # compiled loops loaded): a process that built signatures keeps 150-200 MB of that step's pages however
    # its heaps are trimmed (at 10M rows without copies a band job then peaked at 595 MB in such a process,
    # 402 MB in a new one). Each band job ends trimming what it freed, so the next starts from that.
    with worker_pool(size, preload=FORK_SERVER) as pool:
        with run.timed("pairs"):
            u, v, agree, strict, groups, mixed = dedup_disk.pairs(w, pool)
    dropping = dedup_disk.drop_pair_inputs(w)  # what only the pairs read goes, beside the steps below
    trim_memory()
    run.extra["dedup_work"] = {"shards": len(w.rows), "key_ranges_per_band": w.parts,
                               "id_groups": int(len(groups)), "id_groups_paired_by_row": int(len(mixed)),
                               "rows_with_signatures": int(sum(w.entries)) if cfg.near else 0}
    return u, v, agree, strict, groups, mixed, w, dropping


def _same_golds(run: StageRun, rows, nodes: np.ndarray, cu: np.ndarray, cv: np.ndarray, asked: np.ndarray,
                cfg: DedupConfig) -> tuple[np.ndarray, np.ndarray]:
    """(same, differ) per pair: equal normalized answers are the same; of the ``asked`` pairs whose answers are
    written differently, math-verify decides ("073" is 73); a pair it cannot decide is neither."""
    from curate.difficulty.grading import GradingPool

    ans = rows.columns(nodes, ["ans"])["ans"]
    same = _equal_at(ans, cu, cv)
    del ans
    differ = ~same
    todo = np.flatnonzero(~same & asked)
    if len(todo):
        gu, gv = rows.columns(nodes[cu[todo]], ["gold"])["gold"], rows.columns(nodes[cv[todo]], ["gold"])["gold"]
        with GradingPool(timeout_s=cfg.gold_timeout_s) as graders:
            verdict = graders.same_answer(list(zip(gu.tolist(), gv.tolist(), strict=True)))
        same[todo] = [x is True for x in verdict]
        differ[todo] = [x is False for x in verdict]
        run.extra["gold_compare"] = {"pairs": int(len(todo)), "same": int(sum(x is True for x in verdict)),
                                     "undecided": int(sum(x is None for x in verdict))}
    return same, differ


def _conflict_details(conflicts: list[dict]) -> dict[int, str]:
    """Row -> the rejection detail of a gold conflict's rows: the row kept, if any, and which answers disagree."""
    detail_of = {}
    for c in conflicts:
        text = (f"kept {c['kept']}; " if c["kept"] else "") + "answers: " + " | ".join(
            f"{r['answer']} ({r['source']} {r['source_id']})" for r in c["rows"])
        for r in c["rows"]:
            detail_of[r["row"]] = text[:500]
    return detail_of


def _write(run: StageRun, dirs: list[Path], decided: _Decided, rows, detail_of: dict[int, str],
           n: int) -> tuple[dict[int, int], int]:
    """The second pass: every input row, in order, kept (its ``dedup_cluster`` the content id of the row it stands
    for) or rejected with its kind and the row it was merged into. Returns the exact and near duplicates counted and
    the number of clusters that had copies."""
    # the content ids of the rows kept for rows with another id (a row's own id otherwise)
    rep_rows = decided.foreign_reps()
    trim_memory()  # what the clusters took and freed goes back before the ids are read
    rep_ids = pa.array(rows.columns(rep_rows, ["id"])["id"], pa.string())
    trim_memory()  # the pass below needs the decisions only: what the pairs and the nodes' columns took goes back
    conflict_rows = np.array(sorted(detail_of), np.int64)
    reason_names = pa.array(["", "dedup_exact", "dedup_near", "gold_conflict"])
    start = 0
    counts = {1: 0, 2: 0}
    reps: list[np.ndarray] = []
    for d in dirs:
        for t in iter_batches(d):
            m = t.num_rows
            rep, k = decided.rows(start, m, rows.ids)
            cluster = t["id"].combine_chunks()  # a row's own id, unless it is merged into a row of another id
            other = (k >= 2) & (rep != np.arange(start, start + m))
            if other.any() and len(rep_rows):
                pos = search(rep_rows, rep[other])
                known = rep_rows[pos] == rep[other]
                index = np.arange(m)
                index[np.flatnonzero(other)[known]] = m + np.arange(int(known.sum()))
                cluster = pa.concat_arrays([cluster, rep_ids.take(pa.array(pos[known]))]).take(pa.array(index))
            t = t.set_column(t.schema.get_field_index("dedup_cluster"), "dedup_cluster", cluster)
            dup = k > 0
            for x in (1, 2):
                counts[x] += int((k == x).sum())
            reps.append(rep[(k == 1) | (k == 2)])
            if sum(len(x) for x in reps) > 2 * len(reps[0]) + 1_000_000:  # held: the clusters, not the rows
                reps = [unique(np.concatenate(reps))]
            rej = t.filter(pa.array(dup))
            reasons = reason_names.take(pa.array(k[dup]))
            details = pc.binary_join_element_wise("kept ", rej["dedup_cluster"], "")
            at = np.flatnonzero(dup) + start
            listed = np.isin(at, conflict_rows)
            if listed.any():  # a conflict's rows say which answers disagree
                details = details.to_pylist()
                for i in np.flatnonzero(listed).tolist():
                    details[i] = detail_of[int(at[i])]
            start += m
            run.emit(keep_rows(t, pa.array(~dup), rej),
                     reject_table(rej, "dedup", reasons, details) if rej.num_rows else None)
    if start != n:
        raise StageError(f"dedup: the second pass read {start} rows, the first {n}: the input changed during the run")
    return counts, int(len(unique(np.concatenate(reps)))) if reps else 0


def _equal_at(x: np.ndarray, u: np.ndarray, v: np.ndarray, step: int = 1 << 20) -> np.ndarray:
    """``x[u] == x[v]``, a million pairs at a time: the gathered copies stay 16 MB, not two of every pair's (93 MB
    for 64-bit columns at 10M rows without copies)."""
    out = np.empty(len(u), bool)
    for a in range(0, len(u), step):
        np.equal(x[u[a : a + step]], x[v[a : a + step]], out=out[a : a + step])
    return out


class _Decided:
    """Each row's fate from the clustered nodes: the row it is merged into (``rep``) and its kind (0 kept, 1 exact
    duplicate, 2 near duplicate, 3 gold conflict). The rows of an exact group (``dedup_disk.exact.exact_groups``: its
    first row is the node of every row of its content id) look theirs up by content id, the groups that met no other
    text included; every other row by row (a node, or a row of no pair: kept as it is).

    ``by_id``: the nodes that stand for a group (a node of an id of one row, or of an id whose rows differ, stands for
    its row only). ``in_group``: each row's flag, whether it is a row of a group (None: no groups). Only those rows'
    content ids are read (``rows``)."""

    def __init__(self, nodes, by_id, rep_row, rep_idh, conflict, idh, groups, in_group: np.ndarray | None):
        self.rows_at = nodes[~by_id]  # sorted
        self.row_rep, self.row_idh, self.row_conf = rep_row[~by_id], rep_idh[~by_id], conflict[~by_id]
        # groups no pair reached: their best row stays
        alone = ~in_sorted(groups["idh"].astype(np.uint64), unique(idh[by_id].astype(np.uint64)))
        keys = np.r_[idh[by_id], groups["idh"][alone]].astype(np.uint64)
        order = np.argsort(keys, kind="stable")
        self.ids = keys[order]
        self.id_rep = np.r_[rep_row[by_id], groups["best"][alone]].astype(np.int64)[order]
        self.id_idh = np.r_[rep_idh[by_id], groups["idh"][alone]].astype(np.uint64)[order]
        self.id_conf = np.r_[conflict[by_id], np.zeros(int(alone.sum()), bool)][order]
        self.row_own = idh[~by_id]
        self.in_group = in_group if len(self.ids) else None

    def foreign_reps(self) -> np.ndarray:
        """The rows kept for rows of another content id (their ids are those rows' cluster names), sorted."""
        return unique(np.r_[self.row_rep[self.row_idh != self.row_own], self.id_rep[self.id_idh != self.ids]])

    def rows(self, start: int, m: int, ids_of: Callable[[int, int], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """``(rep, kind)`` of rows ``start .. start + m``; ``ids_of(start, m)``: their content id hashes, asked for
        only when a group's rows are among them."""
        rows = np.arange(start, start + m, dtype=np.int64)
        rep, kind, conf = rows.copy(), np.zeros(m, np.int8), np.zeros(m, bool)
        a, b = _place(self.rows_at, start), _place(self.rows_at, start + m)
        local = self.rows_at[a:b] - start
        rep[local], conf[local] = self.row_rep[a:b], self.row_conf[a:b]
        kind[local] = _kind(rep[local], self.rows_at[a:b], self.row_idh[a:b], self.row_own[a:b])
        if self.in_group is not None:
            at = np.flatnonzero(self.in_group[start : start + m])
            if len(at):
                idh = ids_of(start, m)[at]
                pos = search(self.ids, idh)
                if not (self.ids[pos] == idh).all():
                    raise StageError("dedup: a row of an exact group whose content id no group holds (a damaged work "
                                     "folder?)")
                rep[at], conf[at] = self.id_rep[pos], self.id_conf[pos]
                kind[at] = _kind(rep[at], rows[at], self.id_idh[pos], idh)
        kind[conf] = 3
        return rep, kind


def _place(s: np.ndarray, x: int) -> int:
    """Where integer ``x`` goes in sorted integer array ``s`` (``np.searchsorted``, left), searched as ``s``'s own
    type: numpy would cast the whole of ``s`` to the type of a needle of another (int32 nodes, int64 rows: 2 ms a
    call at 10M rows, twice a batch of the final pass)."""
    if x > np.iinfo(s.dtype).max:
        return len(s)
    return int(np.searchsorted(s, np.array(x, s.dtype)))


def _kind(rep: np.ndarray, row: np.ndarray, rep_idh: np.ndarray, own_idh: np.ndarray) -> np.ndarray:
    """Rows' kinds from the row each is merged into: 0 kept (itself), 1 exact duplicate (a row of its content id),
    2 near duplicate."""
    return np.where(rep == row, 0, np.where(rep_idh == own_idh, 1, 2))


def _dedup_config(cfg: DedupConfig) -> dict:
    """The dedup stage's identity: math-verify decides which golds are one answer; the engine and its processes
    change nothing in the output."""
    from curate.difficulty.grading import GRADER_VERSION

    return {**{k: v for k, v in asdict(cfg).items() if k not in ("engine", "workers")}, "grader_version": GRADER_VERSION}


def dedup_shard_jobs(inputs: list[Path], out: Path, cfg: DedupConfig | None = None) -> list[dedup_disk.ShardJob] | None:
    """Claim a dedup output folder and list its per-shard jobs, for a scheduler that runs them as tasks of its own
    (the Prefect flow on Ray: ``dedup_disk.shard_ids`` for each, ``dedup_disk.prepare`` once, then
    ``dedup_disk.shard_work`` for each); ``dedup_stage`` then finds their files and goes on from there. None when
    the folder already holds the complete output, or the engine is not ``disk``."""
    from curate.core.runner import Runner

    cfg = cfg or DedupConfig()
    if cfg.engine != "disk":
        return None
    runner = Runner("dedup", out, input_entries(inputs), _dedup_config(cfg), False, inputs)
    if runner.previous() is not None:
        return None
    runner.begin()
    prio = {s: i for i, s in enumerate(cfg.source_priority)}
    shards = [p for d in kept_dirs(inputs) for p in shard_paths(d)]
    dedup_disk.claim_work(out / WORK)
    return dedup_disk.jobs(shards, out / WORK, cfg, prio)


def _conflict_clusters(rep, u, v, differ, same_statement, nodes, best, grouped, rows, cfg: DedupConfig) -> list[dict]:
    """Each cluster whose golds disagree: its rows (source, id, gold) and the distinct golds, for the manifest,
    the card and the reject details. With ``conflicts="keep"`` the clusters are listed all the same. ``rep``,
    ``u`` and ``v`` index ``nodes`` (the rows that have a pair; ``grouped``: a node standing for every row of its
    content id, whose best row is ``best``); ``rows`` reads their columns."""
    bad = conflict_pairs(differ, same_statement, cfg)
    comps: dict[int, None] = {}
    for a, b in zip(u[bad].tolist(), v[bad].tolist(), strict=True):
        if rep[a] == rep[b]:
            comps[int(rep[a])] = None
    if not comps:
        return []
    js = np.flatnonzero(np.isin(rep, list(comps)))
    member_rows = {int(nodes[j]): int(rep[j]) for j in js[~grouped[js]]}
    if grouped[js].any():  # every row of those content ids, found by id
        comp_of = {int(h): int(rep[j]) for h, j in zip(rows.columns(nodes[js[grouped[js]]], ["idh"])["idh"].tolist(),
                                                        js[grouped[js]].tolist(), strict=True)}
        for r, c in rows.rows_of_ids(comp_of).items():
            member_rows[r] = c
    members: dict[int, list[int]] = {c: [] for c in comps}
    for r in sorted(member_rows):
        members[member_rows[r]].append(r)
    every = sorted(member_rows)
    f = rows.columns(np.array(every, np.int64), ["id", "source", "source_id", "gold"])
    at = {r: i for i, r in enumerate(every)}
    out = []
    for c, rs in members.items():
        kept = int(best[c])
        if kept not in at:
            kept_id = str(rows.columns(np.array([kept]), ["id"])["id"][0])
        else:
            kept_id = str(f["id"][at[kept]])
        out.append({"kept": None if cfg.conflicts == "drop" else kept_id,
                    "answers": list(dict.fromkeys(str(f["gold"][at[r]]) for r in rs)),
                    "rows": [{"row": r, "id": str(f["id"][at[r]]), "source": str(f["source"][at[r]]),
                              "source_id": str(f["source_id"][at[r]]), "answer": str(f["gold"][at[r]])} for r in rs]})
    return out
