"""Where every input row ended in two curation runs, and which rows changed fate.

    python dev/clean_set_diff.py runs/before runs/after [--examples 3]

Rows are matched by (origin file's last two path parts, source id); a source id ``file.json:17`` (row-number ids qualified by the
file name) matches the bare ``17`` of an older run. Each row's fate is ``kept`` or ``<stage>:<reason>``;
the table counts the rows per (before, after) pair whose fate changed, biggest first, with examples.
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path

STAGES = ("1_ingest", "2_filter", "3_decontam", "4_dedup")


def _file(origin: str) -> str:
    """The origin's last two path parts: the same file read from two checkouts or two config folders."""
    return "/".join(Path(origin).parts[-2:])


def fates(run: Path) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], str]]:
    """(origin, source id) -> fate, and -> the problem's first 100 characters."""
    from curate.core.shards import iter_batches

    out: dict[tuple[str, str], str] = {}
    text: dict[tuple[str, str], str] = {}
    cols = ["origin", "source_id", "problem"]
    for stage in STAGES:
        for rej in sorted(run.glob(f"{stage}/**/rejected")):
            for t in iter_batches(rej, columns=[*cols, "reject_reason"]):
                for o, s, p, why in zip(*(t[c].to_pylist() for c in [*cols, "reject_reason"]), strict=True):
                    key = (_file(o), s.split(":")[-1])
                    out[key] = f"{stage[2:]}:{why}"
                    text[key] = (p or "")[:100]
    for t in iter_batches(run / "4_dedup" / "kept", columns=cols):
        for o, s, p in zip(*(t[c].to_pylist() for c in cols), strict=True):
            out[(_file(o), s.split(":")[-1])] = "kept"
            text[(_file(o), s.split(":")[-1])] = (p or "")[:100]
    return out, text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--examples", type=int, default=2)
    args = ap.parse_args()
    b, _ = fates(args.before)
    a, text = fates(args.after)
    missing = set(b) ^ set(a)
    moves: Counter[tuple[str, str]] = Counter()
    ex: dict[tuple[str, str], list[str]] = defaultdict(list)
    for key in set(a) & set(b):
        if a[key] != b[key]:
            moves[(b[key], a[key])] += 1
            ex[(b[key], a[key])].append(f"{key[0]}:{key[1]} {text[key]!r}")
    kept_b, kept_a = sum(v == "kept" for v in b.values()), sum(v == "kept" for v in a.values())
    print(f"rows: {len(b):,} before, {len(a):,} after ({len(missing)} unmatched); clean set {kept_b:,} -> {kept_a:,}")
    print(f"rows whose fate changed: {sum(moves.values()):,}\n")
    print("| before | after | rows | examples |\n|---|---|---:|---|")
    for (x, y), n in moves.most_common():
        print(f"| {x} | {y} | {n} | {'; '.join(ex[(x, y)][: args.examples])} |")


if __name__ == "__main__":
    main()
