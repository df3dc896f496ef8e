"""A card in a terminal (``gradus card show``) and what changed between two cards (``gradus card diff``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from curate.core.manifest import ManifestError
from data_cards.card import build_card
from data_cards.render import CARD_JSON, ROWS, load_card, rows_of


# ------------------------------------------------------------------------------------------ terminal
def show_text(card: dict) -> str:
    """The card for a terminal: the waterfall, sources, contamination, difficulty histogram as bars."""
    lines = [f"{card['name']}  ({card['folder']})"]
    for s in card.get("waterfall", []):
        removed = ", ".join(f"{r} {n:,}" for r, n in sorted(s["removed"].items(), key=lambda kv: -kv[1])) or "nothing"
        lines.append(f"  {s['stage']:<9} {s['rows_in']:>9,} -> {s['rows_out']:>9,}   removed: {removed}")
    for src, v in card.get("sources", {}).items():
        lines.append(f"  source {src}: {v['in']:,} in, {v['final']:,} in the clean set ({v['license']})")
    if card.get("duplicates"):
        d = card["duplicates"]
        lines.append(f"  duplicates: {d['exact']:,} exact, {d['near']:,} near, {d['clusters']:,} clusters")
        if (d.get("gold_conflicts") or {}).get("clusters"):
            g = d["gold_conflicts"]
            lines.append(f"  gold conflicts: {g['clusters']:,} problems with two golds ({g['rows']:,} rows, {g['policy']})")
    if card.get("contamination"):
        lines.append(f"  contamination: {card['contamination']['by_benchmark'] or 'none found'}")
    if card.get("difficulty"):
        d = card["difficulty"]
        lines.append(f"  difficulty: {d['rows']} problems, k={d['k']}, {d['model']}, T={d['temperature']}; "
                     f"rho vs level {d['spearman_rho_pass_rate_vs_level']}")
        top = max(d["histogram"].values()) or 1
        for k, n in d["histogram"].items():
            lines.append(f"    {k:>3} correct | {'#' * round(30 * n / top):<30} {n}")
    if card.get("curriculum"):
        c = card["curriculum"]
        lines.append(f"  export: {c['rows']} rows ({c['target']}); "
                     + ", ".join(f"{b} {v['taken']}/{v['asked']}" for b, v in c["by_bucket"].items()))
    return "\n".join(lines)


def _card_folder(p: Path) -> Path:
    """A flow's run folder (``OUT/runs/<t>``, ``OUT/latest``) is described by its ``card/``."""
    p = Path(p)
    return p / "card" if (p / "card" / CARD_JSON).is_file() and not (p / "manifest.json").exists() else p


def card_rows(folder: str | Path) -> dict[str, tuple[bool, int | None, int | None]]:
    """id -> (in the card's result, n_correct, k) for the rows a card describes: its ``card_rows.parquet`` (a card
    written away from its data), else ``rows_of`` the card built from the folder's stage outputs (a folder with
    neither raises ``ManifestError``: a saved ``card.json``'s paths are not this machine's to read)."""
    import pyarrow.parquet as pq

    folder = _card_folder(Path(folder))
    if (folder / ROWS).is_file():
        return {r["id"]: (r["final"], r["n_correct"], r["k"]) for r in pq.read_table(folder / ROWS).to_pylist()}
    return rows_of(build_card(folder))


def diff_cards(old: str | Path, new: str | Path) -> dict:
    """What changed from the run ``old`` to ``new``, in pipeline order: rows per source, rows and reasons per stage,
    contamination, the rows added and removed by id, how many rows each side scored, and the difficulty compared
    only over the problems scored on both sides (a changed sample is not a change of difficulty). Figures that did
    not change are left out. ``old``/``new``: run folders, stage outputs, exports, or a flow's run folders."""
    old, new = _card_folder(Path(old)), _card_folder(Path(new))
    a, b = load_card(old), load_card(new)
    out: dict[str, Any] = {"old": str(old), "new": str(new)}

    def changed(x: dict, y: dict) -> dict:
        keys = list(dict.fromkeys([*x, *y]))  # the order the cards list them in: pipeline order, then new keys
        return {k: [x.get(k, 0), y.get(k, 0)] for k in keys if x.get(k, 0) != y.get(k, 0)}

    sa, sb = a.get("sources", {}), b.get("sources", {})
    src = {s: changed({k: v for k, v in sa.get(s, {}).items() if isinstance(v, int)},
                      {k: v for k, v in sb.get(s, {}).items() if isinstance(v, int)}) for s in dict.fromkeys([*sa, *sb])}
    out["sources"] = {s: v for s, v in src.items() if v}
    wa = {s["stage"]: s for s in a.get("waterfall", [])}
    wb = {s["stage"]: s for s in b.get("waterfall", [])}
    stages = {}
    for st in dict.fromkeys([*wa, *wb]):
        x, y = wa.get(st, {}), wb.get(st, {})
        d = changed({"rows_in": x.get("rows_in", 0), "rows_out": x.get("rows_out", 0), **x.get("removed", {})},
                    {"rows_in": y.get("rows_in", 0), "rows_out": y.get("rows_out", 0), **y.get("removed", {})})
        if d:
            stages[st] = d
    out["stages"] = stages
    out["contamination"] = changed(a.get("contamination", {}).get("by_benchmark", {}),
                                   b.get("contamination", {}).get("by_benchmark", {}))
    da, db = a.get("difficulty", {}), b.get("difficulty", {})
    out["difficulty"] = {k: [da.get(k), db.get(k)] for k in ("model", "model_revision", "template", "k", "temperature",
                                                              "max_tokens") if da.get(k) != db.get(k)}
    ca, cb = a.get("curriculum", {}), b.get("curriculum", {})
    out["export"] = {k: [ca.get(k), cb.get(k)] for k in ("format", "template", "target", "rows") if ca.get(k) != cb.get(k)}
    out["export_buckets"] = changed({k: v["taken"] for k, v in ca.get("by_bucket", {}).items()},
                                    {k: v["taken"] for k, v in cb.get("by_bucket", {}).items()})
    try:
        ra, rb = card_rows(old), card_rows(new)
        have_rows = True
    except (ManifestError, FileNotFoundError):
        ra, rb, have_rows = {}, {}, False
    if have_rows:
        fa, fb = {i for i, r in ra.items() if r[0]}, {i for i, r in rb.items() if r[0]}
        out["rows_added"], out["rows_removed"] = sorted(fb - fa), sorted(fa - fb)
        ka, kb = {i: r for i, r in ra.items() if r[1] is not None}, {i: r for i, r in rb.items() if r[1] is not None}
        both = sorted(set(ka) & set(kb))
        out["scored"] = {"old": len(ka), "new": len(kb), "both": len(both), "added": len(set(kb) - set(ka)),
                         "removed": len(set(ka) - set(kb))}
        from collections import Counter

        ha = Counter(str(ka[i][1]) for i in both)
        hb = Counter(str(kb[i][1]) for i in both)
        order = sorted(set(ha) | set(hb), key=int)
        out["difficulty_histogram"] = changed({k: ha.get(k, 0) for k in order}, {k: hb.get(k, 0) for k in order})
        out["pass_count_changed"] = sum(1 for i in both if ka[i][1:] != kb[i][1:])
    return {k: v for k, v in out.items() if v not in ({}, None) or k in ("old", "new", "rows_added", "rows_removed")}


def diff_text(d: dict, show_ids: int = 5) -> str:
    lines = [f"{d['old']} -> {d['new']}"]
    for s, v in d.get("sources", {}).items():
        lines.append(f"  source {s}: " + ", ".join(f"{k} {x:,} -> {y:,}" for k, (x, y) in v.items()))
    for st, v in d.get("stages", {}).items():
        lines.append(f"  {st}: " + ", ".join(f"{k} {x:,} -> {y:,}" for k, (x, y) in v.items()))
    if d.get("contamination"):
        lines.append("  contamination: " + ", ".join(f"{k} {x} -> {y}" for k, (x, y) in d["contamination"].items()))
    for key in ("difficulty", "export"):
        if d.get(key):
            lines.append(f"  {key}: " + ", ".join(f"{k} {x} -> {y}" for k, (x, y) in d[key].items()))
    if d.get("export_buckets"):
        lines.append("  export rows by bucket: " + ", ".join(f"{k} {x} -> {y}" for k, (x, y) in d["export_buckets"].items()))
    for what in ("added", "removed"):
        ids = d.get(f"rows_{what}")
        if ids:
            lines.append(f"  rows {what} {len(ids):,}: " + ", ".join(ids[:show_ids]) + (", ..." if len(ids) > show_ids else ""))
    sc = d.get("scored")
    if sc and (sc["added"] or sc["removed"] or d.get("difficulty_histogram")):
        lines.append(f"  scored {sc['old']:,} -> {sc['new']:,} rows ({sc['both']:,} in both, {sc['added']:,} newly scored, "
                     f"{sc['removed']:,} no longer)")
    if d.get("difficulty_histogram"):
        lines.append(f"  pass counts over the {d['scored']['both']:,} problems scored in both ({d['pass_count_changed']:,} "
                     "changed): " + ", ".join(f"{k} correct {x} -> {y}" for k, (x, y) in d["difficulty_histogram"].items()))
    if len(lines) == 1:
        lines.append("  no change")
    return "\n".join(lines)


__all__ = ["card_rows", "diff_cards", "diff_text", "show_text"]
