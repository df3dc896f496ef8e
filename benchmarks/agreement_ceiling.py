"""The ceiling of adaptive sampling, scored as agreement with an independent fixed k=10 run (exact, no Monte Carlo).

The adaptive family of ``curate.difficulty.adaptive`` draws ``k_first`` samples, then rounds of ``k_step``, at most
``k_max`` (defaults 4, 2, 32). Any stopping rule of that family is a table over states (c correct of n): stop or
not, and which bucket to report. This script finds, per population of true pass rates, the best such table when
the rule knows the TRUE population (the oracle prior), by backward induction maximizing

    E[rule's bucket == an independent k=10 run's bucket] - mu * E[samples per problem]

over a sweep of mu (the reported bucket is the posterior-predictive mode of the k=10 run's bucket). Each mu gives
a vertex of the frontier; mixing two neighbouring rules (per problem, at random) fills the segments between them,
so the frontier is the upper concave hull, read at ``--budget`` samples (7.0: 30% fewer than 10) and at the
k10-vs-k10 agreement (samples for parity). The project's own rule (Jeffreys prior, latent bucket, ``delta``) is
scored the same way. No rule of the family beats the oracle frontier: a negative gap means that none matches k=10's
agreement at that budget.

    python -m benchmarks.agreement_ceiling --real runs/demo/stages/5_difficulty

Populations: the shapes of ``benchmarks/adaptive.py`` (restated as equal-mass quantile grids, so expectations are
exact sums), and a scored stage's rows, each row's true rate spread over Beta(1/2 + correct, 1/2 + wrong).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from itertools import pairwise
from pathlib import Path

import numpy as np
from scipy import special, stats

from benchmarks.adaptive import SHAPES, true_bucket
from curate.difficulty.adaptive import BUCKETS, EDGES, AdaptiveConfig, decide, observed_bucket

KB10 = np.array([BUCKETS.index(observed_bucket(c, 10, EDGES)) for c in range(11)])  # k=10 count -> bucket index
Grid = tuple[np.ndarray, np.ndarray]  # (true rates, their probability weights)


def shape_grids(m: int) -> dict[str, Grid]:
    """benchmarks/adaptive.py's SHAPES as equal-mass quantile grids of ``m`` points (names kept in sync)."""
    q = (np.arange(m) + 0.5) / m
    half = (np.arange(m // 2) + 0.5) / (m // 2)
    grids = {
        "uniform": q,
        "u-shaped Beta(.3,.3)": stats.beta.ppf(q, 0.3, 0.3),
        "mostly hard Beta(.5,3)": stats.beta.ppf(q, 0.5, 3),
        "half never solved": np.concatenate([np.zeros(m // 2), half]),
    }
    assert grids.keys() == SHAPES.keys(), "benchmarks/adaptive.py's SHAPES changed: restate them here"
    return {name: (p, np.full(len(p), 1 / len(p))) for name, p in grids.items()}


def real_grid(folder: Path, m: int) -> Grid:
    """Each row's rate as an equal-mass quantile grid of Beta(1/2 + c, 1/2 + k - c), max(50, m // rows) points a row
    (rows with the same counts share one grid, weighted by how many there are)."""
    import pyarrow.parquet as pq

    rows: Counter[tuple[int, int]] = Counter()
    for f in sorted((folder / "kept").glob("*.parquet")):
        t = pq.read_table(f, columns=["n_correct", "k"])
        rows.update(zip(t["n_correct"].to_pylist(), t["k"].to_pylist(), strict=True))
    total = sum(rows.values())
    per = max(50, m // total)
    q = (np.arange(per) + 0.5) / per
    p = np.concatenate([stats.beta.ppf(q, 0.5 + c, 0.5 + k - c) for c, k in rows])
    w = np.concatenate([np.full(per, n / (total * per)) for n in rows.values()])
    return p, w


def tables(p: np.ndarray, w: np.ndarray, k_max: int) -> tuple[dict, dict, np.ndarray]:
    """Per state (c, n), one particular sequence of outcomes: S[n][c] = its probability, A[n][c, b] = its
    probability jointly with an independent k=10 run landing in bucket b. Q[m, b] = P(k=10 bucket b | p_m)."""
    pm = stats.binom.pmf(np.arange(11)[None, :], 10, p[:, None])
    Q = np.stack([pm[:, KB10 == b].sum(1) for b in range(len(BUCKETS))], 1)
    S, A = {}, {}
    for n in range(1, k_max + 1):
        c = np.arange(n + 1)[:, None]
        lik = np.exp(special.xlogy(c, p) + special.xlog1py(n - c, -p)) * w  # (n + 1, grid)
        S[n], A[n] = lik.sum(1), lik @ Q
    return S, A, Q


def solve(S: dict, A: dict, ns: list[int], mu: float = 0.0, rule: dict | None = None) -> tuple[float, float]:
    """(E[samples], E[agreement]) of ``rule`` ({n: (stop mask, reported bucket)}), or, without one, of the
    oracle-optimal rule for price ``mu`` per sample. Backward over the decision points ``ns``; values are per
    sequence (unnormalized posteriors), so comparing them is comparing posterior expectations."""
    agree = used = np.zeros(0)
    for i in reversed(range(len(ns))):
        n, c = ns[i], np.arange(ns[i] + 1)
        stop, rep = rule[n] if rule else (None, A[n].argmax(1))  # oracle reports the predictive mode
        s_agree, s_used = A[n][c, rep], n * S[n]
        if i == len(ns) - 1:
            agree, used = s_agree, s_used
            continue
        step = ns[i + 1] - n  # the next round: j of its samples correct, comb(step, j) sequences each
        wj = special.comb(step, np.arange(step + 1))
        g_agree = sum(wj[j] * agree[c + j] for j in range(step + 1))
        g_used = sum(wj[j] * used[c + j] for j in range(step + 1))
        if stop is None:
            stop = s_agree - mu * s_used >= g_agree - mu * g_used
        agree, used = np.where(stop, s_agree, g_agree), np.where(stop, s_used, g_used)
    w0 = special.comb(ns[0], np.arange(ns[0] + 1))
    return float(w0 @ used), float(w0 @ agree)


def upper_hull(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The upper concave hull of (samples, agreement) points: what mixing two rules per problem reaches."""
    hull: list[tuple[float, float]] = []
    for x, y in sorted(set(pts)):
        # drop the last vertex while it lies on or below the chord from the one before it to (x, y)
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (y - y1) < (y2 - y1) * (x - x1):
                break
            hull.pop()
        hull.append((x, y))
    return hull


def at_samples(hull: list[tuple[float, float]], x: float) -> float:
    """Agreement on the hull at ``x`` samples (nan outside its range)."""
    xs, ys = zip(*hull, strict=True)
    return float(np.interp(x, xs, ys, left=np.nan, right=np.nan))


def samples_for(hull: list[tuple[float, float]], y: float) -> float:
    """Fewest samples at which the hull reaches agreement ``y`` (inf if never)."""
    for (x1, y1), (x2, y2) in pairwise(hull):
        if y1 >= y:
            return x1
        if y2 >= y:
            return x1 + (y - y1) / (y2 - y1) * (x2 - x1)
    return hull[-1][0] if hull[-1][1] >= y else float("inf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", action="append", default=[], help="a scored difficulty stage folder (has kept/)")
    ap.add_argument("--budget", type=float, default=7.0, help="mean samples per problem to read the frontier at")
    ap.add_argument("--delta", type=float, default=AdaptiveConfig().delta, help="the current rule's delta")
    ap.add_argument("--grid", type=int, default=20000, help="quantile points per population")
    ap.add_argument("--mus", type=int, default=60, help="prices per sample swept, log-spaced 0.1 .. 0.001")
    a = ap.parse_args()
    cfg = AdaptiveConfig(adaptive=True, delta=a.delta)
    ns = [*range(cfg.k_first, cfg.k_max, cfg.k_step), cfg.k_max]
    # the project's rule, as a table: its stop decision and its bucket (largest latent mass) at every state
    current = {}
    for n in ns:
        d = [decide(c, n, cfg) for c in range(n + 1)]
        current[n] = (np.array([x.stop for x in d]), np.array([BUCKETS.index(x.bucket) for x in d]))
    # the same cut the project uses on latent rates; the rule's bucket is judged against a k=10 run instead
    assert list(true_bucket(np.arange(11) / 10, EDGES)) == list(KB10)

    pops = {}
    for r in map(Path, a.real):
        if not (r / "kept").is_dir():
            print(f"skipped --real {r}: no kept/ folder", file=sys.stderr)
            continue
        name = r.resolve().parent.parent.name if r.resolve().parent.name == "stages" else r.resolve().parent.name
        pops[f"real: {name}"] = real_grid(r, a.grid)
    pops.update(shape_grids(a.grid))

    print(f"| population | k10 vs k10 | delta {a.delta}: samples | delta {a.delta}: agreement | "
          f"oracle optimum @ {a.budget:g} samples | gap | samples for parity |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, (p, w) in pops.items():
        S, A, Q = tables(p, w, cfg.k_max)
        k10k10 = float(w @ (Q**2).sum(1))  # two independent k=10 runs land in the same bucket
        cur_used, cur_agree = solve(S, A, ns, rule=current)
        hull = upper_hull([solve(S, A, ns, mu) for mu in np.geomspace(0.1, 0.001, a.mus)])
        best = at_samples(hull, a.budget)
        need = samples_for(hull, k10k10)
        need_s = f"<= {need:.2f}" if need == hull[0][0] else f"{need:.2f}"  # the cheapest rule swept already does
        print(f"| {name} | {k10k10:.4f} | {cur_used:.2f} | {cur_agree:.4f} | {best:.4f} | {best - k10k10:+.4f} | "
              f"{need_s} |")


if __name__ == "__main__":
    main()
