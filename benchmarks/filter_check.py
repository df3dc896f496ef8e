"""Precision and recall of the heuristic filters on a labelled check set of real rows.

``tests/data/filter_check_set.jsonl`` names 688 rows of the files in ``../shared/data`` (by file and
``source_id``; the text stays in the data folder) with a label given by reading each row: ``clean`` (one
question, one closed-form answer) or the kind of unverifiable item it is (``mcq``, ``proof``, ``yesno``,
``multipart``, ``figure``, ``other``). The rows were drawn from every source, half of them among rows the
filters rejected and half among rows they kept, with the kept half enriched for traps ((i)/(1) markers,
"determine whether", "as shown", "show that", single-letter answers). Rows of split ``dev`` were read
while the rules were revised; ``held_out`` rows were measured first and read after; ``fresh`` rows (225, drawn
the same way from rows outside the first two splits after the revision) were measured once, then three
general bugs they showed were fixed (options on bare lines "A Tuesday", drawing code read as options, "$.
Find" not seen as an ask). The README gives the figures of each round.

    python benchmarks/filter_check.py            # both splits, one table each
    python benchmarks/filter_check.py --errors   # and every row the filters get wrong

By default the ``figure`` step only flags (``sig_figure``); ``--reject-figures`` measures it as a reject.
Precision of a reason: of the rows it rejects, the share whose label is not ``clean``. Recall of a label:
of the rows with that label, the share rejected by any filter. ``clean rejected`` is the share of clean
rows that some filter rejects (the loss of good, often hard, problems).
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
CHECK_SET = ROOT / "tests" / "data" / "filter_check_set.jsonl"
LABELS = ("mcq", "proof", "yesno", "multipart", "figure", "other")
FILTER_REASONS = ("mcq", "proof", "yesno", "multipart", "figure")


def data_root() -> Path:
    return Path(os.environ.get("GRADUS_REAL_DATA", ROOT.parent / "shared" / "data"))


def load_rows(root: Path | None = None) -> list[dict]:
    """The labelled rows, each with its record (as ``gradus ingest`` makes it) under ``record``."""
    from curate.sources.adapters import apply_adapter, detect_adapter, row_id_prefix
    from curate.sources.ingest import to_records
    from curate.sources.readers import read_source

    root = root or data_root()
    labels = [json.loads(line) for line in CHECK_SET.read_text().splitlines() if line.strip()]
    wanted: dict[str, set[str]] = defaultdict(set)
    for r in labels:
        wanted[r["file"]].add(r["source_id"])
    found: dict[tuple[str, str], dict] = {}
    for rel, ids in wanted.items():
        spec = str(root / rel)
        for raw in read_source(spec):
            cols = apply_adapter(detect_adapter(raw), raw, row_id_prefix(spec))
            table, _, _, _ = to_records(cols, raw.num_rows, "check", spec)
            for rec in table.to_pylist():
                if rec["source_id"] in ids:
                    found[(rel, rec["source_id"])] = rec
    missing = [(r["file"], r["source_id"]) for r in labels if (r["file"], r["source_id"]) not in found]
    if missing:
        raise SystemExit(f"{len(missing)} labelled rows not found in {root}, e.g. {missing[:3]}")
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


def _fmt(pair: tuple[int, int]) -> str:
    a, b = pair
    return f"{a}/{b} ({a / b:.1%})" if b else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--errors", action="store_true", help="print every row the filters get wrong")
    ap.add_argument("--reject-figures", action="store_true", help="make the figure step reject (flag_only=())")
    args = ap.parse_args()
    rows = load_rows()
    reasons = decide(rows, () if args.reject_figures else None)
    for split in ("dev", "held_out", "fresh", "all"):
        idx = [i for i, r in enumerate(rows) if split == "all" or r["split"] == split]
        s = scores([rows[i] for i in idx], [reasons[i] for i in idx])
        print(f"\n## {split}: {s['rows']} rows, labels {s['labels']}")
        print("| filter | precision (rejected rows not clean) | recall (labelled rows rejected) |")
        print("|---|---:|---:|")
        for name in LABELS:
            prec = _fmt(s[f"precision_{name}"]) if name in FILTER_REASONS else "-"
            print(f"| {name} | {prec} | {_fmt(s[f'recall_{name}'])} |")
        print(f"| clean rejected | | {_fmt(s['clean_rejected'])} |")
    if args.errors:
        print("\n## errors")
        for r, why in zip(rows, reasons, strict=True):
            if (r["label"] == "clean") != (why is None):
                rec = r["record"]
                print(f"\n--- [{r['split']}] {r['file']} {r['source_id']}: label {r['label']}, filter {why}"
                      f" ({r['note']})\nPROBLEM: {rec['problem'][:700]}\nANSWER: {rec['answer']}")


if __name__ == "__main__":
    main()
