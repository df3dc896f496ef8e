"""Decontamination against evaluation benchmarks: exact normalized match and word n-gram overlap.

A benchmark is ``NAME=PATH`` (any file ``gradus ingest`` reads: JSONL, JSON, CSV, Parquet) or a known
name (``aime24``, ``aime25``, ``math500``, ``amc23``) that resolves to a local copy when one is found
(``$GRADUS_BENCHMARKS`` or ``../shared/data``) and to its hub id otherwise.

Both sides are read the same way (escape damage repaired, ``curate.clean.text.canonical``: ``\\frac12`` is
``\\frac{1}{2}``, ``\\(..\\)`` is ``$..$``). Rules (a row is contaminated when any fires; the first benchmark
item matched is recorded):
- exact: the row's normalized text (``exact_key``) equals a benchmark item's (compared by content id: the rows'
  ``id`` is that text's hash, computed once at ingest), or its word sequence does
  (``sequence_keys``: the canonical tokens without question words, 3 of them or more, or 2 with a number of
  two digits or more), which catches
  formatting-only rewrites and a reworded "Compute"/"Find" on items too short for any n-gram;
- n-gram: the row holds at least ``min_overlap`` of the benchmark item's distinct token ``ngram``-grams, and
  never fewer than ``min_shared`` of them (or all, for an item with fewer); or it holds ``min_overlap_numbers``
  of them, at least ``min_shared``, and every number of the item, when the item's numbers are telling (two or
  more, one of them of two digits or more: "1, 2, 3" is in every other problem); a reworded copy keeps the
  problem's numbers, shared boilerplate does not bring them. The share is of the
  benchmark item's n-grams: a long row that quotes a short item's formula in passing is not a copy of it.
  Either way the row must hold every number of the item (a sibling of a template with other numbers is another
  problem), and no match stands between two statements whose ``[asy]`` drawings differ.
  N-grams found in two or more benchmark items are phrasing, not content, and are not indexed.
Open-R1's decontamination flags any single shared 8-gram (``min_overlap=0, min_shared=1,
require_numbers=False``); Light-R1 uses
32-grams. On AIME 1983-2024 against AIME 2024, any-overlap flags 113 problems of earlier years
(competition boilerplate such as "can be written as m/n where m and n are relatively prime positive
integers"); the defaults flag the 14 problems of 2024 and nothing else (tests/test_realdata.py).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.clean.text import (
    asy_keys,
    canonical,
    content_id,
    content_ids,
    exact_key,
    ngram_hashes,
    repair_escapes,
    sequence_array,
    sequence_keys,
    tokens,
)
from curate.core.arrays import IntTable, union
from curate.core.errors import SourceError
from curate.sources.adapters import apply_adapter, detect_adapter
from curate.sources.readers import read_all

# Known benchmarks: local file names looked for under the data folder, and the hub id otherwise.
KNOWN_BENCHMARKS = {
    "aime24": ("benchmarks/aime24/test.jsonl", "HuggingFaceH4/aime_2024"),
    "aime25": ("benchmarks/aime25/test.jsonl", "math-ai/aime25@test"),
    "math500": ("math500/test.jsonl", "HuggingFaceH4/MATH-500@test"),
    "amc23": ("benchmarks/amc23/test.jsonl", "math-ai/amc23@test"),
}


@dataclass(frozen=True)
class DecontamConfig:
    benchmarks: tuple[str, ...] = field(default=(), metadata={"path": True})  # NAME=PATH or aime24/aime25/math500/amc23
    ngram: int = 8  # n-gram length in tokens (Open-R1's decontamination uses 8; Light-R1 32)
    min_overlap: float = 0.5  # share of the benchmark item's n-grams the row must hold; 0 = any shared n-gram
    min_overlap_numbers: float = 0.2  # lower share when the row holds every number of the item (see above)
    min_shared: int = 3  # and never fewer shared n-grams than this (or than the item has)
    require_numbers: bool = True  # an n-gram match must hold every number of the item
    exact: bool = True  # also reject exact matches of the normalized text and of the word sequence
    workers: int = 0  # processes that match batches; 0: the usable cores for 200k rows or more (not in the identity)

    def __post_init__(self) -> None:
        if self.ngram < 1 or self.min_shared < 1:
            raise ValueError("ngram and min_shared must be >= 1")
        if not 0.0 <= self.min_overlap <= 1.0 or not 0.0 <= self.min_overlap_numbers <= 1.0:
            raise ValueError("min_overlap and min_overlap_numbers must be in [0, 1]")


def benchmark_roots() -> list[Path]:
    """Where a known benchmark's file is looked for, the same from any working directory: ``GRADUS_BENCHMARKS``,
    ``GRADUS_REAL_DATA``, the user's cache (``$XDG_CACHE_HOME/gradus/benchmarks``), and for a source checkout the
    ``shared/data`` folder beside it. None there: the benchmark's hub id (read from the Hub, or its cache)."""
    roots = [os.environ.get("GRADUS_BENCHMARKS"), os.environ.get("GRADUS_REAL_DATA"),
             str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gradus" / "benchmarks")]
    here = Path(__file__).resolve().parents[2]  # the checkout's root when gradus runs from a source checkout
    if (here / "pyproject.toml").is_file():
        roots.append(str(here.parent / "shared" / "data"))
    return [Path(r) for r in roots if r]


def resolve_benchmark(spec: str) -> tuple[str, str]:
    """``NAME=PATH`` or a known name -> (name, path or hub id)."""
    if "=" in spec:
        name, path = spec.split("=", 1)
        return name, path
    if spec in KNOWN_BENCHMARKS:
        rel, hub = KNOWN_BENCHMARKS[spec]
        for root in benchmark_roots():
            if (Path(root) / rel).is_file():
                return spec, str(Path(root) / rel)
        return spec, hub
    p = Path(spec)
    if p.is_file():
        return p.stem, spec
    raise SourceError(f"unknown benchmark {spec!r}: give NAME=PATH or one of {', '.join(KNOWN_BENCHMARKS)}")


@dataclass
class BenchmarkIndex:
    ngram: int
    names: list[str] = field(default_factory=list)  # per item: benchmark name
    ids: list[str] = field(default_factory=list)  # per item: id in its benchmark
    sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per item: distinct n-grams
    hashes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))  # sorted n-gram hashes
    owner: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # item of each hash
    exact: dict[str, int] = field(default_factory=dict)  # content id (hash of the exact key, as rows' ids) -> item
    sequence: dict[str, int] = field(default_factory=dict)  # word-sequence key -> item
    numbers: list[Counter] = field(default_factory=list)  # per item: the numbers of its canonical statement
    drawings: list[str] = field(default_factory=list)  # per item: its [asy] code ("" when none)

    @classmethod
    def build(cls, specs: tuple[str, ...], ngram: int, drop_shared: bool = True) -> BenchmarkIndex:
        idx = cls(ngram=ngram)
        all_h, all_o = [], []
        for spec in specs:
            name, where = resolve_benchmark(spec)
            for raw in read_all(where):
                cols = apply_adapter(detect_adapter(raw), raw)
                problems, _ = repair_escapes(pa.array(cols["problem"], pa.string()))
                base = len(idx.ids)
                idx.names += [name] * len(problems)
                idx.ids += [str(s) for s in cols["source_id"]]
                canon = canonical(problems)
                toks = tokens(problems, canon)
                idx.numbers += [_numbers(c) for c in canon.to_pylist()]
                idx.drawings += asy_keys(problems).to_pylist()
                for j, k in enumerate(exact_key(problems).to_pylist()):
                    if k:
                        idx.exact.setdefault(content_id(k), base + j)
                for j, k in enumerate(sequence_keys(problems, toks)):
                    if _telling(k):
                        idx.sequence.setdefault(k, base + j)
                h, r = ngram_hashes(problems, ngram, short_docs=False, toks=toks)
                pairs = np.unique(np.stack([h, r.astype(np.uint64)]), axis=1) if len(h) else np.zeros((2, 0), np.uint64)
                all_h.append(pairs[0])
                all_o.append(pairs[1].astype(np.int64) + base)
        if all_h:
            h, o = np.concatenate(all_h), np.concatenate(all_o)
            order = np.lexsort((o, h))
            h, o = h[order], o[order]
            if drop_shared:
                # an n-gram found in two or more benchmark items is phrasing, not content
                uniq, counts = np.unique(h, return_counts=True)
                keep = np.isin(h, uniq[counts == 1])
                h, o = h[keep], o[keep]
            idx.hashes, idx.owner = h, o
            idx.sizes = np.bincount(o, minlength=len(idx.ids))  # distinct indexed n-grams per item
        return idx

    def _lookup(self, which: str) -> tuple[pa.Array, np.ndarray]:
        """The keys of ``self.exact`` or ``self.sequence`` as one arrow array and their items (built once a process):
        rows are looked up a batch at a time by ``pc.index_in``, no Python per row."""
        cache = self.__dict__.setdefault("_lookups", {})
        if which not in cache:
            d = getattr(self, which)
            cache[which] = (pa.array(list(d), pa.string()), np.fromiter(d.values(), np.int64, len(d)))
        return cache[which]

    def match(self, problems: pa.Array | pa.ChunkedArray, cfg: DecontamConfig,
              ids: pa.Array | pa.ChunkedArray | None = None) -> tuple[list, list, list]:
        """Per row: (benchmark name or None, benchmark id or None, kind 'exact'/'ngram' or None). ``ids``: the rows'
        content ids (the record's ``id``, ``content_ids`` of the problem, which ingest computed), computed here
        when not given.

        Everything that reads every row is vectorized (canonical form, tokens, n-gram hashes, key lookups); only rows
        that share a key or an indexed n-gram with an item are looked at one by one, and their drawings and numbers
        are read then."""
        n = len(problems)
        bench: list = [None] * n
        bid: list = [None] * n
        kind: list = [None] * n
        canon = canonical(problems)  # once: the sequence keys, the n-grams and the numbers all read it
        toks = tokens(problems, canon)
        exact_rows = np.zeros(0, np.int64)
        if cfg.exact and (self.exact or self.sequence):
            item = np.full(n, -1, np.int64)
            if self.exact:
                keys, items = self._lookup("exact")
                ids = content_ids(problems) if ids is None else ids
                at = pc.fill_null(pc.index_in(ids, value_set=keys), -1).to_numpy(zero_copy_only=False)
                item[at >= 0] = items[at[at >= 0]]
            if self.sequence:
                keys, items = self._lookup("sequence")
                at = pc.fill_null(pc.index_in(sequence_array(problems, toks), value_set=keys), -1)
                at = at.to_numpy(zero_copy_only=False)
                hit = (item < 0) & (at >= 0)
                item[hit] = items[at[hit]]
            exact_rows = np.nonzero(item >= 0)[0]
        pair_rows = pair_items = np.zeros(0, np.int64)
        strong = weak = np.zeros(0, bool)
        if len(self.hashes):
            h, r = ngram_hashes(problems, self.ngram, short_docs=False, toks=toks)
            pos = np.searchsorted(self.hashes, h)
            found = (pos < len(self.hashes)) & (self.hashes[np.minimum(pos, len(self.hashes) - 1)] == h)
            if found.any():
                # distinct n-grams per row, among those indexed
                hr = np.unique(np.stack([h[found], r[found].astype(np.uint64)]), axis=1)
                h, hit_rows = hr[0], hr[1].astype(np.int64)
                hit_pos = np.searchsorted(self.hashes, h)
                ends = np.searchsorted(self.hashes, h, side="right")
                # every (row, benchmark item) pair sharing an n-gram; a hash may belong to several items
                rows_rep = np.repeat(hit_rows, ends - hit_pos)
                items = self.owner[np.concatenate([np.arange(s, e) for s, e in zip(hit_pos, ends, strict=True)])]
                pair_keys, shared = np.unique(np.stack([rows_rep, items]), axis=1, return_counts=True)
                item_size = self.sizes[pair_keys[1]]
                floor = np.minimum(cfg.min_shared, item_size)  # an item with 2 n-grams needs both
                strong = shared >= np.maximum(floor, np.ceil(cfg.min_overlap * item_size))
                weak = shared >= np.maximum(floor, np.ceil(cfg.min_overlap_numbers * item_size))
                keep = strong | weak
                pair_rows, pair_items, strong, weak = pair_keys[0][keep], pair_keys[1][keep], strong[keep], weak[keep]
        drawings: dict[int, str] = {}
        if any(self.drawings):  # only the rows with a candidate item
            cand = union(exact_rows, pair_rows)
            drawings = dict(zip(cand.tolist(), asy_keys(pc.take(problems, pa.array(cand))).to_pylist(), strict=True))

        def other_figure(row: int, item: int) -> bool:  # the same words around another drawing: another problem
            return bool(drawings.get(row)) and bool(self.drawings[item]) and drawings[row] != self.drawings[item]

        for row in exact_rows.tolist():
            it = int(item[row])
            if not other_figure(row, it):
                bench[row], bid[row], kind[row] = self.names[it], self.ids[it], "exact"
        for row, it, is_strong in zip(pair_rows.tolist(), pair_items.tolist(), strong.tolist(), strict=True):
            if kind[row] is not None or other_figure(row, it):
                continue
            nums = self.numbers[it]
            telling = len(nums) >= 2 and any(len(x) >= 2 for x in nums)  # "1, 2, 3" is in every other problem
            if not is_strong and not telling:
                continue
            # a copy keeps the problem's numbers; a template's sibling does not: some number of the item (or one of
            # its repeats) missing from the row
            if nums and cfg.require_numbers and nums - _numbers(canon[row].as_py()):
                continue
            bench[row], bid[row], kind[row] = self.names[it], self.ids[it], "ngram"
        return bench, bid, kind


def _telling(key: str) -> bool:
    """A word-sequence key specific enough to match on: three tokens or more, or two with a number of two
    digits or more ("sqrt 242")."""
    toks = key.split()
    return len(toks) >= 3 or (len(toks) == 2 and any(t.isdigit() and len(t) >= 2 for t in toks))


def _numbers(canonical_text: str | None) -> Counter:
    """The numbers of a statement in ``canonical`` form, with their counts (``\\frac12`` is 1 and 2 on both sides;
    a sibling that turns ``g(2)`` into ``g(5)`` keeps the other 2 but not both)."""
    return Counter(re.findall(r"\d+", canonical_text or ""))


REMEMBER_TEXTS = 3_000_000  # distinct texts whose verdicts a run keeps (about 50 bytes each); later ones are matched


class Verdicts:
    """Each distinct problem text is matched once per run: a row whose text came before takes that row's verdict.

    A stage sees many exact copies before dedup runs (55% of the 1M synthetic rows, 78% of 10M; merged public sets
    repeat one another), and a row's verdict is a function of its text alone (``BenchmarkIndex.match`` reads the
    text and its content id, the hash of the text's exact key). A text is known by two independent 64-bit
    fingerprints: Python's string hash of the text (the table's key) and its content id (sha1 of the exact key,
    read from its 16 hex characters); a verdict is reused only when both are equal.

    ``plan`` (when a batch is sent) names the rows to match (the first row of each text not known yet) and gives
    each row a reference: a known text's slot (>= 0), or ``-1 - j`` for the ``j``-th row sent with this batch.
    ``resolve`` (when the batch's verdicts come back, in send order) keeps the verdicts of the texts it remembers and
    makes the batch's columns. A slot belongs to the batch that sent its text or an earlier one, so resolving in send
    order always finds it filled. Memory is bounded: the first ``limit`` distinct texts are remembered (per text
    18-36 bytes in the table, at most two thirds full, and 12-18 in a word and a verdict: about 80 MB for the 2.2M
    texts of 10M synthetic rows, at most about 160 MB), later new texts are matched each time they come."""

    def __init__(self, limit: int = REMEMBER_TEXTS) -> None:
        self.limit = limit
        self.table = IntTable(values=np.int32)  # text hash -> slot
        self.word = np.zeros(1 << 16, np.int64)  # per slot: the content id's word
        self.verdict = np.zeros(1 << 16, np.int32)  # per slot: -1 not contaminated, else an index into ``matches``
        self.slots = 0  # texts remembered
        self.matched = 0  # rows sent to be matched (distinct texts, and texts past the limit each time they came)
        self.matches: list[tuple[str, str, str]] = []

    def plan(self, problems: pa.Array | pa.ChunkedArray,
             ids: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, int]:
        """(each row's reference, the rows to match in row order, the first slot of their texts or -1 when they are
        past the limit)."""
        th = np.fromiter(map(hash, problems.to_pylist()), np.int64, len(problems))
        th[th == IntTable.EMPTY] = -2  # Python's hash is never -1 (CPython keeps it for errors): this is for safety
        w = _id_words(ids)
        held = self.table.get(th)
        hit = held >= 0
        hit[hit] = self.word[held[hit]] == w[hit]
        refs = np.where(hit, held, -1)
        new = np.flatnonzero(~hit)
        # the new texts: one row sent per (text hash, word), in row order
        order = new[np.argsort(th[new], kind="stable")]  # equal hashes in row order
        first = np.ones(len(order), bool)
        first[1:] = th[order][1:] != th[order][:-1]
        if (w[order][~first] != w[order][np.flatnonzero(first)[np.cumsum(first) - 1]][~first]).any():
            order = new[np.lexsort((new, w[new], th[new]))]  # one hash, two words: told apart by the word too
            first[1:] = (th[order][1:] != th[order][:-1]) | (w[order][1:] != w[order][:-1])
        send = np.sort(order[first])
        group_first = order[np.flatnonzero(first)[np.cumsum(first) - 1]]  # each new row's first row of its text
        at_send = np.full(len(th), -1, np.int64)
        at_send[send] = np.arange(len(send))
        self.matched += len(send)
        base = self.slots
        if base + len(send) > self.limit:  # past the limit: this batch's texts are not remembered
            refs[order] = -1 - at_send[group_first]
            return refs, send, -1
        refs[order] = base + at_send[group_first]
        self._grow(base + len(send))
        self.word[base:base + len(send)] = w[send]
        self.verdict[base:base + len(send)] = -1
        self.slots = base + len(send)
        # the table keeps one slot per text hash (another text of the same hash, never seen in practice, is
        # matched each time it comes)
        fresh = order[first]  # the sent rows, already sorted by text hash
        fresh = fresh[held[fresh] < 0]
        if len(fresh):
            one = np.ones(len(fresh), bool)
            one[1:] = th[fresh][1:] != th[fresh][:-1]
            self.table.put(th[fresh[one]], base + at_send[fresh[one]])
        return refs, send, base

    def _grow(self, n: int) -> None:
        if n > len(self.word):
            cap = max(n, len(self.word) * 3 // 2)
            self.word = np.concatenate([self.word, np.zeros(cap - len(self.word), np.int64)])
            self.verdict = np.concatenate([self.verdict, np.zeros(cap - len(self.verdict), np.int32)])

    def resolve(self, refs: np.ndarray, base: int,
                found: tuple[pa.Array, pa.Array, pa.Array]) -> tuple[pa.Array, pa.Array, pa.Array]:
        """Benchmark, benchmark id and kind of each row of a batch (null where not contaminated), from ``plan``'s
        references and first slot, and ``found``, the verdicts of the rows it sent (as ``match_batch`` gives them)."""
        bench, bid, kind = found
        hit = np.flatnonzero(pc.is_valid(kind).to_numpy(zero_copy_only=False))
        if base >= 0:  # the batch's texts are remembered: their verdicts first
            for j in hit.tolist():
                self.verdict[base + j] = len(self.matches)
                self.matches.append((bench[j].as_py(), bid[j].as_py(), kind[j].as_py()))
        local = refs < 0  # a row sent with this batch, past the limit
        v = np.where(local, -1, self.verdict[np.maximum(refs, 0)])
        null = ~local & (v < 0)
        if null.all():
            none = pa.nulls(len(refs), pa.string())
            return none, none, none
        # one take from [this batch's verdicts, the remembered matches]
        at = pa.array(np.where(local, -1 - refs, len(kind) + v), pa.int64(), mask=null)
        b, i, k = (pa.concat_arrays([col, pa.array([m[c] for m in self.matches], pa.string())]).take(at)
                   for c, col in enumerate((bench, bid, kind)))
        return b, i, k


_HEX = np.full(256, 255, np.uint8)  # a lowercase hex digit's value; 255 for any other byte
_HEX[48:58], _HEX[97:103] = np.arange(10), np.arange(10, 16)


def _id_words(ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The content ids as 64-bit words: 16 hex characters each, read from the string buffer; any other id (not
    written by ingest) by Python's string hash."""
    ids = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
    n = len(ids)
    if n and ids.null_count == 0 and ids.type == pa.string():
        offsets = np.frombuffer(ids.buffers()[1], np.int32, n + 1, ids.offset * 4)
        if offsets[-1] - offsets[0] == 16 * n and (np.diff(offsets) == 16).all():
            d = np.frombuffer(ids.buffers()[2], np.uint8, 16 * n, int(offsets[0])).reshape(n, 16)
            v = _HEX[d]
            if v.max() < 16:
                return (v[:, 0::2] * 16 + v[:, 1::2]).view(">u8").ravel().astype(np.int64)
    return np.fromiter(map(hash, ids.to_pylist()), np.int64, n)


# ---- the match in worker processes (curate.core.parallel): each worker holds the index once
_WORKER: dict = {}


def init_matcher(index: BenchmarkIndex, cfg: DecontamConfig) -> None:
    _WORKER["index"], _WORKER["cfg"] = index, cfg


def match_batch(batch: tuple[pa.Array | pa.ChunkedArray, pa.Array | pa.ChunkedArray]) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``BenchmarkIndex.match`` of (problems, ids) with the index and config ``init_matcher`` gave this process, as
    string arrays (benchmark, benchmark id, kind; null where no match): arrays travel between processes as buffers."""
    bench, bid, kind = _WORKER["index"].match(batch[0], _WORKER["cfg"], batch[1])
    return pa.array(bench, pa.string()), pa.array(bid, pa.string()), pa.array(kind, pa.string())
