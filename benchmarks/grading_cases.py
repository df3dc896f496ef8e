"""How many verdicts a careful reader would dispute: the grader on ``tests/grading_cases.py``, by kind of answer.

    python -P benchmarks/grading_cases.py            # this checkout's grader
    PYTHONPATH=/path/to/other/checkout python -P benchmarks/grading_cases.py --cases tests/grading_cases.py

The cases file is read from this checkout (``--cases``), the grader from whatever ``curate`` imports, so the same
cases can be put to an older grader.
"""

from __future__ import annotations

import argparse
import importlib.util
from collections import Counter
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=str(Path(__file__).resolve().parent.parent / "tests" / "grading_cases.py"))
    a = ap.parse_args()
    spec = importlib.util.spec_from_file_location("grading_cases", a.cases)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from curate.difficulty import GradingPool
    from curate.difficulty.grading import GRADER_VERSION

    cases = mod.CASES
    with GradingPool(2) as pool:
        out = pool.grade([g for _, g, _, _ in cases], [r for _, _, r, _ in cases])
    disputed = [(c, o) for c, o in zip(cases, out, strict=True) if (o == "correct") != c[3]]
    total, bad = Counter(c[0] for c in cases), Counter(c[0] for c, _ in disputed)
    print(f"grader {GRADER_VERSION}")
    for kind in total:
        print(f"  {kind:<12} {bad[kind]:>3} of {total[kind]:>3} disputed")
    false_pos = sum(1 for c, _ in disputed if not c[3])
    print(f"disputed {len(disputed)} of {len(cases)} ({len(disputed) / len(cases):.1%}); graded correct where a careful "
          f"reader says wrong: {false_pos}")
    for (kind, gold, response, correct), o in disputed:
        print(f"  {kind}: gold {gold!r}, response {response!r}: {o} (careful: {'correct' if correct else 'wrong'})")


if __name__ == "__main__":
    main()
