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
import os
from pathlib import Path

from curate.clean.checks import FILTER_REASONS, LABELS, decide, labelled_rows, scores
from curate.core.errors import SourceError

ROOT = Path(__file__).resolve().parents[1]
CHECK_SET = ROOT / "tests" / "data" / "filter_check_set.jsonl"


def data_root() -> Path:
    return Path(os.environ.get("GRADUS_REAL_DATA", ROOT.parent / "shared" / "data"))


def _fmt(pair: tuple[int, int]) -> str:
    a, b = pair
    return f"{a}/{b} ({a / b:.1%})" if b else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--errors", action="store_true", help="print every row the filters get wrong")
    ap.add_argument("--reject-figures", action="store_true", help="make the figure step reject (flag_only=())")
    args = ap.parse_args()
    try:
        rows = labelled_rows(CHECK_SET, data_root())
    except (FileNotFoundError, SourceError) as e:  # a data file or a labelled row missing: one line, not a traceback
        raise SystemExit(str(e)) from None
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
