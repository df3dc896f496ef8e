"""Data cards built from recorded numbers only: the manifests of a run (or one stage output, or an export) and
the shards they list. Nothing in a card is typed by hand.

    card = build_card("runs/demo")            # every figure, as a dict (written as card.json)
    write_card("runs/demo")                   # README.md (Hugging Face YAML header + body), card.json, plots/*.png

The card holds: the sources and rows in/out per source; the filter waterfall in pipeline order (rows removed by
each stage and reason, two examples each); duplicates (exact, near, clusters, whose copy was kept);
contamination per benchmark with the matched (row, benchmark item) pairs; answer types and declared levels;
difficulty (pass-count histogram overall, per source and per declared level, never/always solved, grader
outcomes, truncation, model and sampling parameters, Spearman's rho of pass rate against the declared level);
for exports the target against the achieved bucket mix; and provenance (configs, code versions, dates,
fingerprints, shard hashes).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from curate.core.manifest import MANIFEST, Manifest, ManifestError, stage_outputs
from curate.core.shards import iter_batches, shard_paths

CARD_VERSION = 1
EXAMPLES_PER_REASON = 2
MAX_MATCHES = 200  # contamination pairs listed in card.json (all are counted)
# Licenses of the public sets each adapter reads, by source name (the adapter's default name): what the card shows,
# marked as such; anything else (or a source renamed with --name) is "unknown: check the source".
KNOWN_LICENSES = {"math": "mit", "math500": "mit", "deepscaler": "mit", "orz": "mit", "orz_eval": "mit",
                  "omni_math": "apache-2.0", "deepmath": "mit", "numina_1.5": "apache-2.0", "numina_cot": "apache-2.0",
                  "synthetic": "apache-2.0"}


def level_number(v: Any) -> float | None:
    """A declared difficulty as a number: ``Level 3`` -> 3, ``4.5`` -> 4.5; anything else None."""
    if v is None:
        return None
    m = re.search(r"-?\d+(?:\.\d+)?", str(v))
    return float(m.group(0)) if m else None


def spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman's rho with average ranks for ties; None below 3 pairs or for a constant variable."""
    if len(x) < 3:
        return None

    def ranks(v: list[float]) -> np.ndarray:
        a = np.asarray(v, dtype=float)
        order = a.argsort(kind="mergesort")
        r = np.empty(len(a))
        r[order] = np.arange(1, len(a) + 1)
        for val in np.unique(a):  # ties share their mean rank
            idx = a == val
            r[idx] = r[idx].mean()
        return r

    rx, ry = ranks(x), ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def _examples(folder: Path, reasons: list[str]) -> dict[str, list[dict]]:
    want = {r: EXAMPLES_PER_REASON for r in reasons}
    out: dict[str, list[dict]] = defaultdict(list)
    cols = ["id", "source", "problem", "answer", "reject_reason", "reject_detail"]
    for t in iter_batches(folder / "rejected", columns=cols):
        for row in t.to_pylist():
            r = row["reject_reason"]
            if want.get(r, 0) > 0:
                text = " ".join(str(row["problem"] or "").split())
                out[r].append({"id": row["id"], "source": row["source"],
                               "problem": text[:240] + (" ..." if len(text) > 240 else ""),
                               "answer": row["answer"], "detail": row["reject_detail"]})
                want[r] -= 1
        if not any(want.values()):
            break
    return dict(out)


def _waterfall(outs: list[tuple[Path, Manifest]]) -> list[dict]:
    steps = []
    for p, m in outs:
        if m.stage in ("estimate", "export"):
            continue
        examples = _examples(p, list(m.rejected_by_reason)) if m.rows_rejected else {}
        steps.append({"stage": m.stage, "folder": str(p), "rows_in": m.rows_in, "rows_out": m.rows_kept,
                      "removed": dict(m.rejected_by_reason), "examples": examples})
    return steps


def _merge_ingest(steps: list[dict]) -> list[dict]:
    """Several ingest outputs (one per source) become one waterfall step."""
    ing = [s for s in steps if s["stage"] == "ingest"]
    if len(ing) <= 1:
        return steps
    removed: Counter[str] = Counter()
    examples: dict[str, list] = {}
    for s in ing:
        removed.update(s["removed"])
        for r, ex in s["examples"].items():
            examples.setdefault(r, []).extend(ex)
    merged = {"stage": "ingest", "folder": str(Path(ing[0]["folder"]).parent), "rows_in": sum(s["rows_in"] for s in ing),
              "rows_out": sum(s["rows_out"] for s in ing), "removed": dict(removed),
              "examples": {r: ex[:EXAMPLES_PER_REASON] for r, ex in examples.items()}}
    return [merged] + [s for s in steps if s["stage"] != "ingest"]


def _duplicates(p: Path, m: Manifest) -> dict:
    sizes: Counter[str] = Counter()
    kept_ids: Counter[str] = Counter()
    for t in iter_batches(p / "rejected", columns=["dedup_cluster", "reject_reason"]):
        kept_ids.update(x for x, why in zip(t["dedup_cluster"].to_pylist(), t["reject_reason"].to_pylist(), strict=True)
                        if x and why != "gold_conflict")
    kept_source: Counter[str] = Counter()
    if kept_ids:
        for t in iter_batches(p / "kept", columns=["id", "source"]):
            for pid, src in zip(t["id"].to_pylist(), t["source"].to_pylist(), strict=True):
                if pid in kept_ids:
                    kept_source[src] += 1
        sizes = Counter(str(n + 1) for n in kept_ids.values())
    st = m.stats.get("dedup", {})
    return {"exact": st.get("exact_duplicates", m.rejected_by_reason.get("dedup_exact", 0)),
            "near": st.get("near_duplicates", m.rejected_by_reason.get("dedup_near", 0)),
            "clusters": len(kept_ids), "cluster_sizes": dict(sorted(sizes.items(), key=lambda kv: int(kv[0]))),
            "kept_copy_from_source": dict(kept_source.most_common()), "config": m.config,
            "gold_conflicts": {"rows": st.get("gold_conflict_rows", 0), "clusters": st.get("gold_conflict_clusters", 0),
                               "policy": m.config.get("conflicts", "drop"),
                               "list": [{"answers": c["answers"], "rows": [{k: r[k] for k in ("source", "source_id", "answer")}
                                                                           for r in c["rows"]]}
                                        for c in m.stats.get("gold_conflicts", [])[:100]]}}


def _contamination(p: Path, m: Manifest) -> dict:
    matches: list[dict] = []
    by_kind: Counter[str] = Counter()
    for t in iter_batches(p / "rejected", columns=["id", "source", "contam_benchmark", "contam_id", "reject_reason"]):
        for row in t.to_pylist():
            kind = row["reject_reason"].removeprefix("contaminated_")
            by_kind[kind] += 1
            if len(matches) < MAX_MATCHES:
                matches.append({"id": row["id"], "source": row["source"], "benchmark": row["contam_benchmark"],
                                "benchmark_item": row["contam_id"], "match": kind})
    return {"by_benchmark": m.stats.get("contaminated_by_benchmark", {}), "by_kind": dict(by_kind),
            "benchmark_items": m.stats.get("benchmark_items", {}), "matches": matches,
            "rule": {k: m.config.get(k) for k in ("ngram", "min_overlap", "min_overlap_numbers", "exact")}}


def _final_set(p: Path) -> dict:
    types: Counter[str] = Counter()
    levels: Counter[str] = Counter()
    subjects: Counter[str] = Counter()
    for t in iter_batches(p / "kept", columns=["answer_type", "level", "subject"]):
        types.update(str(x) for x in t["answer_type"].to_pylist())
        levels.update(str(x) for x in t["level"].to_pylist() if x is not None)
        subjects.update(str(x) for x in t["subject"].to_pylist() if x is not None)
    return {"answer_types": dict(types.most_common()), "declared_levels": dict(sorted(levels.items())),
            "subjects": dict(subjects.most_common(20))}


def _difficulty(p: Path, m: Manifest) -> dict:
    k_run = k_max = int(m.stats.get("k") or 0)  # the run's k: rows scored before k was recorded per row use it
    hist: Counter[int] = Counter()
    by_source: dict[str, Counter[int]] = defaultdict(Counter)
    by_level: dict[str, list[float]] = defaultdict(list)
    hist_by_level: dict[str, Counter[int]] = defaultdict(Counter)
    pairs: list[tuple[float, float]] = []
    incomplete = 0
    suspects: list[dict] = []
    n_suspect = 0
    files = shard_paths(p / "kept")
    for f in files:
        names = pq.ParquetFile(f).schema_arrow.names
        t = pq.read_table(f, columns=[c for c in ("source", "source_id", "level", "declared_difficulty", "n_correct",
                                                  "n_graded", "k", "answer", "suspect_gold", "consensus_answer",
                                                  "consensus_count") if c in names])
        for row in t.to_pylist():
            if row.get("suspect_gold"):
                n_suspect += 1
                if len(suspects) < 30:
                    suspects.append({c: row.get(c) for c in ("source", "source_id", "answer", "consensus_answer",
                                                             "consensus_count", "k")})
            # the declared difficulty: MATH's and the generator's level, else a numeric one (Omni-MATH's difficulty)
            level = row.get("level")
            if level is None and row.get("declared_difficulty") is not None:
                level = f"{row['declared_difficulty']:g}"
            row["level"] = level
            k = row["k"] or k_run
            k_max = max(k_max, k)  # adaptive rows hold up to k_max samples: the histogram runs to the largest k drawn
            nc = row["n_correct"] or 0
            hist[nc] += 1
            by_source[row["source"]][nc] += 1
            rate = nc / k if k else 0.0
            if row["level"] is not None:
                by_level[str(row["level"])].append(rate)
                hist_by_level[str(row["level"])][nc] += 1
                lv = level_number(row["level"])
                if lv is not None:
                    pairs.append((rate, lv))
            if row["n_graded"] is not None and row["n_graded"] < k:
                incomplete += 1
    cfg = m.config
    samp = cfg.get("sampling", {})
    full = lambda c: {str(i): c.get(i, 0) for i in range(k_max + 1)}  # noqa: E731 - every level, zeros included
    rho = spearman([a for a, _ in pairs], [b for _, b in pairs])
    return {
        "model": m.stats.get("model"), "model_revision": m.stats.get("model_revision"), "backend": cfg.get("backend"),
        "template": cfg.get("template"), "k": k_max, "temperature": samp.get("temperature"), "top_p": samp.get("top_p"),
        "max_tokens": samp.get("max_tokens"), "seed": samp.get("seed"), "grader_version": m.stats.get("grader_version"),
        "rows": m.rows_kept, "histogram": full(hist), "never_solved": hist.get(0, 0), "always_solved": hist.get(k_max, 0),
        "by_source": {s: full(c) for s, c in sorted(by_source.items())},
        "histogram_by_level": {lv: full(c) for lv, c in sorted(hist_by_level.items())},
        "by_level": {lv: {"rows": len(v), "mean_pass_rate": round(float(np.mean(v)), 4)} for lv, v in sorted(by_level.items())},
        "pass_rate_by_level": {lv: v for lv, v in sorted(by_level.items())},
        "spearman_rho_pass_rate_vs_level": None if rho is None else round(rho, 4), "rho_pairs": len(pairs),
        "sample_outcomes": m.stats.get("sample_outcomes", {}), "truncation_rate": m.stats.get("truncation_rate"),
        "mean_response_tokens": m.stats.get("mean_response_tokens"), "incompletely_graded_rows": incomplete,
        "limit": cfg.get("limit"), "suspect_gold": {"rows": n_suspect, "list": suspects,
                                                      "check": m.stats.get("suspect_gold_check")},
        "sequential": m.stats.get("sequential"),
    }


def _curriculum(p: Path, m: Manifest) -> dict:
    sel = m.stats.get("selection", {})
    return {"folder": str(p), "format": m.stats.get("format"), "target": sel.get("target"), "rows": m.rows_kept,
            "by_bucket": sel.get("by_bucket", {}), "achieved_distribution": sel.get("achieved_distribution", {}),
            "shortfall": sel.get("shortfall", {}), "unfilled": sel.get("unfilled", 0), "excluded": sel.get("excluded", {}),
            "stages": [{k: p.get(k) for k in ("folder", "stage", "bucket", "rows", "pass_rate_mean")}
                       for p in m.stats.get("parts", [])], "template": m.config.get("template")}


def upstream(folder: Path, m: Manifest) -> list[tuple[Path, Manifest]]:
    """The stage outputs ``folder`` was made from, followed through each manifest's input folders back to the
    ingests (an export's card tells the whole story: sources, waterfall, contamination, difficulty, selection).
    Inputs that are no longer where their manifest says are left out."""
    seen: dict[Path, Manifest] = {folder.resolve(): m}
    todo = [m]
    while todo:
        for e in todo.pop().inputs:
            p = Path(e["path"]) if e.get("path") else None
            if p is None:
                continue
            if p.name == "kept" and not (p / MANIFEST).is_file():
                p = p.parent
            if p.resolve() in seen or not (p / MANIFEST).is_file():
                continue
            try:
                seen[p.resolve()] = up = Manifest.load(p)
            except ManifestError:
                continue
            todo.append(up)
    outs = sorted(seen.items(), key=lambda pm: (pm[1].kind.order, str(pm[0])))
    return outs


def default_name(sources: dict) -> str:
    """A card's name when the config gives none: its sources."""
    return "gradus: " + (", ".join(sources) if sources else "no sources")


def build_card(folder: str | Path, only: list[str | Path] | None = None, name: str | None = None) -> dict:
    """Every figure of the card of ``folder`` (a run folder, a stage output or an export), from recorded data. A single
    stage output is described with the stages upstream of it (``upstream``). ``only``: the stage folders to describe
    (a flow's run names the ones it ran: a source it no longer reads, or an export this run could not make, leaves an
    older output in the folder that is not this run's). ``name``: the card's title (default: its sources)."""
    d = Path(folder)
    outs = stage_outputs(d)
    if len(outs) == 1 and outs[0][0].resolve() == d.resolve():
        outs = upstream(d, outs[0][1])
    if only is not None:
        keep = {Path(x).resolve() for x in only}
        outs = [(p, m) for p, m in outs if p.resolve() in keep]
        if not outs:
            raise ManifestError(f"{d}: none of the stage outputs to describe is there")
    card: dict[str, Any] = {"card_version": CARD_VERSION, "folder": str(d), "name": name,
                            "built": datetime.now(UTC).isoformat(timespec="seconds")}
    card["stages"] = [{"stage": m.stage, "folder": str(p), "rows_in": m.rows_in, "rows_kept": m.rows_kept,
                       "rows_rejected": m.rows_rejected, "rejected_by_reason": m.rejected_by_reason} for p, m in outs]
    ingests = [(p, m) for p, m in outs if m.stage == "ingest"]
    curation = [(p, m) for p, m in outs if m.stage in ("ingest", "filter", "decontam", "dedup")]
    last_clean = curation[-1] if curation else None
    sources: dict[str, dict] = {}
    for _, m in ingests:
        for src, c in m.by_source.items():
            v = sources.setdefault(src, {"in": 0, "after_ingest": 0, "final": 0, "origin": []})
            v["origin"] += [e.get("source") for e in m.inputs]
            v.setdefault("revisions", []).extend({"source": e.get("source"), "commit": e["revision"]}
                                                 for e in m.inputs if e.get("revision"))  # hub sources: the commit read
            sources[src]["in"] += c.get("in", 0)
            sources[src]["after_ingest"] += c.get("kept", 0)
    finals = ingests if last_clean is not None and last_clean[1].stage == "ingest" else [last_clean] if last_clean else []
    for _, m in finals:  # a run of ingests alone: each source's final count is its own ingest's
        for src, c in m.by_source.items():
            sources.setdefault(src, {"in": 0, "after_ingest": 0, "final": 0, "origin": []})["final"] += c.get("kept", 0)
    for src, v in sources.items():
        v["license"] = KNOWN_LICENSES.get(src, "unknown: check the source")
    card["sources"] = sources
    card["waterfall"] = _merge_ingest(_waterfall(curation))
    card["conservation"] = [{"stage": s["stage"], "rows_in": s["rows_in"], "rows_out": s["rows_out"],
                             "removed": sum(s["removed"].values()),
                             "holds": s["rows_in"] == s["rows_out"] + sum(s["removed"].values())} for s in card["waterfall"]]
    for p, m in outs:
        if m.stage == "dedup":
            card["duplicates"] = _duplicates(p, m)
        elif m.stage == "decontam":
            card["contamination"] = _contamination(p, m)
        elif m.stage == "estimate":
            card["difficulty"] = _difficulty(p, m)
        elif m.stage == "export":
            card["curriculum"] = _curriculum(p, m)
    if last_clean is not None and last_clean[1].stage != "ingest":
        card["final_set"] = {"folder": str(last_clean[0]), "rows": last_clean[1].rows_kept, **_final_set(last_clean[0])}
    card["name"] = name or default_name(sources)
    card["provenance"] = [{"stage": m.stage, "folder": str(p), "created": m.created, "code_version": m.code_version,
                           "config": m.config, "config_hash": m.config_hash, "input_hash": m.input_hash,
                           "inputs": m.inputs, "seconds": m.seconds,
                           "kept_shards": [{"path": s.get("file", s["path"]), "rows": s.get("rows"), "sha256": s.get("sha256")}
                                           for s in m.kept_shards]} for p, m in outs]
    return card


def size_category(n: int) -> str:
    """Hugging Face's size_categories bucket for ``n`` rows."""
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                        (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M")):
        if n < limit:
            return name
    return "n>100M"
