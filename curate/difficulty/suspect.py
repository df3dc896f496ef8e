"""Suspect gold answers: a row none of whose samples is graded right while most of them agree on another answer
(our rule), and how well that rule would catch a wrong gold on a run's own samples."""

from __future__ import annotations

from collections import Counter

from curate.difficulty.grading import GradingPool

# suspect gold (our rule): no sample graded correct, and at least this many samples, and at least half of all, give
# one answer that is not the gold
CONSENSUS_MIN = 3
# Bump when the suspect-gold rule changes (2: no sample graded correct). Part of the stage's identity, not of the store
# keys: rows copied from the store get the flag recomputed from their stored answers and outcomes.
SUSPECT_RULE = 2


def consensus(pool: GradingPool, answers: list[str | None], outcomes: list[str]) -> dict:
    """``suspect_gold`` when no sample was graded correct and at least ``CONSENSUS_MIN`` samples, and at least half
    of all, give one answer that was graded wrong (math-verify: not the gold). Answers are grouped as math-verify
    compares them (``0.5`` and ``\\frac12`` are one answer); a sample without an explicit answer belongs to no group.
    A sample that reaches the gold says the gold can be right: the agreeing wrong answers are then the model's
    systematic slip (measured on the demo's exact golds: 3 of its 5 false flags had a correct sample)."""
    none = {"suspect_gold": False, "consensus_answer": None, "consensus_count": None}
    if "correct" in outcomes:
        return none
    wrong = [a for a, o in zip(answers, outcomes, strict=True) if o == "wrong" and a]
    need = max(CONSENSUS_MIN, (len(outcomes) + 1) // 2)
    if len(wrong) < need:
        return none
    counts = Counter(wrong)
    groups: list[list[str]] = []
    for a, _ in counts.most_common():  # most frequent spelling first
        for g in groups:
            if pool.same_answer([(g[0], a)])[0]:
                g.append(a)
                break
        else:
            groups.append([a])
    best = max(groups, key=lambda g: sum(counts[a] for a in g))
    n = sum(counts[a] for a in best)
    if n < need:
        return none
    return {"suspect_gold": True, "consensus_answer": best[0], "consensus_count": n}


SUSPECT_CHECK_ROWS = 2000  # rows the recall check reads at most (evenly spread): recall to about +-0.02, and a
# bounded finish (each distinct non-plain answer pair is one math-verify call)


def suspect_recall(pool: GradingPool, answers: list[list], outcomes: list[list[str]],
                   limit: int = SUSPECT_CHECK_ROWS) -> dict:
    """The suspect-gold rule's recall on a run's own samples: of the rows with a correct sample (their gold is
    reached, so likely right), the share ``consensus`` would flag had the gold been another answer, one no sample
    gives (its correct samples then graded wrong, with the answers they gave). A row the model solves once in ten
    has little to agree on; a wrong gold of a row the model never solves is not seen at all. At most ``limit`` of
    those rows are read, evenly spread over the run."""
    solved = [i for i, o in enumerate(outcomes) if answers[i] is not None and o is not None and "correct" in o]
    picked = solved if len(solved) <= limit else [solved[j * len(solved) // limit] for j in range(limit)]
    caught = sum(bool(consensus(pool, answers[i], ["wrong" if x == "correct" else x for x in outcomes[i]])["suspect_gold"])
                 for i in picked)
    return {"rows_with_a_correct_sample": len(solved), "rows_checked": len(picked), "caught_if_gold_wrong": caught,
            "recall": round(caught / len(picked), 4) if picked else None}
