"""Suspect golds: recall, false-flag rate and precision of the estimator's rule, on golds corrupted on purpose.

The rule (``curate/difficulty/estimate.py`` ``consensus``, ``SUSPECT_RULE`` 2) flags a row when no sample is graded
correct and at least max(3, half of the samples) agree on one answer other than the gold. Rule 1, beside it for
comparison, drops "no sample graded correct".

Reads difficulty stage outputs. Nothing is sampled again: the model never sees the gold, so its samples stand
as they are and only the grading changes. Each sample is graded again, against the corrupted gold, by the same
``GradingPool`` as in the estimator, from its response when the run kept them (``--keep-responses``). Otherwise
the stored answer is used, boxed.

- **Recall.** Every row gets a wrong gold, once of each kind:
  - ``mixup``: another row's gold from the same source, one that is another answer (a row paired with the wrong
    key);
  - ``typo``: the gold's last number changed by 1 or 2 (a slip in copying).

  The share of rows flagged is the recall, split by how often the model solved the row with its own gold: a row
  the model never solves flags with a wrong gold exactly as with its own one (its samples agree on a slip, or
  not), and a row it solves once in ten has little to agree on.
- **False flags.** Every row with its own gold (``--scored`` rows, and ``--exact`` rows, whose golds are exact by
  construction) is read with the stored outcomes. On ``--exact`` rows every flag is a false one. On real rows a
  flag may be a real gold error, so each flagged real row is printed for reading. Rule 2 never flags a row with a
  correct sample: on rows the model solves sometimes its precision is 1 by construction, and its false flags all
  come from rows it never solves.
- **Precision** of a set where each gold is wrong with chance pi, whatever the row: pi R / (pi R + (1 - pi) F),
  with R the recall over all rows and F the false-flag rate over all rows.

    python benchmarks/suspect_gold.py --scored /tmp/sg/est_a --exact runs/demo/stages/5_difficulty \\
        --exact /tmp/learn_full/scored --json benchmarks/results/suspect_gold.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

REGRADED = ("correct", "wrong", "timeout")  # outcomes that depend on the gold; no_answer and truncated do not
_LAST_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?!.*\d)", re.S)
BANDS = ((0.0, 0.3), (0.3, 0.6), (0.6, 1.0))  # the model's pass rate on the row, with its own gold (0 apart)


def load(folder: Path) -> tuple[list[dict], dict[str, list[str]]]:
    """A difficulty stage's kept rows and, when it kept them, each row's responses in sample order."""
    import pyarrow.parquet as pq

    cols = ["id", "source", "source_id", "problem", "answer", "k", "n_correct", "n_graded", "answers", "outcomes",
            "suspect_gold"]
    files = sorted((folder / "kept").glob("*.parquet"))
    if not files:
        raise SystemExit(f"{folder}: no kept shards (a difficulty stage output?)")
    rows = pq.read_table(files, columns=cols).to_pylist()
    texts: dict[str, list[str]] = {}
    rfiles = sorted((folder / "responses").glob("*.parquet"))
    if rfiles:
        by: dict[str, dict[int, str]] = defaultdict(dict)
        for r in pq.read_table(rfiles, columns=["id", "sample", "text"]).to_pylist():
            by[r["id"]][r["sample"]] = r["text"]
        twice = {i for i, c in Counter(r["id"] for r in rows).items() if c > 1}  # one id, two rows: whose texts?
        texts = {i: [d[s] for s in sorted(d)] for i, d in by.items() if i not in twice}
    return rows, texts


def typo(gold: str, rng: random.Random) -> str | None:
    """The gold with its last number moved by 1 or 2 (either way; a positive one stays positive), or None when it
    holds no number."""
    m = _LAST_NUMBER.search(gold)
    if m is None:
        return None
    s = m.group(0)
    step = rng.choice((-2, -1, 1, 2))
    if float(s) > 0 and float(s) + step <= 0:  # a positive number stays positive (no 1/0 from 1/2)
        step = -step
    if "." in s:
        places = len(s.split(".")[1])
        new = f"{float(s) + step * 10 ** -places:.{places}f}"
    else:
        new = str(int(s) + step)
    return gold[: m.start()] + new + gold[m.end():]


def rules(pool, answers: list, outcomes: list[str]) -> tuple[bool, bool]:
    """(rule 2, rule 1) flags of one row."""
    from curate.difficulty.suspect import consensus

    r2 = consensus(pool, answers, outcomes)["suspect_gold"]
    # rule 1: correct samples neither count as a wrong answer nor veto the flag
    r1 = consensus(pool, answers, ["correct_" if o == "correct" else o for o in outcomes])["suspect_gold"]
    return bool(r2), bool(r1)


def regraded(pool, gold: str, row: dict, texts: list[str] | None) -> list[str]:
    """The row's outcomes against ``gold``: samples whose outcome depends on the gold are graded again."""
    at = [i for i, o in enumerate(row["outcomes"]) if o in REGRADED]
    if texts is not None and len(texts) == len(row["outcomes"]):
        resp = [texts[i] for i in at]
    else:  # no responses kept: the answer as extracted, boxed (a sample graded without one has no answer)
        resp = [f"\\boxed{{{row['answers'][i] or ''}}}" for i in at]
    new = pool.grade([gold] * len(at), resp)
    out = list(row["outcomes"])
    for i, o in zip(at, new, strict=True):
        out[i] = o
    return out


def wilson(x: int, n: int) -> list[float]:
    from curate.difficulty.estimate import wilson as w

    return [round(v, 3) for v in w(x, n)]


def band_of(p: float) -> str:
    for lo, hi in BANDS:
        if lo < p <= hi:
            return f"({lo}, {hi}]"
    return "never solved"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scored", action="append", default=[], help="a difficulty stage of real rows (repeatable)")
    ap.add_argument("--exact", action="append", default=[], help="a difficulty stage of exact golds (repeatable)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pi", default="0.05,0.1,0.3", help="shares of corrupted golds to state the precision at")
    ap.add_argument("--json", help="write every figure here")
    a = ap.parse_args()

    from curate.difficulty.grading import GradingPool

    rng = random.Random(a.seed)
    pis = [float(x) for x in a.pi.split(",")]
    report: dict = {"rule": "SUSPECT_RULE 2: no sample correct, and >= max(3, k/2) samples agree on another answer",
                    "populations": {}}
    with GradingPool() as pool:
        for kind_of_set, folders in (("real", a.scored), ("exact", a.exact)):
            for folder in folders:
                rows, texts = load(Path(folder))
                name = f"{kind_of_set}:{folder}"
                by_source: dict[str, list[dict]] = defaultdict(list)
                for r in rows:
                    by_source[r["source"]].append(r)
                # false flags: each row with its own gold, the stored outcomes
                own = [(r, *rules(pool, r["answers"], r["outcomes"])) for r in rows]
                flagged = [(r, f2, f1) for r, f2, f1 in own if f2 or f1]
                never = sum(r["n_correct"] == 0 for r in rows)
                pop: dict = {"rows": len(rows), "never_solved": never, "responses": bool(texts),
                             "own_gold": {"flag_rule2": sum(f2 for _, f2, _ in own),
                                          "flag_rule1": sum(f1 for _, _, f1 in own)},
                             "flagged_own": [{"source": r["source"], "source_id": r["source_id"], "gold": r["answer"],
                                              "n_correct": r["n_correct"], "k": r["n_graded"], "rule2": f2,
                                              "answers": r["answers"], "problem": r["problem"][:300]}
                                             for r, f2, _ in flagged]}
                # recall: each row corrupted once of each kind
                some = [r for r in rows if 0 < r["n_correct"]]
                rec: dict = {}
                for kind in ("mixup", "typo"):
                    hits: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # band -> [rows, rule 2, rule 1]
                    tried = 0
                    for r in rows:
                        if kind == "typo":
                            bad = typo(r["answer"] or "", rng)
                        else:
                            others = [o["answer"] for o in by_source[r["source"]] if o["answer"] != r["answer"]]
                            rng.shuffle(others)
                            bad = next((o for o in others[:20] if pool.same_answer([(o, r["answer"])])[0] is False),
                                       None)
                        if bad is None or pool.same_answer([(bad, r["answer"])])[0] is not False:
                            continue
                        tried += 1
                        outs = regraded(pool, bad, r, texts.get(r["id"]))
                        f2, f1 = rules(pool, r["answers"], outs)
                        band = band_of(r["n_correct"] / max(r["n_graded"], 1))
                        for b in ("all", band) + (("sometimes solved",) if r["n_correct"] else ()):
                            hits[b][0] += 1
                            hits[b][1] += f2
                            hits[b][2] += f1
                    rec[kind] = {b: {"rows": n, "recall_rule2": round(x2 / n, 3), "ci_rule2": wilson(x2, n),
                                     "recall_rule1": round(x1 / n, 3)} for b, (n, x2, x1) in sorted(hits.items())}
                    if "all" in rec[kind]:
                        rec[kind]["all"]["corrupted"] = tried
                pop["sometimes_solved"] = len(some)
                pop["recall"] = rec
                n = max(len(rows), 1)
                f2n, f1n = pop["own_gold"]["flag_rule2"], pop["own_gold"]["flag_rule1"]
                pop["own_gold"].update({"rate_rule2": round(f2n / n, 4), "ci_rule2": wilson(f2n, n),
                                        "rate_rule1": round(f1n / n, 4)})
                prec = {}
                for pi in pis:
                    for kind in (k for k in rec if "all" in rec[k]):
                        r2, r1 = rec[kind]["all"]["recall_rule2"], rec[kind]["all"]["recall_rule1"]
                        p2 = pi * r2 / (pi * r2 + (1 - pi) * f2n / n) if r2 or f2n else None
                        p1 = pi * r1 / (pi * r1 + (1 - pi) * f1n / n) if r1 or f1n else None
                        prec[f"pi={pi} {kind}"] = {"rule2": None if p2 is None else round(p2, 3),
                                                   "rule1": None if p1 is None else round(p1, 3)}
                pop["precision"] = prec
                report["populations"][name] = pop
                print(f"\n{name}: {n} rows, {never} never solved, {len(some)} solved sometimes, "
                      f"responses {'kept' if texts else 'not kept (stored answers, boxed)'}")
                print(f"  own golds flagged: rule 2 {f2n} ({f2n / n:.1%}, 95% {wilson(f2n, n)}), rule 1 {f1n} "
                      f"({f1n / n:.1%})")
                for kind, by_band in rec.items():
                    for b, v in by_band.items():
                        print(f"  recall {kind:<5} {b:<12} rows {v['rows']:>4}  rule 2 {v['recall_rule2']:.3f} "
                              f"{v['ci_rule2']}  rule 1 {v['recall_rule1']:.3f}")
                for key, v in prec.items():
                    print(f"  precision at {key:<14} rule 2 {v['rule2']}  rule 1 {v['rule1']}")
                for f in pop["flagged_own"]:
                    print(f"  flagged with its own gold ({'rule 2' if f['rule2'] else 'rule 1 only'}): "
                          f"{f['source']} {f['source_id']} gold {f['gold']!r}, {f['n_correct']}/{f['k']} correct, "
                          f"answers {f['answers']}")
                    print(f"      {f['problem'][:160]!r}")
        report["grading"] = dict(pool.stats)
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
