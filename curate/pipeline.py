"""The curation stages as library functions: ingest, filter (+ gold gate), decontaminate, deduplicate.

Each reads shards (or a source) and writes ``OUT/kept``, ``OUT/rejected`` and ``OUT/manifest.json``
through the one stage runner (``curate.core.runner.Runner``); ``curate_all`` runs them in order from a ``CurateConfig``::

    OUT/1_ingest/<source>/  ->  OUT/2_filter/  ->  OUT/3_decontam/  ->  OUT/4_dedup/ (the clean set)

Decontamination runs before dedup so that every copy of a benchmark item is reported as
contaminated, not only the one a dedup would have kept.
"""

from __future__ import annotations

import logging
import shutil
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.clean import dedup_disk
from curate.clean.decontam import (
    BenchmarkIndex,
    DecontamConfig,
    Verdicts,
    init_matcher,
    match_batch,
    resolve_benchmark,
)
from curate.clean.dedup import DedupConfig, candidate_pairs, clusters, conflict_pairs, loose_pairs
from curate.clean.dedup_disk import FEATURES, READ_COLUMNS, WORK, features
from curate.clean.filters import BATCH_COLUMNS, FilterConfig, filter_batch
from curate.clean.text import content_ids, repair_escapes
from curate.core.arrays import in_sorted, marked_places, search, unique
from curate.core.config import ConfigError, check_keys, from_dict, load_file
from curate.core.errors import SourceError
from curate.core.manifest import Manifest
from curate.core.parallel import PARALLEL_MIN_ROWS, ordered_map, trim_memory, worker_pool, workers_for
from curate.core.runner import (
    StageError,
    StageRun,
    _value_counts,
    file_fingerprint,
    input_entries,
    reject_table,
    run_stage,
)
from curate.core.schema import SCHEMA, conform
from curate.core.shards import count_rows, iter_batches, shard_paths, stage_dir, write_json_atomic
from curate.sources.adapters import (
    ADAPTERS,
    apply_adapter,
    detect_adapter,
    mapped_adapter,
    parse_mapping,
    row_id_prefix,
)
from curate.sources.answers import answer_types
from curate.sources.readers import FastPathFailed, detect_format, read_source

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------- ingest
# 2: row-number ids qualified by the file name, \[..\] answer wrappers, newline-damaged commands repaired,
#    solutions whose boxes disagree rejected as answer_ambiguous
INGEST_RULES = 2


def _ambiguous_boxes(boxes: list, reject: list, detail: list, pool) -> int:
    """Reject (``answer_ambiguous``) the rows whose solution boxes answers that math-verify finds different: a
    "find all solutions" boxed as ``-2`` and ``1``, a solution that boxes 6 then 12. Boxes that are one answer
    written two ways (``x+11`` and ``11+x``) pass. Returns the number rejected."""
    pairs, owners = [], []
    for i, bx in enumerate(boxes):
        if bx and reject[i] is None:
            for b in bx[:-1]:
                pairs.append((b, bx[-1]))
                owners.append(i)
    same = pool.same_answer(pairs) if pairs else []
    bad = sorted({i for i, ok in zip(owners, same, strict=True) if ok is False})  # a timeout decides nothing
    for i in bad:
        reject[i] = "answer_ambiguous"
        detail[i] = "boxes: " + " | ".join(boxes[i])[:300]
    return len(bad)

def _records(cols: dict, n: int, source: str, origin: str) -> tuple[pa.Table, list, list, int]:
    problems = pa.array(cols["problem"], pa.string())
    problems, repaired = repair_escapes(problems)
    stripped = pc.utf8_trim_whitespace(problems)
    cols = dict(cols)
    if cols.get("answer") is not None:
        cols["answer"], rep_a = repair_escapes(pa.array(cols["answer"], pa.string()))
        repaired = pc.or_(repaired, rep_a)
    reject, detail = cols.pop("_reject"), cols.pop("_reject_detail")
    cols.pop("_boxes", None)
    cols["problem"] = pc.fill_null(stripped, "")
    cols["id"] = content_ids(stripped)
    cols["source"] = pa.array([source] * n, pa.string())
    cols["origin"] = pa.array([origin] * n, pa.string())
    if "answer" in cols:
        cols["answer_type"] = answer_types(cols["answer"])
    null_problem = pc.is_null(problems).to_pylist()
    reject = [r or ("ingest_missing_problem" if np_ else None) for r, np_ in zip(reject, null_problem, strict=False)]
    n_repaired = int(pc.sum(repaired.cast(pa.int64())).as_py() or 0)
    return conform({k: v for k, v in cols.items() if k in SCHEMA.names}, n), reject, detail, n_repaired


def _adapt_batch(job: tuple) -> tuple:
    """One raw batch through its adapter into record rows (in a worker process for large sources)."""
    which, raw, prefix, source_name, spec = job
    chosen = ADAPTERS[which] if which in ADAPTERS else mapped_adapter(parse_mapping(which))
    cols = apply_adapter(chosen, raw, prefix)
    boxes = cols.get("_boxes")
    table, reject, detail, n_repaired = _records(cols, raw.num_rows, source_name or chosen.name, spec)
    return table, reject, detail, n_repaired, boxes


def _ingest_workers(spec: str, fmt: str) -> int:
    """Worker processes for a source: the usable cores when it holds 200k rows or more (a Parquet file's
    metadata, a synthetic spec's ``n``; other files from their size, 64 MB or more), else this process."""
    try:
        if fmt == "synthetic":
            from curate.sources.synthetic import parse_spec

            return workers_for(int(parse_spec(spec)["n"]))
        from curate.sources.readers import source_files

        files = source_files(spec)  # the file, or every file of a folder or a glob
        if not files:
            return 1
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return workers_for(sum(pq.ParquetFile(f).metadata.num_rows for f in files))
        return workers_for(PARALLEL_MIN_ROWS if sum(f.stat().st_size for f in files) >= 64 << 20 else 0)
    except Exception:  # noqa: BLE001 - a guess at the size: the reader reports what is wrong with the source
        return 1


def ingest(
    spec: str,
    out: Path,
    fmt: str | None = None,
    adapter: str | None = None,
    mapping: str | None = None,
    source_name: str | None = None,
    force: bool = False,
    revision: str | None = None,
) -> Manifest:
    """Read a source (file, hub id, ``synthetic:...``) into record shards; unreadable rows are rejects."""
    fmt = fmt or detect_format(spec)
    if adapter and adapter not in ADAPTERS:
        raise SourceError(f"unknown adapter {adapter!r}; choose one of {', '.join(ADAPTERS)}")
    mapped = mapped_adapter(parse_mapping(mapping)) if mapping else None
    from curate.difficulty.grading import GRADER_VERSION

    config = {"format": fmt, "adapter": adapter, "mapping": mapping, "source_name": source_name,
              "rules": INGEST_RULES, "grader_version": GRADER_VERSION}  # math-verify judges a solution's boxes
    pinned = None
    inputs: list[dict]
    if fmt == "hf":  # the commit this run reads: its fingerprint, recorded in the manifest (and the card)
        from curate.sources.hub import resolve

        pinned = resolve(spec, revision)
        inputs = [{"source": spec, "revision": pinned.commit, "fingerprint": pinned.commit[:16]}]
    else:
        if revision:
            raise SourceError(f"{spec}: a revision is for hub sources only")
        inputs = [{"source": spec, "fingerprint": file_fingerprint(spec)}]
    from curate.sources.readers import source_root

    skipped: dict[str, str] = {}
    if source_root(spec) is not None:  # a folder or a glob: how many files the fingerprint covers, and what it skips
        from curate.sources.readers import skipped_files, source_files

        inputs[0]["files"] = len(source_files(spec))
        skipped = skipped_files(spec)
        for name, why in list(skipped.items())[:5]:
            log.warning("%s: not read: %s (%s)", spec, name, why)
    local = Path(spec)

    def body(run: StageRun) -> None:
        from curate.difficulty.grading import GradingPool

        if skipped:
            run.extra["files_not_read"] = skipped

        pool = GradingPool(timeout_s=5)  # started only if a solution boxes several different answers
        try:
            try:
                if pinned is not None:
                    run.extra["revision"] = {"commit": pinned.commit, "resolved_by": pinned.how, "asked": revision}
                _ingest_batches(run, read_source(spec, fmt, pinned=pinned), pool)
            except FastPathFailed as e:
                log.warning("%s: arrow reader failed (%s); reading line by line", spec, str(e)[:120])
                run.reset()
                run.extra["read_path"] = "python"
                _ingest_batches(run, read_source(spec, fmt, slow=True, pinned=pinned), pool)
        finally:
            pool.close()

    def _ingest_batches(run: StageRun, batches, pool) -> None:
        chosen = None
        prefix = row_id_prefix(spec) if fmt not in ("synthetic", "reasoning_gym") else None

        def jobs():
            nonlocal chosen
            for raw in batches:
                if chosen is None:
                    chosen = mapped or (ADAPTERS[adapter] if adapter else None)
                    if chosen is None:
                        generated = fmt in ("synthetic", "reasoning_gym")  # the generators' own columns
                        chosen = ADAPTERS[fmt] if generated else detect_adapter(raw)
                    run.extra["adapter"] = chosen.name
                yield (mapping if mapped else chosen.name, raw, prefix, source_name, spec)

        workers = _ingest_workers(spec, fmt)
        run.extra["workers"] = workers
        with run.timed("adapt"):
            for table, reject, detail, n_repaired, boxes in ordered_map(_adapt_batch, jobs(), workers):
                run.extra["repaired_latex_escapes"] = run.extra.get("repaired_latex_escapes", 0) + n_repaired
                if boxes and any(boxes):
                    with run.timed("boxes"):
                        n_amb = _ambiguous_boxes(boxes, reject, detail, pool)
                    run.extra["answer_ambiguous"] = run.extra.get("answer_ambiguous", 0) + n_amb
                if not any(reject):  # reasons are non-empty strings: the usual batch, nothing rejected
                    run.emit(table, None)
                    continue
                bad = pa.array([r is not None for r in reject])
                kept = table.filter(pc.invert(bad))
                rej = table.filter(bad)
                rej_reasons = [r for r in reject if r is not None]
                rej_detail = [d for r, d in zip(reject, detail, strict=False) if r is not None]
                run.emit(kept, reject_table(rej, "ingest", rej_reasons, rej_detail) if rej.num_rows else None)

    return run_stage("ingest", out, inputs, config, body, force=force,
                     input_folders=[local] if local.exists() else [])


# ---------------------------------------------------------------------------------------------- filter


def _kept_dirs(dirs: list[Path]) -> list[Path]:
    return [stage_dir(Path(d)) for d in dirs]


def _kept(t: pa.Table, keep: pa.Array | pa.ChunkedArray, rejected: pa.Table) -> pa.Table:
    """The rows of ``t`` that ``keep`` marks: ``t`` itself when ``rejected`` (the batch's other rows) is empty, since a
    filter copies every kept row's text."""
    return t.filter(keep) if rejected.num_rows else t


def filter_stage(inputs: list[Path], out: Path, cfg: FilterConfig | None = None, force: bool = False) -> Manifest:
    """Heuristic filters, then the gold gate (math-verify must parse the gold answer)."""
    cfg = cfg or FilterConfig()
    from curate.difficulty.grading import GRADER_VERSION, GoldVerdicts, GradingPool
    from curate.difficulty.models import cache_dir

    def body(run: StageRun) -> None:
        dirs = _kept_dirs(inputs)
        workers = workers_for(sum(count_rows(d) for d in dirs), cfg.workers)
        run.extra["workers"] = workers
        read: deque = deque()  # the batches sent and not yet written, in order

        def batches():
            for d in dirs:
                for t in iter_batches(d):
                    read.append(t)
                    yield t.select(list(BATCH_COLUMNS)), cfg

        pool = GradingPool(timeout_s=cfg.gold_timeout_s).spawn() if cfg.gold_gate else None  # ready by the first batch
        known = (GoldVerdicts(cache_dir(cfg.gold_cache, "gold_verdicts"), cfg.gold_timeout_s)
                 if pool is not None and cfg.gold_cache else None)
        if pool is not None and known is not None:
            pool.remember(known.load())
        results = ordered_map(filter_batch, batches(), workers)
        try:
            while True:
                with run.timed("heuristics"):
                    got = next(results, None)
                if got is None:
                    break
                filled, reason = got
                t = read.popleft()
                for name, col in filled.items():
                    t = t.set_column(t.schema.get_field_index(name), name, col)
                if pool is not None:
                    with run.timed("gold_gate"):
                        t, reason = _gold_gate(t, reason, pool)
                passed = pc.is_null(reason)
                rejected = pc.invert(passed)
                rej = t.filter(rejected)
                run.emit(_kept(t, passed, rej), reject_table(rej, "filter", reason.filter(rejected)) if rej.num_rows else None)
        finally:
            results.close()  # its worker processes and read-ahead thread stop now, also after an error
            if pool is not None:
                pool.count_plain()
                run.extra["gold_gate"] = {**pool.stats, "grader_version": GRADER_VERSION,
                                          "verdict_cache": str(known.dir) if known is not None else None}
                if known is not None:
                    known.append(pool.new_gold_verdicts())
                pool.close()

    # the grader decides which golds pass: a new math-verify is a new filter; processes change nothing in the output
    config = {**{k: v for k, v in asdict(cfg).items() if k not in ("workers", "gold_cache")},
              "grader_version": GRADER_VERSION if cfg.gold_gate else None}
    return run_stage("filter", out, input_entries(inputs), config, body, force=force, input_folders=inputs)


def _gold_gate(t: pa.Table, reason: pa.Array, pool) -> tuple[pa.Table, pa.Array]:
    """``gold_parseable`` and the rejection reason of each row the heuristics passed: each distinct gold of the batch
    asked once (golds repeat: a million synthetic rows hold 110k distinct), the verdicts put back in arrow."""
    open_ = pc.is_null(reason)
    if isinstance(open_, pa.ChunkedArray):
        open_ = open_.combine_chunks()
    ans = pc.fill_null(pc.filter(t["answer"], open_), "")
    enc = pc.dictionary_encode(ans)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    plain = pool.plain_golds(enc.dictionary).to_numpy(zero_copy_only=False)  # integers, decimals, a/b: no worker
    rest = enc.dictionary.filter(pa.array(~plain)).to_pylist()
    res = pool.parse_gold(rest)
    pool.stats["calls"] += len(ans) - len(rest)  # ``calls`` counts rows asked, as when each row was asked
    pool.stats["memo_hits"] += len(ans) - len(rest)
    ok_np = np.full(len(plain), True, dtype=object)
    why_np = np.full(len(plain), None, dtype=object)
    ok_np[~plain] = [r.ok for r in res]
    why_np[~plain] = [None if r.ok else "answer_unparseable" if r.ok is False else
                      "answer_parse_timeout" if r.reason == "timeout" else "answer_parse_crash" for r in res]
    ok, why = pa.array(ok_np, pa.bool_()), pa.array(why_np, pa.string())
    idx = enc.indices
    parseable = pc.replace_with_mask(pa.nulls(t.num_rows, pa.bool_()), open_, pc.take(ok, idx))
    reasons = pc.replace_with_mask(reason.combine_chunks() if isinstance(reason, pa.ChunkedArray) else reason,
                                   open_, pc.take(why, idx))
    t = t.set_column(t.schema.get_field_index("gold_parseable"), "gold_parseable", parseable)
    return t, reasons


# -------------------------------------------------------------------------------------------- decontam
def decontam_stage(inputs: list[Path], out: Path, cfg: DecontamConfig, force: bool = False) -> Manifest:
    """Reject rows matching a benchmark item (exact normalized text or n-gram overlap)."""
    if not cfg.benchmarks:
        raise ValueError("decontam: name at least one benchmark (--against NAME=PATH or aime24/math500/amc23/aime25)")
    resolved = [resolve_benchmark(b) for b in cfg.benchmarks]
    ins = input_entries(inputs) + [{"benchmark": n, "fingerprint": file_fingerprint(p)} for n, p in resolved]

    def body(run: StageRun) -> None:
        with run.timed("index"):
            index = BenchmarkIndex.build(tuple(f"{n}={p}" for n, p in resolved), cfg.ngram)
        run.extra["benchmark_items"] = {n: index.names.count(n) for n, _ in resolved}
        by_bench: dict[str, int] = {}
        dirs = _kept_dirs(inputs)
        workers = workers_for(sum(count_rows(d) for d in dirs), cfg.workers)
        run.extra["workers"] = workers
        read: deque = deque()  # the batches sent and not yet written, in order, with their rows' references
        verdicts = Verdicts()  # each distinct text is matched once

        def problems():
            for d in dirs:
                for i, t in enumerate(iter_batches(d)):
                    if i == 0 and t.num_rows:  # exact matches compare ids: they must be the problems' content ids
                        sample = t.slice(0, 1000)
                        if not pc.all(pc.equal(sample["id"], content_ids(sample["problem"]))).as_py():
                            raise StageError(f"decontam: {d}: the rows' ids are not the content ids of their problems "
                                             "(shards not written by gradus ingest?): ingest the source again")
                    refs, send, base = verdicts.plan(t["problem"], t["id"])
                    read.append((t, refs, base))
                    rows = pa.array(send, pa.int64())
                    yield t["problem"].take(rows), t["id"].take(rows)

        with run.timed("match"):
            matches = ordered_map(match_batch, problems(), workers, init_matcher, (index, cfg))
            for found in matches:
                t, refs, base = read.popleft()
                bench, bid, kind = verdicts.resolve(refs, base, found)
                hit = pc.is_valid(kind)
                t = t.set_column(t.schema.get_field_index("contam_benchmark"), "contam_benchmark", bench)
                t = t.set_column(t.schema.get_field_index("contam_id"), "contam_id", bid)
                rej = t.filter(hit)
                reasons = pc.binary_join_element_wise("contaminated_", kind.filter(hit), "")
                details = pc.binary_join_element_wise(bench.filter(hit), pc.fill_null(bid.filter(hit), "None"), ":")
                for b, c in _value_counts(rej["contam_benchmark"]).items():
                    by_bench[b] = by_bench.get(b, 0) + c
                run.emit(_kept(t, pc.invert(hit), rej),
                         reject_table(rej, "decontam", reasons, details) if rej.num_rows else None)
        run.extra["contaminated_by_benchmark"] = by_bench
        run.extra["texts_matched"] = verdicts.matched  # distinct texts: every other row took its text's verdict

    config = {k: v for k, v in asdict(cfg).items() if k != "workers"}  # processes change nothing in the output
    return run_stage("decontam", out, ins, config, body, force=force, input_folders=inputs)


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
    from curate.difficulty.grading import GradingPool

    def body(run: StageRun) -> None:
        dirs = _kept_dirs(inputs)
        prio = {s: i for i, s in enumerate(cfg.source_priority)}
        work = out / WORK
        groups, mixed = np.zeros(0, dedup_disk.GROUP), None  # the memory engine pairs every row itself
        dropping = None  # the disk engine's deletion of the files only its pairs read (``drop_pair_inputs``)
        if cfg.engine == "memory":
            with run.timed("signatures"):
                (u, v, agree, strict), rows = _memory_pairs(dirs, cfg, prio)
        else:
            shards = [p for d in dirs for p in shard_paths(d)]
            size = dedup_disk.pool_size(len(shards), cfg.workers)
            with worker_pool(size, preload=True) as pool:  # the per-shard steps
                with run.timed("signatures"):
                    w = dedup_disk.build(shards, work, cfg, prio, pool)
            trim_memory()  # the first steps' arrays: the pairs' sets take their place
            # the bands and the judge in new processes (forked from the same warm fork server, its modules and
            # compiled loops loaded): a process that built signatures keeps 150-200 MB of that step's pages however
            # its heaps are trimmed (at 10M rows without copies a band job then peaked at 595 MB in such a process,
            # 402 MB in a new one). Each band job ends trimming what it freed, so the next starts from that.
            with worker_pool(size, preload=True) as pool:
                with run.timed("pairs"):
                    u, v, agree, strict, groups, mixed = dedup_disk.pairs(w, pool)
            dropping = dedup_disk.drop_pair_inputs(w)  # what only the pairs read goes, beside the steps below
            trim_memory()
            rows = w
            run.extra["dedup_work"] = {"shards": len(w.rows), "key_ranges_per_band": w.parts,
                                       "id_groups": int(len(groups)), "id_groups_paired_by_row": int(len(mixed)),
                                       "rows_with_signatures": int(sum(w.entries)) if cfg.near else 0}
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
            ans = rows.columns(nodes, ["ans"])["ans"]
            same = _equal_at(ans, cu, cv)
            del ans
            differ = ~same
            todo = np.flatnonzero(~same & (strict | loose | same_statement))
            if len(todo):  # golds written differently: math-verify decides ("073" is 73); None decides nothing
                gu, gv = rows.columns(nodes[cu[todo]], ["gold"])["gold"], rows.columns(nodes[cv[todo]], ["gold"])["gold"]
                with GradingPool(timeout_s=cfg.gold_timeout_s) as graders:
                    verdict = graders.same_answer(list(zip(gu.tolist(), gv.tolist(), strict=True)))
                same[todo] = [x is True for x in verdict]
                differ[todo] = [x is False for x in verdict]
                run.extra["gold_compare"] = {"pairs": int(len(todo)), "same": int(sum(x is True for x in verdict)),
                                             "undecided": int(sum(x is None for x in verdict))}
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
        del cu, cv, same_statement, differ, todo, grouped
        with run.timed("clusters"):
            in_group = None
            if len(groups):  # the disk engine's groups: their first rows and the rows those stand for
                in_group = rows.stands_in.copy()
                in_group[groups["first"]] = True
            decided = _Decided(nodes, by_id, best[rep_c], idh[rep_c], kind == 3, idh, groups, in_group)
            del nodes, idh, best, by_id, rep_c, kind, in_group
        detail_of = {}
        for c in conflicts:
            text = (f"kept {c['kept']}; " if c["kept"] else "") + "answers: " + " | ".join(
                f"{r['answer']} ({r['source']} {r['source_id']})" for r in c["rows"])
            for r in c["rows"]:
                detail_of[r["row"]] = text[:500]
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
                run.emit(_kept(t, pa.array(~dup), rej),
                         reject_table(rej, "dedup", reasons, details) if rej.num_rows else None)
        if start != n:
            raise StageError(f"dedup: the second pass read {start} rows, the first {n}: the input changed during the run")
        run.extra["dedup"] = {
            "clusters_with_duplicates": int(len(unique(np.concatenate(reps)))) if reps else 0,
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

    return run_stage("dedup", out, input_entries(inputs), _dedup_config(cfg), body, force=force, input_folders=inputs)


def _equal_at(x: np.ndarray, u: np.ndarray, v: np.ndarray, step: int = 1 << 20) -> np.ndarray:
    """``x[u] == x[v]``, a million pairs at a time: the gathered copies stay 16 MB, not two of every pair's (93 MB
    for 64-bit columns at 10M rows without copies)."""
    out = np.empty(len(u), bool)
    for a in range(0, len(u), step):
        np.equal(x[u[a : a + step]], x[v[a : a + step]], out=out[a : a + step])
    return out


class _Decided:
    """Each row's fate from the clustered nodes: the row it is merged into (``rep``) and its kind (0 kept, 1 exact
    duplicate, 2 near duplicate, 3 gold conflict). The rows of an exact group (``dedup_disk.Work.exact_groups``: its
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
    shards = [p for d in _kept_dirs(inputs) for p in shard_paths(d)]
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


# --------------------------------------------------------------------------------------------- curate
@dataclass(frozen=True)
class SourceSpec:
    spec: str = field(metadata={"path": True})  # a file, a hub id (owner/name[@split]) or synthetic:...
    name: str | None = None  # source name (default: the adapter's)
    format: str | None = None  # jsonl | json | csv | parquet | hf | synthetic (default: from the file name)
    adapter: str | None = None  # force an adapter (gradus list adapters; default: detected from the columns)
    mapping: str | None = None  # column mapping, e.g. problem=question,answer=boxed(solution)
    revision: str | None = None  # hub sources: a commit, branch or tag to read (default: the main branch's commit now)


@dataclass(frozen=True)
class CurateConfig:
    sources: tuple[SourceSpec, ...]
    filters: FilterConfig = field(default_factory=FilterConfig)
    decontam: DecontamConfig = field(default_factory=DecontamConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)

    def __post_init__(self):
        if not self.sources:
            raise ConfigError("sources: list at least one source")

    @classmethod
    def from_dict(cls, d: dict, base_dir: Path | None = None) -> CurateConfig:
        """A config from a dict; relative paths are relative to ``base_dir`` (the config file's folder)."""
        check_keys(d, {"sources", "filters", "decontam", "dedup"}, "config")
        raw = d.get("sources")
        if not isinstance(raw, list) or not raw:
            raise ConfigError("config: 'sources' must list at least one source")
        srcs = tuple(from_dict(SourceSpec, {"spec": s} if isinstance(s, str) else s, f"sources[{i}]", base_dir)
                     for i, s in enumerate(raw))
        return cls(srcs, *(from_dict(k, d.get(key) or {}, key, base_dir)
                           for k, key in ((FilterConfig, "filters"), (DecontamConfig, "decontam"), (DedupConfig, "dedup"))))

    @classmethod
    def load(cls, path: Path) -> CurateConfig:
        return cls.from_dict(load_file(path), base_dir=Path(path).resolve().parent)

    def check(self) -> list[str]:
        """Everything that can be checked before any work: each source and benchmark can be found.
        Returns a plan, one line a step; raises on the first problem."""
        plan = []
        for i, s in enumerate(self.sources):
            fmt = s.format or detect_format(s.spec)
            if s.adapter and s.adapter not in ADAPTERS:
                raise SourceError(f"sources[{i}]: unknown adapter {s.adapter!r}; gradus list adapters")
            if s.mapping:
                parse_mapping(s.mapping)
            plan.append(f"ingest {s.spec} ({fmt}{', adapter ' + s.adapter if s.adapter else ''})")
        plan.append(f"filter (skip: {', '.join(self.filters.skip) or 'none'}; gold gate "
                    f"{'on' if self.filters.gold_gate else 'off'})")
        if self.decontam.benchmarks:
            for b in self.decontam.benchmarks:
                name, where = resolve_benchmark(b)
                if "=" in b and not Path(where).is_file():
                    raise SourceError(f"decontam.benchmarks: {b}: no such file {where}")
            plan.append(f"decontam against {', '.join(self.decontam.benchmarks)} ({self.decontam.ngram}-grams)")
        plan.append(f"dedup ({'exact + near' if self.dedup.near else 'exact'})")
        return plan


def _source_dirname(i: int, s: SourceSpec) -> str:
    base = s.name or Path(s.spec.split(":")[0]).stem or "source"
    return f"{i:02d}_{''.join(c if c.isalnum() or c in '-_.' else '_' for c in base)}"


def curate_all(cfg: CurateConfig, out: Path, force: bool = False, card: bool = True) -> dict:
    """Run every stage in order; returns a summary that names each stage's output and counts."""
    out = Path(out)
    cfg.check()  # sources and benchmarks found before any stage runs
    ingested = [
        ingest(s.spec, out / "1_ingest" / _source_dirname(i, s), s.format, s.adapter, s.mapping, s.name, force,
               revision=s.revision)
        for i, s in enumerate(cfg.sources)
    ]
    ingest_dirs = [out / "1_ingest" / _source_dirname(i, s) for i, s in enumerate(cfg.sources)]
    stages: dict[str, Manifest] = {"filter": filter_stage(ingest_dirs, out / "2_filter", cfg.filters, force)}
    last = out / "2_filter"
    if cfg.decontam.benchmarks:
        stages["decontam"] = decontam_stage([last], out / "3_decontam", cfg.decontam, force)
        last = out / "3_decontam"
    stages["dedup"] = dedup_stage([last], out / "4_dedup", cfg.dedup, force)
    final = out / "4_dedup"
    summary = {
        "final": str(final / "kept"),
        "rows_in": sum(m.rows_in for m in ingested),
        "rows_final": count_rows(final / "kept"),
        "stages": {"ingest": [m.rows_kept for m in ingested], **{k: v.rows_kept for k, v in stages.items()}},
        "skipped": all(m.skipped for m in ingested) and all(v.skipped for v in stages.values()),
    }
    write_json_atomic(out / "curate_summary.json", summary)
    if card:
        from data_cards.render import write_card

        summary["card"] = str(write_card(out))
    return summary
