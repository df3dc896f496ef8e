"""How often an unboxed response is graded correct when it should not be: the anchored rule vs the old tail rule.

Two probes on real MATH test solutions (``../shared/data/math_hendrycks``), the same as the audit's:

(a) *other problems' solutions, boxes removed*, graded against this problem's gold: every "correct" is a
    false positive (math-verify found some number in foreign text that happens to equal the gold);
(b) *solutions cut just before the sentence holding their first box*, graded against their own gold: the text
    stops before the answer is stated, so every "correct" is credit for an answer never given.

The old rule passed the last 4,000 characters to math-verify's default extraction (any last expression);
the anchored rule (``curate.difficulty.grading``) lets math-verify extract only after an anchor such as "final answer
is" or "Answer:" (Open-R1's ``try_extract_without_anchor=False``).

    python dev/grading_rule.py --n 1500
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
from pathlib import Path

from curate.difficulty.grading import GradingPool
from curate.sources.answers import boxed_all, last_boxed

DATA = Path(os.environ.get("GRADUS_REAL_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")


def strip_boxes(text: str) -> str:
    """The solution with every box removed, content and all."""
    for b in boxed_all(text):
        text = text.replace(f"\\boxed{{{b}}}", "").replace(f"\\fbox{{{b}}}", "")
    return text


def cut_before_answer(text: str) -> str | None:
    """The solution up to the start of the sentence that holds its first box (None when there is no box)."""
    m = _BOX.search(text)
    if not m:
        return None
    start = m.start()
    cut = max(text.rfind(". ", 0, start), text.rfind("\n", 0, start))
    return text[: cut + 1] if cut > 0 else None


def probes(n: int, seed: int = 0) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    rows = [json.loads(x) for x in (DATA / "math_hendrycks" / "test" / "test.jsonl").open()]
    rows = [(r["solution"], last_boxed(r["solution"])) for r in rows]
    rows = [(s, g) for s, g in rows if g]
    rng = random.Random(seed)
    rng.shuffle(rows)
    rows = rows[:n]
    foreign = [(rows[i][1], strip_boxes(rows[(i + 1) % len(rows)][0])) for i in range(len(rows))]
    foreign = [(g, s) for g, s in foreign if s.strip()]
    cut = [(g, c) for s, g in rows if (c := cut_before_answer(s))]
    return foreign, cut


def old_rule(pool: GradingPool, pairs: list[tuple[str, str]]) -> list[str]:
    """The tail rule this project used before: math-verify's default extraction on the last 4,000 characters."""
    items = [(g, r[-4000:], "tail_any") for g, r in pairs]
    return [res.reason for res in pool._run("verify", items)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--old", action="store_true", help="also grade with the old any-last-expression tail rule")
    a = ap.parse_args()
    foreign, cut = probes(a.n)
    out = {}
    with GradingPool() as pool:
        for name, pairs in (("foreign_unboxed", foreign), ("cut_before_answer", cut)):
            new = pool.grade([g for g, _ in pairs], [r for _, r in pairs])
            out[name] = {"pairs": len(pairs), "anchored_correct": new.count("correct")}
            if a.old:
                out[name]["old_tail_correct"] = old_rule(pool, pairs).count("correct")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
