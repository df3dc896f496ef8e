"""Simulated difficulty estimation: fixed k=10 (Kimi k1.5) against the sequential rule of
``curate.difficulty.adaptive`` at several ``delta``, on true pass rates drawn from stated shapes and from real
scored runs. For each: samples per problem, and how often the bucket given equals the bucket of the true rate.

    python benchmarks/adaptive.py --problems 20000 --real runs/demo/stages/5_difficulty --plot docs/adaptive.png

The rule's other settings are its defaults (first round 4, then rounds of 2, at most 32, Jeffreys prior).

A real run's rows give true rates by drawing p ~ Beta(1/2 + correct, 1/2 + wrong) per row (the posterior of its
observed counts), so the simulated population has the run's spread without pretending its counts are exact.
"""

from __future__ import annotations

import argparse
import sys
from functools import cache
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from curate.difficulty.adaptive import BUCKETS, AdaptiveConfig, decide, observed_bucket

SHAPES = {
    "uniform": lambda rng, n: rng.uniform(0, 1, n),
    "u-shaped Beta(.3,.3)": lambda rng, n: rng.beta(0.3, 0.3, n),
    "mostly hard Beta(.5,3)": lambda rng, n: rng.beta(0.5, 3, n),
    "half never solved": lambda rng, n: np.where(rng.uniform(size=n) < 0.5, 0.0, rng.uniform(0, 1, n)),
}


def true_bucket(p: np.ndarray, edges) -> np.ndarray:
    """Index into BUCKETS of each true rate: the cut of ``observed_bucket`` (p < e0, then p <= e1, e2, e3, above)."""
    conds = [p < edges[0], p <= edges[1], p <= edges[2], p <= edges[3]]
    return np.select(conds, [0, 1, 2, 3], default=len(BUCKETS) - 1)


def fixed(p: np.ndarray, k: int, rng, edges) -> tuple[np.ndarray, float]:
    c = rng.binomial(k, p)
    return np.array([BUCKETS.index(observed_bucket(int(x), k, edges)) for x in c]), float(k)


def adaptive(p: np.ndarray, cfg: AdaptiveConfig, rng) -> tuple[np.ndarray, float]:
    @cache
    def d(c: int, n: int):
        return decide(c, n, cfg)

    # the i-th sample of problem j is u[j, i] < p[j]: the same draws whatever the stopping point
    u = rng.uniform(size=(len(p), cfg.k_max))
    hits = (u < p[:, None]).cumsum(axis=1)
    out = np.empty(len(p), dtype=int)
    used = np.empty(len(p), dtype=int)
    for j in range(len(p)):
        n = cfg.k_first
        while True:
            dec = d(int(hits[j, n - 1]), n)
            if dec.stop:
                break
            n += dec.more
        out[j], used[j] = BUCKETS.index(dec.bucket), n
    return out, float(used.mean())


def real_rates(folder: Path, n: int, rng) -> np.ndarray:
    """True rates for ``n`` problems drawn like the rows of a scored stage (see the module docstring)."""
    from curate.core.shards import read_table

    t = read_table(folder / "kept" if (folder / "kept").is_dir() else folder, columns=["n_correct", "k"])
    c, k = np.asarray(t["n_correct"].to_pylist()), np.asarray(t["k"].to_pylist())
    pick = rng.integers(0, len(c), n)
    return rng.beta(0.5 + c[pick], 0.5 + k[pick] - c[pick])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--problems", type=int, default=20000)
    ap.add_argument("--deltas", default="0.5,0.4,0.35,0.3,0.2")
    ap.add_argument("--k-max", type=int, default=32)
    ap.add_argument("--real", action="append", default=[], help="a scored difficulty stage (its pass counts)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", help="write the accuracy-vs-samples plot here")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    edges = AdaptiveConfig().edges
    pops = {name: f(rng, a.problems) for name, f in SHAPES.items()}
    for r in a.real:
        pops[f"real run: {Path(r).absolute().parent.parent.name}"] = real_rates(Path(r), a.problems, rng)
    deltas = [float(x) for x in a.deltas.split(",")]
    results: dict[str, list[tuple[str, float, float]]] = {}
    print(f"{a.problems:,} simulated problems per population; buckets on the true rate, edges {[round(e, 3) for e in edges]}")
    print(f"{'population':<34} {'rule':<22} {'samples/problem':>15} {'bucket accuracy':>15} {'agrees with k=10':>16}")
    for name, p in pops.items():
        truth = true_bucket(p, edges)
        other, _ = fixed(p, 10, rng, edges)  # an independent k=10 run: how often a rule lands in its bucket
        rows = []
        for k in (4, 10, 16):
            got, used = fixed(p, k, rng, edges)
            rows.append((f"fixed k={k}", used, float((got == truth).mean()), float((got == other).mean())))
        for dl in deltas:
            got, used = adaptive(p, AdaptiveConfig(adaptive=True, delta=dl, k_max=a.k_max), rng)
            rows.append((f"adaptive delta={dl}", used, float((got == truth).mean()), float((got == other).mean())))
        results[name] = rows
        for rule, used, acc, agree in rows:
            print(f"{name[:34]:<34} {rule:<22} {used:>15.2f} {acc:>15.3f} {agree:>16.3f}")
    if a.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for name, rows in results.items():
            fx = [r for r in rows if r[0].startswith("fixed")]
            ad = [r for r in rows if r[0].startswith("adaptive")]
            line = ax.plot([r[1] for r in ad], [r[2] for r in ad], "o-", label=f"{name[:30]} adaptive")[0]
            ax.plot([r[1] for r in fx], [r[2] for r in fx], "s--", color=line.get_color(), alpha=0.6)
        ax.set_xlabel("samples per problem (squares: fixed k = 4, 10, 16; dots: adaptive, delta "
                      + " .. ".join(map(str, (deltas[0], deltas[-1]))) + ")")
        ax.set_ylabel("bucket accuracy vs the true rate")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(a.plot, dpi=110)
        print(f"plot: {a.plot}")


if __name__ == "__main__":
    main()
