"""Simulated difficulty estimation: fixed k (Kimi k1.5's k=10) against the sequential rule of
``curate.difficulty.adaptive`` at several ``delta``, with four priors, on true pass rates drawn from stated shapes
and from real scored runs. For each rule: samples per problem, bucket accuracy against the true bucket and against a
k=64 reference run, and the expected calibration error (ECE) of the posterior mass the rule gave its bucket. For the
Jeffreys rule, also the accuracy of the bucket users receive: the one ``gradus export`` gives the stored rows (the
estimator's decided bucket), beside what bucketing them by their counts would give.

    python benchmarks/adaptive.py --real runs/demo/stages/5_difficulty --json benchmarks/results/adaptive_sim.json

Priors (``FAMILIES``): ``jeffreys`` (today's rule, Beta(1/2, 1/2)); ``fitted`` (an empirical-Bayes prior fitted on
the first rounds of the run's own problems, cross-fitted in two folds: a problem never informs its own prior);
``store`` (fitted on the difficulty store's fixed-k rows of *other* problems of the same population: 5,000 rows at
k=10 by default); ``oracle`` (the same rule with the population itself as its prior: a reference, not the optimal
stopping rule). The rule's other settings are its defaults (first round 4, then rounds of 2, at most 32).
60,000 problems per population put each accuracy within about 0.002 (one standard error).

A real run's rows give true rates by drawing p ~ Beta(1/2 + correct, 1/2 + wrong) per row (the posterior of its
observed counts), so the simulated population has the run's spread without pretending its counts are exact.
"""

from __future__ import annotations

import argparse
import json
from functools import partial
from pathlib import Path

import numpy as np

from curate.difficulty.adaptive import (
    BUCKETS,
    AdaptiveConfig,
    calibration_error,
    cross_fit_priors,
    fit_prior,
    grid,
    observed_bucket,
    true_bucket,
)
from curate.difficulty.adaptive import simulate_rule as adaptive

SHAPES = {
    "uniform": lambda rng, n: rng.uniform(0, 1, n),
    "u-shaped Beta(.3,.3)": lambda rng, n: rng.beta(0.3, 0.3, n),
    "mostly hard Beta(.5,3)": lambda rng, n: rng.beta(0.5, 3, n),
    "half never solved": lambda rng, n: np.where(rng.uniform(size=n) < 0.5, 0.0, rng.uniform(0, 1, n)),
}


# jeffreys: today's rule; fitted: the empirical-Bayes prior of the run's own first rounds, cross-fitted; store: the
# prior fitted on the store's fixed-k rows of other problems; oracle: the rule with the population as its prior
FAMILIES = ("jeffreys", "fitted", "store", "oracle")


def exported(c: np.ndarray, n: np.ndarray) -> np.ndarray:
    """The bucket ``gradus export`` gives rows stored with ``c`` of ``n`` correct and their Jeffreys bucket masses (as
    the estimator stores them), as indices into BUCKETS: through the export's own ``assign_buckets``."""
    import pyarrow as pa

    from curate.difficulty.adaptive import masses
    from curate.select.curriculum import assign_buckets

    pairs = sorted(set(zip(c.tolist(), n.tolist(), strict=True)))
    t = pa.table({"n_correct": [x for x, _ in pairs], "n_graded": [y for _, y in pairs], "k": [y for _, y in pairs],
                  "pass_rate": [x / y for x, y in pairs], "id": [str(i) for i in range(len(pairs))],
                  "bucket_masses": [masses(x, y) for x, y in pairs]})
    index = {pair: BUCKETS.index(b) for pair, b in zip(pairs, assign_buckets(t).to_pylist(), strict=True)}
    return np.array([index[pair] for pair in zip(c.tolist(), n.tolist(), strict=True)])


def fixed(p: np.ndarray, k: int, rng, edges) -> tuple[np.ndarray, float]:
    c = rng.binomial(k, p)
    return np.array([BUCKETS.index(observed_bucket(int(x), k, edges)) for x in c]), float(k)


def first_round_priors(p: np.ndarray, cfg: AdaptiveConfig, u: np.ndarray, seed: int):
    """The empirical-Bayes prior, cross-fitted: each problem's prior is fitted on the first rounds (``k_first``
    samples) of the problems of the other fold, never on its own."""
    c = (u[:, : cfg.k_first] < p[:, None]).sum(axis=1)
    return cross_fit_priors(c, np.full(len(p), cfg.k_first), folds=2, seed=seed)


def posterior_draws(c: np.ndarray, k: np.ndarray, rng, n: int) -> np.ndarray:
    """True rates drawn like the rows of a run: a row at random, then p ~ Beta(1/2 + correct, 1/2 + wrong)."""
    i = rng.integers(0, len(c), n)
    return rng.beta(0.5 + c[i], 0.5 + k[i] - c[i])


def real_counts(folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """The pass counts and sample counts of a scored stage's rows."""
    from curate.core.shards import read_table

    t = read_table(folder / "kept" if (folder / "kept").is_dir() else folder, columns=["n_correct", "k"])
    return np.asarray(t["n_correct"].to_pylist()), np.asarray(t["k"].to_pylist())


def oracle_prior(draw, points: int, rng, n: int = 1_000_000) -> np.ndarray:
    """The population's own distribution on the grid (each of ``n`` fresh draws to its nearest grid point): the
    prior a rule that knew the population would use."""
    w = np.bincount(np.rint(draw(rng, n) * (points - 1)).astype(int), minlength=points).astype(float)
    return w / w.sum()


def at_budget(rows: list[dict], samples: float) -> float:
    """A rule family's accuracy at a mean budget, interpolated along its (samples, accuracy) curve."""
    pts = sorted((r["samples"], r["accuracy"]) for r in rows)
    return float(np.interp(samples, [x for x, _ in pts], [y for _, y in pts]))


def to_parity(rows: list[dict], target: float) -> float | None:
    """The mean budget at which a rule family first reaches ``target`` accuracy (interpolated; None: never)."""
    pts = sorted((r["samples"], r["accuracy"]) for r in rows)
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if y0 < target <= y1:
            return x0 + (x1 - x0) * (target - y0) / (y1 - y0)
    return pts[0][0] if pts and pts[0][1] >= target else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=60000, help="per population (60,000: accuracy to about 0.002)")
    ap.add_argument("--deltas", default="0.5,0.45,0.4,0.35,0.3,0.25,0.2")
    ap.add_argument("--k-max", type=int, default=32)
    ap.add_argument("--real", action="append", default=[], help="a scored difficulty stage (its pass counts)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--store-rows", type=int, default=5000, help="the store's rows of other problems (family store)")
    ap.add_argument("--store-k", type=int, default=10, help="samples per stored row")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--plot", help="write the accuracy-vs-samples plot here")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    base = AdaptiveConfig(adaptive=True, k_max=a.k_max)
    points = len(grid())
    draws = dict(SHAPES)
    for r in a.real:
        where = Path(r).absolute()
        name = where.parent.parent.name if where.parent.name == "stages" else where.parent.name
        c, k = real_counts(Path(r))
        draws[f"real run {name}: per-row posteriors"] = partial(posterior_draws, c, k)
    deltas = [float(x) for x in a.deltas.split(",")]
    edges = base.edges
    results: dict[str, dict] = {}
    print(f"{a.problems:,} simulated problems per population; buckets on the true rate, edges {[round(e, 3) for e in edges]}")
    print(f"{'population':<40} {'rule':<28} {'samples':>8} {'vs truth':>9} {'vs k=64':>8} {'ECE':>6}")
    for name, draw in draws.items():
        p = draw(rng, a.problems)
        truth = true_bucket(p, edges)
        ref, _ = fixed(p, 64, rng, edges)
        u = rng.uniform(size=(len(p), a.k_max))
        rows: list[dict] = []
        for k in (4, 10, 16):
            got, used = fixed(p, k, rng, edges)
            rows.append({"rule": f"fixed k={k}", "family": "fixed", "samples": used,
                         "accuracy": float((got == truth).mean()), "vs_k64": float((got == ref).mean()), "ece": None})
        fold, fitted = first_round_priors(p, base, u, a.seed)
        # the store's rows of the same model and settings: fixed-k counts of other problems of the population
        other = draw(np.random.default_rng(a.seed + 2), a.store_rows)
        stored = fit_prior(np.random.default_rng(a.seed + 3).binomial(a.store_k, other), np.full(a.store_rows, a.store_k))
        oracle = oracle_prior(draw, points, np.random.default_rng(a.seed + 1))
        for family, priors in (("jeffreys", None), ("fitted", fitted), ("store", stored), ("oracle", oracle)):
            for dl in deltas:
                cfg = AdaptiveConfig(adaptive=True, delta=dl, k_max=a.k_max)
                got, used, conf, (c, n) = adaptive(p, cfg, rng, priors, fold, u, counts=True)
                row = {"rule": f"{family} delta={dl}", "family": family, "samples": used,
                       "accuracy": float((got == truth).mean()), "vs_k64": float((got == ref).mean()),
                       "ece": calibration_error(conf, got == truth)}
                if family == "jeffreys":  # what a user receives: the bucket an export gives the stored row
                    row["exported_accuracy"] = float((exported(c, n) == truth).mean())
                    by_counts = np.array([BUCKETS.index(observed_bucket(int(x), int(y), edges))
                                          for x, y in zip(c, n, strict=True)])
                    row["by_counts_accuracy"] = float((by_counts == truth).mean())  # how exports bucketed them before
                rows.append(row)
        fam = {f: [r for r in rows if r["family"] == f] for f in FAMILIES}
        k10 = next(r for r in rows if r["rule"] == "fixed k=10")
        j04 = next(r for r in fam["jeffreys"] if r["rule"] == "jeffreys delta=0.4")
        budget = j04["samples"]
        acc = {f: at_budget(v, budget) for f, v in fam.items()}
        gap = acc["oracle"] - acc["jeffreys"]
        summary = {"budget": budget, "accuracy_at_budget": acc,
                   "gap_closed": {f: (acc[f] - acc["jeffreys"]) / gap if gap > 0.003 else None
                                  for f in ("fitted", "store")},
                   "samples_to_parity": {f: to_parity(v, k10["accuracy"] - 0.005) for f, v in fam.items()},
                   "best_within_7": {f: max((r["accuracy"] for r in v if r["samples"] <= 7.0), default=None)
                                     for f, v in fam.items()},
                   "fixed_k10": k10["accuracy"],
                   "ece_max": {f: max(r["ece"] for r in v) for f, v in fam.items()}}
        results[name] = {"rows": rows, "summary": summary}
        for r in rows:
            ece = f"{r['ece']:.3f}" if r["ece"] is not None else ""
            exp = (f"  exported {r['exported_accuracy']:.3f} (by counts {r['by_counts_accuracy']:.3f})"
                   if "exported_accuracy" in r else "")
            print(f"{name[:40]:<40} {r['rule']:<28} {r['samples']:>8.2f} {r['accuracy']:>9.3f} {r['vs_k64']:>8.3f} {ece:>6}{exp}")
        par = {f: (f"{v:.2f}" if v is not None else "never") for f, v in summary["samples_to_parity"].items()}
        closed = {f: (f"{v:.0%}" if v is not None else "no gap") for f, v in summary["gap_closed"].items()}
        print(f"  at {budget:.2f} samples (Jeffreys delta 0.4): " + ", ".join(f"{f} {v:.3f}" for f, v in acc.items())
              + f"; gap to the oracle closed: {closed}; samples to k=10's accuracy - 0.005 "
              f"({k10['accuracy'] - 0.005:.3f}): {par}; largest ECE: "
              + ", ".join(f"{f} {v:.3f}" for f, v in summary["ece_max"].items()))
    if a.json:
        Path(a.json).write_text(json.dumps({"problems": a.problems, "seed": a.seed, "k_max": a.k_max,
                                            "populations": results}, indent=1))
        print(f"figures: {a.json}")
    if a.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        n = len(results)
        cols = min(3, n)
        fig, axes = plt.subplots((n + cols - 1) // cols, cols, figsize=(4 * cols, 3.2 * ((n + cols - 1) // cols)),
                                 squeeze=False)
        styles = {"fixed": ("s--", "grey"), "jeffreys": ("o-", "C0"), "fitted": ("^-", "C2"), "store": ("v-", "C3"),
                  "oracle": (":", "black")}
        for ax, (name, res) in zip(axes.flat, results.items(), strict=False):
            for fam, (style, color) in styles.items():
                pts = sorted((r["samples"], r["accuracy"]) for r in res["rows"] if r["family"] == fam)
                label = {"fixed": "fixed k = 4, 10, 16", "fitted": "fitted (first rounds)", "store": "store prior"}.get(fam, fam)
                ax.plot([x for x, _ in pts], [y for _, y in pts], style, color=color, ms=4, label=label)
            ax.set_title(name[:45], fontsize=9)
            ax.set_xlabel("samples per problem", fontsize=8)
            ax.set_ylabel("bucket accuracy vs truth", fontsize=8)
            ax.tick_params(labelsize=7)
        for ax in list(axes.flat)[n:]:
            ax.axis("off")
        axes.flat[0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)
        print(f"plot: {a.plot}")


if __name__ == "__main__":
    main()
