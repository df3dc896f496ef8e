"""Difficulty buckets, balanced selections, easy-to-hard curricula and resampling weights (pure pyarrow/numpy).

Buckets come from each row's pass count. The two degenerate ends stay apart from the rest:

- ``unsolved``: 0 of k correct: too hard for this model, or a wrong gold answer;
- ``solved``: k of k correct: no learning signal for GRPO (every advantage in the group is zero);
- ``ungraded``: no sample could be graded (timeouts): no estimate at all.

Skywork-OR1, Open-R1 and POLARIS all drop the two ends from training sets; so does the default here.
``include_ends`` keeps ``unsolved`` and ``solved`` (never ``ungraded``): a ``uniform`` target then balances
five buckets, a band admits pass rates 0 and 1 as well, and a custom target must weigh the ends itself.
The pass rate is ``n_correct / k``: timeouts and crashes count as failures (their labels are kept, and rows
with ``n_graded < k`` are counted apart in the report). The middle is cut by pass rate: by default ``hard`` p <= 1/3, ``medium``
p <= 2/3, ``easy`` above; with k = 10 that is pass counts 1-3, 4-6 and 7-9.

A selection takes ``total`` rows with a target distribution over buckets: ``uniform`` (Kimi k1.5 asks
for a balanced mix), a band such as Open-R1's ``band:0.1-0.9`` (strictly inside), or a custom histogram
``hard=0.5,medium=0.3,easy=0.2``. Quotas are split by largest remainder; inside a bucket rows are drawn
stratified by (source, subject), proportionally to what is available, so the mix of sources and subjects
survives. A bucket with fewer rows than its quota is a recorded shortfall, handled by the stated rule:
``redistribute`` (the missing rows go to the other buckets in proportion to their weights, as far as
they have rows) or ``fail``. Nothing is truncated silently: the report says what was available, asked,
taken and why anything was left out.

The resampling weight is Kimi k1.5's prioritized sampling, p_i proportional to 1 - s_i (s_i the pass
rate), with a floor so that solved prompts are not starved: ``weight = max(floor, 1 - pass_rate)``.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.core.errors import GradusError

END_BUCKETS = ("unsolved", "solved", "ungraded")
REQUIRED = ("id", "n_correct", "n_graded", "pass_rate")


class SelectionError(GradusError):
    """A selection that cannot be made. ``settings``: the export settings that would change it, named in the message
    as the command line spells them; ``in_config()`` names them as a flow config's ``export.<key>``."""

    def __init__(self, message: str, settings: tuple[str, ...] = ()):
        self.base, self.settings = message, settings
        super().__init__(message + (f"; change {_either([f'--{k.replace(chr(95), chr(45))}' for k in settings])}"
                                    if settings else ""))

    def in_config(self) -> str:
        return self.base + (f"; change {_either([f'export.{k}' for k in self.settings])} in the config"
                            if self.settings else "")


def _either(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


@dataclass(frozen=True)
class BucketSpec:
    """Middle buckets as (name, upper pass-rate edge, inclusive), hardest first; the last edge is 1."""

    edges: tuple[tuple[str, float], ...] = (("hard", 1 / 3), ("medium", 2 / 3), ("easy", 1.0))

    @classmethod
    def parse(cls, text: str | None) -> BucketSpec:
        """``hard=0.33,medium=0.66,easy=1`` (upper edges, increasing) or None for the default."""
        if not text:
            return cls()
        edges = []
        for part in text.split(","):
            name, _, edge = part.partition("=")
            try:
                edges.append((name.strip(), float(edge)))
            except ValueError as e:
                raise SelectionError(f"bad bucket {part!r}: write NAME=UPPER_PASS_RATE, e.g. hard=0.33") from e
        ups = [e for _, e in edges]
        if ups != sorted(ups) or len(set(ups)) != len(ups) or ups[-1] != 1.0 or ups[0] <= 0:
            raise SelectionError(f"bucket edges must increase strictly and end at 1: {text}")
        names = [n for n, _ in edges]
        if len(set(names)) != len(names) or set(names) & set(END_BUCKETS):
            raise SelectionError(f"bucket names must be distinct and not one of {END_BUCKETS}: {text}")
        return cls(tuple(edges))

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.edges]

    def easy_to_hard(self) -> list[str]:
        return list(reversed(self.names))


def check_scored(table: pa.Table) -> None:
    """Clear errors for tables that are not (consistent) difficulty-scored rows."""
    missing = [c for c in REQUIRED if c not in table.column_names]
    if missing:
        raise SelectionError(f"not difficulty-scored rows: missing columns {missing} (run `gradus estimate` first)")
    if table.num_rows == 0:
        return
    nc, ng = table["n_correct"], table["n_graded"]
    if pc.any(pc.is_null(nc)).as_py() or pc.any(pc.is_null(ng)).as_py():
        n = pc.sum(pc.or_(pc.is_null(nc), pc.is_null(ng)).cast(pa.int64())).as_py()
        raise SelectionError(f"{n} rows have no n_correct/n_graded: not scored (run `gradus estimate` on them)")
    bad = pc.or_(pc.less(nc, 0), pc.greater(nc, ng))
    if pc.any(bad).as_py():
        i = pc.index(bad, True).as_py()
        raise SelectionError(f"inconsistent difficulty in row {table['id'][i]}: n_correct={nc[i]} n_graded={ng[i]}")
    if "k" in table.column_names:
        over = pc.greater(ng, pc.fill_null(table["k"], 2**31 - 1))
        if pc.any(over).as_py():
            i = pc.index(over, True).as_py()
            raise SelectionError(f"inconsistent difficulty in row {table['id'][i]}: n_graded={ng[i]} > k={table['k'][i]}")


def bucket_of(n_correct: int, n_graded: int, spec: BucketSpec = BucketSpec(), k: int | None = None) -> str:
    """The bucket of a row with ``n_correct`` of ``k`` samples correct (``n_graded`` of them with a verdict).

    The pass rate is ``n_correct / k``: a sample that timed out or crashed counts as a failure, so 1 correct of
    1 graded out of 10 is "hard", not "solved". ``ungraded`` only when no sample has a verdict at all.
    ``k`` None (rows without a ``k`` column) falls back to ``n_graded``.
    """
    n = k if k is not None else n_graded
    if n_graded == 0:
        return "ungraded"
    if n_correct == 0:
        return "unsolved"
    if n_correct == n:
        return "solved"
    p = n_correct / n
    for name, edge in spec.edges:
        if p <= edge + 1e-12:
            return name
    return spec.edges[-1][0]


def decided_bucket(masses: list[float] | None, spec: BucketSpec = BucketSpec()) -> str | None:
    """The bucket an adaptive estimate decided: the one of largest posterior mass (``curate.difficulty.adaptive``), where
    the buckets are the estimator's (the default spec); None for a fixed-k row (no masses) or another spec."""
    from curate.difficulty.adaptive import BUCKETS

    if not masses or spec != BucketSpec() or len(masses) != len(BUCKETS):
        return None
    return BUCKETS[max(range(len(masses)), key=masses.__getitem__)]


def assign_buckets(table: pa.Table, spec: BucketSpec = BucketSpec()) -> pa.Array:
    """Each row's bucket: the one its adaptive estimate decided (``decided_bucket``), else from its counts."""
    check_scored(table)
    ks = table["k"].to_pylist() if "k" in table.column_names else [None] * table.num_rows
    masses = table["bucket_masses"].to_pylist() if "bucket_masses" in table.column_names else [None] * table.num_rows
    return pa.array([decided_bucket(m, spec) or bucket_of(c, g, spec, k)
                     for c, g, k, m in zip(table["n_correct"].to_pylist(), table["n_graded"].to_pylist(), ks, masses,
                                           strict=True)], pa.string())


def incompletely_graded(table: pa.Table) -> pa.Array:
    """True where some samples have no verdict (``n_graded < k``): reported apart in selection reports."""
    if "k" not in table.column_names:
        return pa.array([False] * table.num_rows)
    return pc.fill_null(pc.less(table["n_graded"], table["k"]), False)


def sample_weights(pass_rate: pa.Array | pa.ChunkedArray, floor: float = 0.05) -> pa.Array:
    """Kimi k1.5 prioritized resampling: ``max(floor, 1 - pass_rate)``; unknown pass rates weigh 1."""
    if not 0 <= floor <= 1:
        raise SelectionError(f"weight floor must be in [0, 1], got {floor}")
    p = np.asarray(pc.fill_null(pass_rate, 0.0).to_numpy(zero_copy_only=False), dtype=np.float64)
    return pa.array(np.maximum(floor, 1.0 - p).astype(np.float32))


@dataclass
class Target:
    """What distribution to select: weights over buckets, or a pass-rate band (lo, hi) exclusive."""

    kind: str  # "uniform" | "band" | "custom"
    weights: dict[str, float] = field(default_factory=dict)
    band: tuple[float, float] | None = None

    @classmethod
    def parse(cls, text: str | None, spec: BucketSpec) -> Target:
        text = (text or "uniform").strip()
        if text == "uniform":
            return cls("uniform", {n: 1.0 for n in spec.names})
        if text.startswith("band:"):
            lo, _, hi = text[5:].partition("-")
            try:
                band = (float(lo), float(hi))
            except ValueError as e:
                raise SelectionError(f"bad band {text!r}: write band:LO-HI, e.g. band:0.1-0.9") from e
            if not 0 <= band[0] < band[1] <= 1:
                raise SelectionError(f"bad band {text!r}: need 0 <= LO < HI <= 1")
            return cls("band", {"band": 1.0}, band)
        weights = {}
        for part in text.split(","):
            name, _, w = part.partition("=")
            try:
                weights[name.strip()] = float(w)
            except ValueError as e:
                raise SelectionError(f"bad target {part!r}: write uniform, band:LO-HI or NAME=WEIGHT,...") from e
        known = set(spec.names) | set(END_BUCKETS) - {"ungraded"}
        unknown = set(weights) - known
        if unknown:
            raise SelectionError(f"unknown bucket(s) {sorted(unknown)} in target; buckets are {sorted(known)}")
        if any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
            raise SelectionError(f"target weights must be >= 0 and sum to more than 0: {text}")
        return cls("custom", weights)

    def describe(self) -> str:
        if self.kind == "band" and self.band is not None:
            return f"band {self.band[0]} < pass_rate < {self.band[1]}"
        return self.kind + " " + ", ".join(f"{k}={v:g}" for k, v in self.weights.items())


def largest_remainder(total: int, weights: dict[str, float]) -> dict[str, int]:
    """Integer quotas summing to ``total`` in proportion to ``weights`` (ties broken by order given)."""
    s = sum(weights.values())
    if s <= 0:
        raise SelectionError("weights sum to zero")
    exact = {k: total * w / s for k, w in weights.items()}
    quota = {k: int(np.floor(v)) for k, v in exact.items()}
    left = total - sum(quota.values())
    order = sorted(weights, key=lambda k: (-(exact[k] - quota[k]), list(weights).index(k)))
    for k in order[:left]:
        quota[k] += 1
    return quota


def _rng(seed: int, *parts: str) -> np.random.Generator:
    h = hashlib.sha256(":".join([str(seed), *parts]).encode()).digest()
    return np.random.default_rng(int.from_bytes(h[:8], "little"))


def stratified_pick(strata: list[str], n: int, seed: int, salt: str) -> list[int]:
    """``n`` row positions drawn so each stratum gets a share proportional to its size (largest remainder)."""
    if n <= 0:
        return []
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(strata):
        groups.setdefault(s, []).append(i)
    keys = sorted(groups)
    quota = largest_remainder(n, {k: float(len(groups[k])) for k in keys})
    picked = []
    for k in keys:
        rows = np.array(groups[k])
        rng = _rng(seed, salt, k)
        picked += rows[rng.permutation(len(rows))[: quota[k]]].tolist()
    return sorted(picked)


@dataclass
class Selection:
    table: pa.Table  # the chosen rows, with bucket and sample_weight columns, in a seeded shuffled order
    report: dict


def select(table: pa.Table, total: int | None, target: Target, spec: BucketSpec = BucketSpec(), seed: int = 0,
           shortfall: str = "redistribute", include_ends: bool = False, weight_floor: float = 0.05,
           stratify: tuple[str, ...] = ("source", "subject")) -> Selection:
    """Choose rows for a training set; see the module docstring for the rules. ``total`` None: every eligible row."""
    if shortfall not in ("redistribute", "fail"):
        raise SelectionError(f"shortfall rule must be 'redistribute' or 'fail', not {shortfall!r}")
    if total is not None and total < 0:
        raise SelectionError(f"total must be >= 0, got {total}")
    if include_ends:
        if target.kind == "uniform":  # the ends become buckets of the balanced mix, like the middle ones
            target = Target("uniform", {"unsolved": 1.0, **target.weights, "solved": 1.0})
        elif target.kind == "custom" and not {"unsolved", "solved"} & {k for k, w in target.weights.items() if w > 0}:
            raise SelectionError("include_ends with a custom target: give the ends a weight in the target itself "
                                 "(e.g. unsolved=0.1,hard=0.3,medium=0.3,easy=0.2,solved=0.1)")
    buckets = assign_buckets(table, spec)
    weights_col = sample_weights(table["pass_rate"], weight_floor)
    table = table.append_column("bucket", buckets).append_column("sample_weight", weights_col)
    bnames = buckets.to_pylist()
    report: dict = {"rows_in": table.num_rows, "target": target.describe(), "seed": seed, "shortfall_rule": shortfall,
                    "bucket_edges": {n: round(e, 6) for n, e in spec.edges}, "include_ends": include_ends,
                    "available_by_bucket": dict(Counter(bnames)), "excluded": {},
                    # rows where some samples timed out or crashed (counted as failures): listed apart per bucket
                    "incompletely_graded_by_bucket": dict(Counter(
                        b for b, inc in zip(bnames, incompletely_graded(table).to_pylist(), strict=True) if inc))}

    # eligibility
    eligible: dict[str, list[int]] = {}
    if target.kind == "band" and target.band is not None:
        lo, hi = target.band
        pr = table["pass_rate"].to_pylist()
        for i, p in enumerate(pr):
            if p is not None and lo < p < hi and bnames[i] != "ungraded":
                eligible.setdefault("band", []).append(i)
            elif include_ends and p is not None and p in (0.0, 1.0) and bnames[i] in ("unsolved", "solved"):
                eligible.setdefault("band", []).append(i)  # the ends join the band
            else:
                key = "ungraded" if p is None or bnames[i] == "ungraded" else "outside_band"
                report["excluded"][key] = report["excluded"].get(key, 0) + 1
    else:
        wanted = {k for k, w in target.weights.items() if w > 0}
        for i, b in enumerate(bnames):
            if b in END_BUCKETS and b not in wanted:
                report["excluded"][b] = report["excluded"].get(b, 0) + 1
            elif b not in wanted:
                report["excluded"]["bucket_not_in_target"] = report["excluded"].get("bucket_not_in_target", 0) + 1
            else:
                eligible.setdefault(b, []).append(i)
    weights = {k: w for k, w in target.weights.items() if w > 0}
    avail = {k: len(eligible.get(k, [])) for k in weights}
    n_eligible = sum(avail.values())
    if total is None:
        total = n_eligible
        quotas = dict(avail)
    else:
        if total > n_eligible and shortfall == "fail":
            raise SelectionError(f"asked for {total} rows, only {n_eligible} eligible ({avail}); lower --total or "
                                 "use --shortfall redistribute")
        quotas = largest_remainder(total, weights)
    asked = dict(quotas)
    short = {k: quotas[k] - avail[k] for k in weights if quotas[k] > avail[k]}
    if short and shortfall == "fail":
        raise SelectionError(f"buckets short of their quota: {', '.join(f'{k} needs {asked[k]}, has {avail[k]}' for k in short)}"
                             "; use --shortfall redistribute or another target")
    # redistribute: hand the missing rows to buckets with spare rows, in proportion to their weights
    taken = {k: min(quotas[k], avail[k]) for k in weights}
    missing = total - sum(taken.values())
    while missing > 0:
        spare = {k: weights[k] for k in weights if avail[k] > taken[k]}
        if not spare:
            break
        extra = largest_remainder(missing, spare)
        for k, e in extra.items():
            add = min(e, avail[k] - taken[k])
            taken[k] += add
            missing -= add
    picked: list[int] = []
    strat_cols = [c for c in stratify if c in table.column_names]
    for k in weights:
        rows = eligible.get(k, [])
        strata = ["\x1f".join(str(table[c][i].as_py()) for c in strat_cols) for i in rows] if strat_cols else [""] * len(rows)
        picked += [rows[j] for j in stratified_pick(strata, taken[k], seed, k)]
    order = _rng(seed, "order").permutation(len(picked))
    picked_arr = pa.array(np.array(sorted(picked), dtype=np.int64)[order] if picked else [], pa.int64())
    chosen = table.take(picked_arr)
    report.update({
        "rows_selected": chosen.num_rows, "rows_asked": total,
        "by_bucket": {k: {"available": avail[k], "target_weight": round(weights[k] / sum(weights.values()), 4),
                          "asked": asked[k], "taken": taken[k], "short": max(0, asked[k] - avail[k])} for k in weights},
        "shortfall": {k: v for k, v in short.items()},
        "unfilled": missing,
        "not_selected": n_eligible - chosen.num_rows,
    })
    for col in strat_cols:
        avail_c = Counter(table[col].take(pa.array([i for v in eligible.values() for i in v], pa.int64())).to_pylist())
        taken_c = Counter(chosen[col].to_pylist())
        report[f"by_{col}"] = {str(k): {"available": avail_c[k], "taken": taken_c.get(k, 0)} for k in sorted(avail_c, key=str)}
    achieved = Counter(chosen["bucket"].to_pylist())
    report["achieved_distribution"] = {k: round(achieved.get(k, 0) / max(1, chosen.num_rows), 4) for k in weights}
    if target.kind == "band":
        report["achieved_distribution"] = {b: round(v / max(1, chosen.num_rows), 4) for b, v in sorted(achieved.items())}
    return Selection(chosen, report)


def curriculum_stages(
    selection: Selection, spec: BucketSpec = BucketSpec(), order: list[str] | None = None
) -> list[tuple[str, pa.Table]]:
    """Split a selection into stages from easy to hard (Kimi k1.5 curriculum sampling), one per bucket."""
    order = order or (["solved"] + spec.easy_to_hard() + ["unsolved"])
    t = selection.table
    stages = []
    for name in order:
        part = t.filter(pc.equal(t["bucket"], name))
        if part.num_rows:
            stages.append((name, part))
    leftover = t.num_rows - sum(p.num_rows for _, p in stages)
    if leftover:
        raise SelectionError(f"{leftover} selected rows fall in no curriculum stage (order {order})")
    return stages
