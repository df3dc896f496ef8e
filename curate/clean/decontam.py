"""Decontamination against evaluation benchmarks: exact normalized match and word n-gram overlap.

A benchmark is ``NAME=PATH`` (any file ``gradus ingest`` reads: JSONL, JSON, CSV, Parquet) or a known
name (``aime24``, ``aime25``, ``math500``, ``amc23``) that resolves to a local copy when one is found
(``$GRADUS_BENCHMARKS`` or ``../shared/data``) and to its hub id otherwise.

Rules (a row is contaminated when any fires; the first benchmark item matched is recorded):
- exact: the row's normalized text (``curate.clean.text.exact_key``) equals a benchmark item's;
- n-gram: the row shares word ``ngram``-grams with one benchmark item, and the shared n-grams cover at
  least ``min_overlap`` of the smaller of the two n-gram sets; or they cover at least
  ``min_overlap_numbers`` and every number of the benchmark item also appears in the row (a reworded
  copy keeps the problem's numbers; shared boilerplate does not bring them). N-grams found in two or
  more benchmark items are phrasing, not content, and are not indexed.
  Open-R1's decontamination uses 8-grams with any single shared n-gram (``min_overlap=0``); Light-R1
  uses 32-grams. On AIME 1983-2024 against AIME 2024, any-overlap flags 250 problems of earlier years
  (competition boilerplate such as "can be written as m/n where m and n are relatively prime positive
  integers"); the defaults flag the 14 problems of 2024 and nothing else (tests/test_realdata.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.clean.text import exact_key, ngram_hashes
from curate.core.errors import SourceError
from curate.sources.adapters import apply_adapter, detect_adapter
from curate.sources.readers import read_source

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
    ngram: int = 8  # Open-R1's decontamination default; Light-R1 uses 32
    min_overlap: float = 0.5  # fraction of the smaller n-gram set; 0 = any shared n-gram (Open-R1)
    min_overlap_numbers: float = 0.2  # lower bar when all the benchmark item's numbers are in the row
    exact: bool = True  # also reject exact matches of the normalized text

    def __post_init__(self) -> None:
        if self.ngram < 1:
            raise ValueError("ngram must be >= 1")
        if not 0.0 <= self.min_overlap <= 1.0 or not 0.0 <= self.min_overlap_numbers <= 1.0:
            raise ValueError("min_overlap and min_overlap_numbers must be in [0, 1]")


def resolve_benchmark(spec: str) -> tuple[str, str]:
    """``NAME=PATH`` or a known name -> (name, path or hub id)."""
    if "=" in spec:
        name, path = spec.split("=", 1)
        return name, path
    if spec in KNOWN_BENCHMARKS:
        rel, hub = KNOWN_BENCHMARKS[spec]
        roots = [os.environ.get("GRADUS_BENCHMARKS"), os.environ.get("GRADUS_REAL_DATA"), "../shared/data",
                 str(Path(__file__).resolve().parents[2] / "shared" / "data")]  # beside a source checkout
        for root in filter(None, roots):
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
    exact: dict[str, int] = field(default_factory=dict)  # exact key -> item
    numbers: list[frozenset] = field(default_factory=list)  # per item: the numbers in its statement

    @classmethod
    def build(cls, specs: tuple[str, ...], ngram: int, drop_shared: bool = True) -> BenchmarkIndex:
        idx = cls(ngram=ngram)
        all_h, all_o = [], []
        for spec in specs:
            name, where = resolve_benchmark(spec)
            for raw in read_source(where):
                cols = apply_adapter(detect_adapter(raw), raw)
                problems = pa.array(cols["problem"], pa.string())
                base = len(idx.ids)
                idx.names += [name] * len(problems)
                idx.ids += [str(s) for s in cols["source_id"]]
                idx.numbers += [_numbers(p) for p in problems.to_pylist()]
                for j, k in enumerate(exact_key(problems).to_pylist()):
                    if k:
                        idx.exact.setdefault(k, base + j)
                h, r = ngram_hashes(problems, ngram, short_docs=False)
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

    def match(self, problems: pa.Array | pa.ChunkedArray, cfg: DecontamConfig) -> tuple[list, list, list]:
        """Per row: (benchmark name or None, benchmark id or None, kind 'exact'/'ngram' or None)."""
        n = len(problems)
        bench: list = [None] * n
        bid: list = [None] * n
        kind: list = [None] * n
        if cfg.exact and self.exact:
            keys = exact_key(problems)
            hit = pc.is_in(keys, value_set=pa.array(list(self.exact)))
            for i in pc.indices_nonzero(pc.fill_null(hit, False)).to_pylist():
                item = self.exact[keys[i].as_py()]
                bench[i], bid[i], kind[i] = self.names[item], self.ids[item], "exact"
        if len(self.hashes) == 0:
            return bench, bid, kind
        h, r = ngram_hashes(problems, self.ngram, short_docs=False)
        if len(h) == 0:
            return bench, bid, kind
        # distinct n-grams per row
        hr = np.unique(np.stack([h, r.astype(np.uint64)]), axis=1)
        h, r = hr[0], hr[1].astype(np.int64)
        row_sizes = np.bincount(r, minlength=n)
        pos = np.searchsorted(self.hashes, h)
        found = (pos < len(self.hashes)) & (self.hashes[np.minimum(pos, len(self.hashes) - 1)] == h)
        if not found.any():
            return bench, bid, kind
        # every (row, benchmark item) pair sharing an n-gram; a hash may belong to several items
        hit_pos, hit_rows = pos[found], r[found]
        ends = np.searchsorted(self.hashes, h[found], side="right")
        counts = ends - hit_pos
        rows_rep = np.repeat(hit_rows, counts)
        items = self.owner[np.concatenate([np.arange(s, e) for s, e in zip(hit_pos, ends, strict=False)])]
        pair_keys, shared = np.unique(np.stack([rows_rep, items]), axis=1, return_counts=True)
        denom = np.minimum(row_sizes[pair_keys[0]], self.sizes[pair_keys[1]])
        strong = shared >= np.maximum(1, np.ceil(cfg.min_overlap * denom))
        weak = shared >= np.maximum(1, np.ceil(cfg.min_overlap_numbers * denom))
        plist = None
        for row, item, is_strong, is_weak in zip(pair_keys[0].tolist(), pair_keys[1].tolist(), strong, weak, strict=False):
            if kind[row] is not None or not (is_strong or is_weak):
                continue
            if not is_strong:
                plist = plist if plist is not None else problems.to_pylist()
                if not (self.numbers[item] and self.numbers[item] <= _numbers(plist[row])):
                    continue
            bench[row], bid[row], kind[row] = self.names[item], self.ids[item], "ngram"
        return bench, bid, kind


def _numbers(text: str | None) -> frozenset:
    """The numbers written in a statement (digit runs, thousands separators folded)."""
    return frozenset(re.findall(r"\d+", re.sub(r"(?<=\d),(?=\d{3})", "", text or "")))
