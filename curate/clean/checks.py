"""The clean stages measured against ground truth, on real rows: the heuristic filters against a labelled check set,
decontamination against rewritten copies of a benchmark, and dedup's recall against every near pair found exhaustively.

``benchmarks/filter_check.py``, ``benchmarks/decontam_rewrites.py`` and ``benchmarks/dedup_recall.py`` print these as
tables (their docstrings say how each is measured); the tests hold the figures.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa

# ---- filters: precision and recall on a labelled check set ---------------------------------------
LABELS = ("mcq", "proof", "yesno", "multipart", "figure", "other")
FILTER_REASONS = ("mcq", "proof", "yesno", "multipart", "figure")


def labelled_rows(check_set: Path, root: Path) -> list[dict]:
    """The labelled rows of ``check_set`` (JSON lines naming a file under ``root`` and a ``source_id``, with a
    ``label``), each with its record (as ``gradus ingest`` makes it) under ``record``."""
    from curate.sources.adapters import apply_adapter, detect_adapter, row_id_prefix
    from curate.sources.ingest import to_records
    from curate.sources.readers import read_all

    labels = [json.loads(line) for line in check_set.read_text().splitlines() if line.strip()]
    wanted: dict[str, set[str]] = defaultdict(set)
    for r in labels:
        wanted[r["file"]].add(r["source_id"])
    found: dict[tuple[str, str], dict] = {}
    for rel, ids in wanted.items():
        spec = str(root / rel)
        for raw in read_all(spec):
            cols = apply_adapter(detect_adapter(raw), raw, row_id_prefix(spec))
            table, _, _, _ = to_records(cols, raw.num_rows, "check", spec)
            for rec in table.to_pylist():
                if rec["source_id"] in ids:
                    found[(rel, rec["source_id"])] = rec
    missing = [(r["file"], r["source_id"]) for r in labels if (r["file"], r["source_id"]) not in found]
    if missing:
        raise FileNotFoundError(f"{len(missing)} labelled rows not found in {root}, e.g. {missing[:3]}")
    return [{**r, "record": found[(r["file"], r["source_id"])]} for r in labels]


def decide(rows: list[dict], flag_only: tuple[str, ...] | None = None) -> list[str | None]:
    """The filters' reject reason of each row (heuristic steps only; the gold gate is not a text filter), under the
    default config or with ``flag_only`` replaced."""
    from curate.clean.filters import FilterConfig, apply_filters
    from curate.core.schema import SCHEMA

    cfg = FilterConfig(gold_gate=False) if flag_only is None else FilterConfig(gold_gate=False, flag_only=flag_only)
    table = pa.Table.from_pylist([r["record"] for r in rows], schema=SCHEMA)
    _, reason = apply_filters(table, cfg)
    return reason.to_pylist()


def scores(rows: list[dict], reasons: list[str | None]) -> dict:
    """Per reason precision, per label recall, and the clean-rejected rate, with the counts behind them."""
    out: dict = {"rows": len(rows), "labels": dict(Counter(r["label"] for r in rows))}
    for reason in FILTER_REASONS:
        fired = [r for r, why in zip(rows, reasons, strict=True) if why == reason]
        right = sum(r["label"] != "clean" for r in fired)
        out[f"precision_{reason}"] = (right, len(fired))
    for label in LABELS:
        have = [why for r, why in zip(rows, reasons, strict=True) if r["label"] == label]
        out[f"recall_{label}"] = (sum(w is not None for w in have), len(have))
    clean = [why for r, why in zip(rows, reasons, strict=True) if r["label"] == "clean"]
    out["clean_rejected"] = (sum(w is not None for w in clean), len(clean))
    return out


# ---- decontam: rewritten copies of a benchmark ---------------------------------------------------
_VERBS = [("What is", "Find"), ("Find", "Determine"), ("Compute", "Calculate"), ("Evaluate", "Compute"),
          ("Calculate", "Compute"), ("Determine", "Find"), ("Simplify", "Compute")]


def frac_short(p: str) -> str:
    return re.sub(r"\\([dt]?frac)\{(\w)\}\{(\w)\}", r"\\\1\2\3", p)


def paren_math(p: str) -> str:
    return re.sub(r"(?<![\\$])\$([^$]+)\$(?!\$)", lambda m: "\\(" + m.group(1) + "\\)", p)


def first_verb(p: str) -> str:
    hits = [(m.start(), a, b) for a, b in _VERBS for m in [re.search(rf"\b{a}\b", p)] if m]
    if not hits:
        return p
    pos, a, b = min(hits)
    return p[:pos] + b + p[pos + len(a):]


REWRITES = {"frac_short": frac_short, "paren_math": paren_math, "first_verb": first_verb}


def rewrites_caught(math500: Path, misses: bool = False) -> dict[str, tuple[int, int]]:
    """Per rewrite: (copies decontam flags, copies the rewrite changed) of MATH-500 (``math500``: its test.jsonl)
    decontaminated against itself; ``misses``: print each copy missed."""
    import pyarrow as pa

    from curate.clean.decontam import BenchmarkIndex, DecontamConfig
    from curate.clean.text import repair_escapes

    problems = [json.loads(line)["problem"] for line in math500.read_text().splitlines() if line.strip()]
    cfg = DecontamConfig(benchmarks=(f"math500={math500}",))
    index = BenchmarkIndex.build(cfg.benchmarks, cfg.ngram)
    out = {}
    for name, fn in REWRITES.items():
        changed = [q for q in (fn(p) for p in problems) if q not in problems]
        col, _ = repair_escapes(pa.array(changed, pa.string()))  # as ingest reads a row
        _, _, kind = index.match(col, cfg)
        out[name] = (sum(k is not None for k in kind), len(changed))
        if misses:
            for q, k in zip(changed, kind, strict=True):
                if k is None:
                    print(f"[{name}] missed: {q[:200]!r}")
    return out


# ---- dedup: recall of near duplicates ------------------------------------------------------------
def true_pairs(shingles: list[np.ndarray], t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair (a < b) of rows whose distinct shingle sets (sorted uint64 arrays) have Jaccard >= t, with it."""
    n = len(shingles)
    sizes = np.array([len(s) for s in shingles], np.int64)
    flat = np.concatenate(shingles) if n else np.zeros(0, np.uint64)
    row = np.repeat(np.arange(n), sizes)
    vocab, dense, freq = np.unique(flat, return_inverse=True, return_counts=True)
    # each row's shingles rarest first; its prefix: the first |x| - ceil(t |x|) + 1
    order = np.lexsort((dense, freq[dense], row))
    pos = np.arange(len(flat)) - np.repeat(np.r_[0, np.cumsum(sizes)[:-1]], sizes)
    prefix = sizes - np.ceil(t * sizes - 1e-9).astype(np.int64) + 1
    keep = pos < prefix[row[order]]
    tok, who = dense[order][keep], row[order][keep]
    o = np.lexsort((who, tok))
    tok, who = tok[o], who[o]
    starts = np.flatnonzero(np.r_[True, tok[1:] != tok[:-1]])
    ends = np.r_[starts[1:], len(tok)]
    cand = []
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        if e - s > 1:
            i, j = np.triu_indices(e - s, 1)
            cand.append(who[s:e][i] * n + who[s:e][j])
    keys = np.unique(np.concatenate(cand)) if cand else np.zeros(0, np.int64)
    a, b = keys // n, keys % n
    ok = (np.minimum(sizes[a], sizes[b]) >= t * np.maximum(sizes[a], sizes[b]))  # sizes alone can rule J >= t out
    a, b = a[ok], b[ok]
    # exact intersections, a chunk of pairs at a time: (pair, shingle) keys that occur twice
    offs = np.r_[0, np.cumsum(sizes)]
    dense_rows = dense  # shingles of row r: dense_rows[offs[r]:offs[r + 1]] (flat is in row order)
    v = np.int64(len(vocab))
    inter = np.zeros(len(a), np.int64)
    for c in range(0, len(a), 20_000):
        ca, cb = a[c : c + 20_000], b[c : c + 20_000]
        parts = []
        for side in (ca, cb):
            ln = sizes[side]
            idx = np.repeat(offs[side], ln) + (np.arange(ln.sum()) - np.repeat(np.r_[0, np.cumsum(ln)[:-1]], ln))
            parts.append(np.repeat(np.arange(len(side), dtype=np.int64), ln) * v + dense_rows[idx])
        k = np.sort(np.concatenate(parts))
        dup = k[1:] == k[:-1]
        inter[c : c + 20_000] = np.bincount((k[1:][dup] // v).astype(np.int64), minlength=len(ca))
    jac = inter / (sizes[a] + sizes[b] - inter)
    good = jac >= t
    return a[good], b[good], jac[good]


def near_pair_recall(inputs: list[Path], output_dir: Path, t: float = 0.5) -> dict[str, np.ndarray]:
    """Per true pair (different content ids, Jaccard >= ``t``) of dedup's input rows (``inputs``: its input
    folders): ``jac``, ``candidate`` (agrees on an LSH band), ``merged`` (one cluster in dedup's output),
    ``other_numbers``, ``other_drawing``."""
    import pyarrow as pa

    from curate.clean.dedup import DedupConfig, minhash, number_strings
    from curate.clean.text import asy_keys, canonical, ngram_hashes, tokens
    from curate.core.shards import read_table

    cfg = DedupConfig()
    cols = ["id", "origin", "source_id", "problem", "answer"]
    rows = pa.concat_tables([read_table(d / "kept", columns=cols) for d in inputs], promote_options="permissive")
    problems = rows["problem"].combine_chunks()
    canon = canonical(problems)
    toks = tokens(problems, canon)
    h, r = ngram_hashes(problems, cfg.ngram, short_docs=True, toks=toks)
    hr = np.unique(np.stack([r.astype(np.uint64), h]), axis=1)  # distinct shingles per row, sorted
    bounds = np.searchsorted(hr[0], np.arange(len(problems) + 1, dtype=np.uint64))
    shingles = [hr[1][bounds[i] : bounds[i + 1]] for i in range(len(problems))]
    ua, ub, jac = true_pairs(shingles, t)
    ids = np.array(rows["id"].to_pylist(), object)
    other = ids[ua] != ids[ub]  # one content id: exact duplicates
    ua, ub, jac = ua[other], ub[other], jac[other]

    sig = minhash(problems, cfg, toks).reshape(len(problems), cfg.bands, cfg.rows)
    cluster: dict[tuple, object] = {}
    for sub in ("kept", "rejected"):
        if (output_dir / sub).is_dir():
            out = read_table(output_dir / sub, columns=["origin", "source_id", "dedup_cluster"])
            cluster.update(zip(zip(out["origin"].to_pylist(), out["source_id"].to_pylist(), strict=True),
                               out["dedup_cluster"].to_pylist(), strict=True))
    keys = list(zip(rows["origin"].to_pylist(), rows["source_id"].to_pylist(), strict=True))
    nums = np.array(number_strings(problems, canon).to_pylist(), object)
    draw = np.array(asy_keys(problems).to_pylist(), object)
    other_numbers = nums[ua] != nums[ub]
    other_drawing = (draw[ua] != draw[ub]) & ~other_numbers
    gold = np.array([re.sub(r"\s+", "", g or "") for g in rows["answer"].to_pylist()], object)
    return {"rows": np.array(len(problems)), "jac": jac,
            "candidate": (sig[ua] == sig[ub]).all(axis=2).any(axis=1),
            "merged": np.array([cluster.get(keys[x]) == cluster.get(keys[y])
                                for x, y in zip(ua.tolist(), ub.tolist(), strict=True)], bool),
            "other_numbers": other_numbers, "other_drawing": other_drawing,
            "other_gold": (gold[ua] != gold[ub]) & ~other_numbers & ~other_drawing}
