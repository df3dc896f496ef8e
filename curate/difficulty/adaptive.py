"""Sequential difficulty estimation: sample in rounds until a problem's bucket is known (pure logic, no engine).

Kimi k1.5's recipe spends ten samples on every problem. Here a problem gets ``k_first`` samples, then rounds of
``k_step`` more, and after each round the pass rate's posterior is updated: Beta(1/2 + correct, 1/2 + wrong)
(the Jeffreys prior). Sampling stops as soon as one bucket holds at least ``1 - delta`` of the posterior mass,
or at ``k_max`` samples.

Buckets are regions of the latent pass rate p, cut at ``edges`` (default 0.1, 1/3, 2/3, 0.9)::

    unsolved  p < 0.1        hard  0.1 <= p <= 1/3      medium  1/3 < p <= 2/3
    easy      2/3 < p <= 0.9                            solved  p > 0.9

With k = 10 the observed rate c/10 falls in exactly today's fixed-k buckets (0 -> unsolved, 1-3 hard, 4-6
medium, 7-9 easy, 10 solved), so exports and the curriculum read adaptive and fixed-k rows the same way.
An adaptive row's bucket is the one of largest posterior mass; its ``pass_rate`` is the observed rate.

``resample_ends``: a problem that ends its budget with no correct sample (or no wrong one) gets rounds of
``k_step`` more, up to ``k_max``, until the first success (or failure) shows: "rarely solved", which GRPO with
larger groups can still learn from, is told apart from "never solved in k_max".

    masses(0, 4)                          # four wrong: P(unsolved) = 0.66 < 0.9, so (delta 0.1) draw 4 more
    decide(0, 12, AdaptiveConfig(adaptive=True))   # twelve wrong: P(unsolved) = 0.89, still short of 0.9
"""

from __future__ import annotations

from dataclasses import dataclass, field

from curate.core.config import ConfigError

BUCKETS = ("unsolved", "hard", "medium", "easy", "solved")
PRIOR = (0.5, 0.5)  # Jeffreys
EDGES = (0.1, 1 / 3, 2 / 3, 0.9)  # latent pass-rate edges between BUCKETS (our choice; k=10 counts map onto them)
PRIORS = ("jeffreys", "store")
MIN_PRIOR_ROWS = 200  # store rows a fitted prior needs (our choice: at 200 the fitted bucket masses move < 0.03)


@dataclass(frozen=True)
class AdaptiveConfig:
    adaptive: bool = False  # sample in rounds until the bucket is known (off: fixed k, Kimi k1.5's recipe)
    k_first: int = 4  # adaptive: samples in the first round (our choice: four settle the clear cases)
    k_step: int = 2  # samples in each later round (adaptive, and resample_ends)
    k_max: int = 32  # most samples a problem gets (adaptive, and resample_ends)
    delta: float = 0.4  # adaptive: stop when one bucket holds >= 1 - delta of the posterior (simulated, README)
    edges: tuple[float, ...] = field(default=EDGES)  # latent pass-rate edges between the buckets
    resample_ends: bool = False  # a problem with 0 (or all) correct after its budget gets more, up to k_max
    # adaptive: the pass rate's prior. jeffreys: Beta(1/2, 1/2). store: an empirical-Bayes prior fitted on the
    # difficulty store's rows of other problems scored by the same model and settings (Jeffreys when
    # the store holds fewer than 200 of them), which calibrates the posterior (benchmarks/adaptive.py)
    prior: str = "jeffreys"

    def __post_init__(self) -> None:
        if self.k_first < 1 or self.k_step < 1:
            raise ConfigError("sequential: k_first and k_step must be >= 1")
        if self.k_max < self.k_first:
            raise ConfigError(f"sequential: k_max ({self.k_max}) must be >= k_first ({self.k_first})")
        if not 0 < self.delta < 1:
            raise ConfigError(f"sequential: delta must be in (0, 1), got {self.delta}")
        if self.prior not in PRIORS:
            raise ConfigError(f"sequential: prior must be one of {', '.join(PRIORS)}, not {self.prior!r}")
        e = tuple(self.edges)
        if len(e) != len(BUCKETS) - 1 or any(not 0 < x < 1 for x in e) or list(e) != sorted(set(e)):
            raise ConfigError(f"sequential: edges must be {len(BUCKETS) - 1} increasing rates in (0, 1), got {e}")

    @property
    def active(self) -> bool:
        return self.adaptive or self.resample_ends


def beta_cdf(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (mpmath, which sympy already brings)."""
    import mpmath

    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    return float(mpmath.betainc(a, b, 0, x, regularized=True))


def masses(correct: int, n: int, edges: tuple[float, ...] = EDGES,
           prior: tuple[float, float] = PRIOR) -> list[float]:
    """Posterior mass of each bucket after ``correct`` of ``n`` samples were right."""
    a, b = prior[0] + correct, prior[1] + n - correct
    cdf = [0.0, *(beta_cdf(x, a, b) for x in edges), 1.0]
    return [max(0.0, hi - lo) for lo, hi in zip(cdf, cdf[1:], strict=False)]


def observed_bucket(correct: int, n: int, edges: tuple[float, ...] = EDGES) -> str:
    """The bucket of the observed rate ``correct / n`` (how fixed-k rows are bucketed)."""
    p = correct / n
    if p < edges[0]:
        return BUCKETS[0]
    for name, hi in zip(BUCKETS[1:], edges[1:], strict=False):
        if p <= hi:
            return name
    return BUCKETS[-1]


@dataclass(frozen=True)
class Decision:
    stop: bool
    reason: str  # "decided" | "k_max" | "" (go on)
    bucket: str  # the bucket of largest posterior mass
    masses: tuple[float, ...]
    more: int  # samples of the next round when not stopping


def decide(correct: int, n: int, cfg: AdaptiveConfig, prior=None) -> Decision:
    """After ``correct`` of ``n`` samples: stop, or how many more to draw (never past ``k_max``). ``prior``: a fitted
    prior on the grid (``fit_prior``) instead of Jeffreys."""
    m = masses(correct, n, cfg.edges) if prior is None else grid_masses(correct, n, prior, cfg.edges)
    best = max(range(len(m)), key=m.__getitem__)
    if m[best] >= 1 - cfg.delta:
        return Decision(True, "decided", BUCKETS[best], tuple(m), 0)
    if n >= cfg.k_max:
        return Decision(True, "k_max", BUCKETS[best], tuple(m), 0)
    return Decision(False, "", BUCKETS[best], tuple(m), min(cfg.k_step, cfg.k_max - n))


def resample_more(correct: int, n: int, cfg: AdaptiveConfig) -> int:
    """``resample_ends``: more samples for a problem whose budget ended at an end (0 or all of ``n`` correct);
    0 once a sample left the end or at ``k_max``."""
    if not cfg.resample_ends or n >= cfg.k_max or 0 < correct < n:
        return 0
    return min(cfg.k_step, cfg.k_max - n)


def next_round(correct: int, n: int, base_k: int, cfg: AdaptiveConfig, prior=None) -> tuple[int, str, Decision | None]:
    """After ``correct`` of ``n`` samples: (more samples to draw, stopping reason, the adaptive decision).

    Fixed k (``base_k`` samples, then ``resample_ends``): reasons ``k``, ``left_end`` (a resampled problem showed
    its first success or failure) and ``k_max``. Adaptive: ``decided`` or ``k_max``, then ``resample_ends`` as
    above for a problem decided unsolved or solved with no sample off its end."""
    dec = None
    if cfg.adaptive:
        dec = decide(correct, n, cfg, prior)
        if not dec.stop:
            return dec.more, "", dec
        base_reason = dec.reason
    elif n < base_k:
        return base_k - n, "", None
    else:
        base_reason = "k"
    more = resample_more(correct, n, cfg)
    if more:
        return more, "", dec
    if cfg.resample_ends and n > (cfg.k_first if cfg.adaptive else base_k) and base_reason != "k_max":
        base_reason = "k_max" if (correct == 0 or correct == n) else "left_end"
    return 0, base_reason, dec


# ---- priors from what is known, and calibration (pure numpy) ---------------------------------------------
GRID_POINTS = 401  # pass rates 0, 1/400, ..., 1: each bucket edge resolved to 1/400 (0.1, 0.9 are grid points)


def grid(points: int = GRID_POINTS):
    import numpy as np

    return np.linspace(0.0, 1.0, points)


def jeffreys_on_grid(points: int = GRID_POINTS):
    """The Jeffreys prior's mass on each grid cell (cells centred on the points; the end points get their half cell)."""
    import numpy as np

    g = grid(points)
    cuts = np.r_[0.0, (g[1:] + g[:-1]) / 2, 1.0]
    cdf = (2 / np.pi) * np.arcsin(np.sqrt(cuts))  # Beta(1/2, 1/2)
    return np.diff(cdf)


def _log_lik(correct, n, g):
    """log p^c (1-p)^(n-c) on the grid ``g`` for each (c, n) pair (rows), with 0 log 0 = 0."""
    import numpy as np

    c, m = np.asarray(correct, float)[:, None], np.asarray(n, float)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(c > 0, c * np.log(g[None, :]), 0.0)
        b = np.where(m - c > 0, (m - c) * np.log1p(-g[None, :]), 0.0)
    return a + b


def fit_prior(correct, n, points: int = GRID_POINTS, iters: int = 100, smooth: float = 0.1):
    """An empirical-Bayes prior of the pass rate: the nonparametric maximum-likelihood mixing distribution on a grid
    (EM, Laird 1978) of the binomial counts ``correct`` of ``n``, mixed with ``smooth`` of the Jeffreys prior so that no
    rate the data did not rule out gets zero mass. EM starts from the uniform grid and stops after ``iters`` steps:
    run to convergence the NPMLE is a few point masses (four samples a problem identify four moments), whose
    posteriors are overconfident; 100 steps keep it smooth (both settings chosen on the simulator's populations).
    Fitted on other problems than those it is used on (the store's rows of other problems, or ``cross_fit_priors``),
    it is what the population of a run looks like, point masses at 0 and 1 included."""
    import numpy as np

    g = grid(points)
    pairs, weight = np.unique(np.stack([np.asarray(correct), np.asarray(n)], axis=1), axis=0, return_counts=True)
    ll = _log_lik(pairs[:, 0], pairs[:, 1], g)
    lik = np.exp(ll - ll.max(axis=1, keepdims=True))  # per (c, n), up to a constant that EM does not need
    share = weight / weight.sum()
    w = np.full(points, 1.0 / points)
    for _ in range(iters):
        post = lik * w[None, :]
        post /= post.sum(axis=1, keepdims=True)
        w = share @ post
    return (1 - smooth) * w + smooth * jeffreys_on_grid(points)


def cross_fit_priors(correct, n, folds: int = 2, seed: int = 0, **kw):
    """One fitted prior per problem, each fitted on the problems of the other folds (never on the problem itself)."""
    import numpy as np

    c, m = np.asarray(correct), np.asarray(n)
    fold = np.random.default_rng(seed).integers(0, folds, len(c))
    priors = {f: fit_prior(c[fold != f], m[fold != f], **kw) for f in range(folds)}
    return fold, priors


def grid_masses(correct: int, n: int, prior, edges: tuple[float, ...] = EDGES) -> list[float]:
    """Posterior mass of each bucket after ``correct`` of ``n`` under a prior on the grid (``fit_prior``); a grid point
    belongs to the bucket of the true-rate cut (``p < e0``, then ``p <= e1``, ``e2``, ``e3``, above)."""
    import numpy as np

    w = np.asarray(prior, float)
    g = grid(len(w))
    ll = _log_lik([correct], [n], g)[0]
    with np.errstate(divide="ignore"):
        lp = ll + np.log(w)
    post = np.exp(lp - lp.max())
    post /= post.sum()
    idx = np.select([g < edges[0], g <= edges[1], g <= edges[2], g <= edges[3]], [0, 1, 2, 3], default=len(BUCKETS) - 1)
    return np.bincount(idx, weights=post, minlength=len(BUCKETS)).tolist()


def calibration_error(confidence, hit, bins: int = 10) -> float:
    """Expected calibration error: the mean over equal-width confidence bins of |share right - mean confidence|,
    weighted by the bin's share of the problems (top-label: the bucket given and the mass it was given)."""
    import numpy as np

    conf, ok = np.asarray(confidence, float), np.asarray(hit, float)
    b = np.minimum((conf * bins).astype(int), bins - 1)
    err = 0.0
    for k in range(bins):
        sel = b == k
        if sel.any():
            err += sel.mean() * abs(ok[sel].mean() - conf[sel].mean())
    return float(err)


# ---- the stopping rule simulated on known rates (pure numpy): benchmarks/adaptive.py and a run's reliability check
def true_bucket(p, edges: tuple[float, ...] = EDGES):
    """Index into BUCKETS of each true rate: the cut of ``observed_bucket`` (p < e0, then p <= e1, e2, e3, above)."""
    import numpy as np

    conds = [p < edges[0], p <= edges[1], p <= edges[2], p <= edges[3]]
    return np.select(conds, [0, 1, 2, 3], default=len(BUCKETS) - 1)


def rule_tables(cfg: AdaptiveConfig, prior=None):
    """For every (correct, n) the rule can see: stop?, the bucket given (its index), and the mass it was given. The rule
    is memoryless, ``resample_ends`` included: a decided problem with no sample off its end draws on (``next_round``)."""
    import numpy as np

    stop = np.zeros((cfg.k_max + 1, cfg.k_max + 1), bool)
    bucket = np.zeros_like(stop, dtype=int)
    conf = np.zeros(stop.shape)
    for n in range(cfg.k_first, cfg.k_max + 1):
        for c in range(n + 1):
            dec = decide(c, n, cfg, prior)
            stop[c, n], bucket[c, n] = dec.stop and not resample_more(c, n, cfg), BUCKETS.index(dec.bucket)
            conf[c, n] = max(dec.masses)
    return stop, bucket, conf


def simulate_rule(p, cfg: AdaptiveConfig, rng, priors=None, fold=None, u=None, counts: bool = False):
    """(buckets given, mean samples, the mass each bucket was given) of the sequential rule on true rates ``p``; with
    ``counts``, each problem's (correct, samples) at its stop as well.

    ``priors``: Jeffreys (None), one prior for every problem, or one per fold (``fold``: each problem's fold, its
    prior fitted on the other folds). ``u``: the uniforms that decide each sample (the i-th sample of problem j is
    ``u[j, i] < p[j]``), shared across rules so that they see the same draws."""
    import numpy as np

    u = rng.uniform(size=(len(p), cfg.k_max)) if u is None else u
    hits = np.c_[np.zeros(len(p), int), (u < p[:, None]).cumsum(axis=1)]  # hits[j, n]: correct in the first n
    if priors is None or not isinstance(priors, dict):
        groups = {0: (np.arange(len(p)), rule_tables(cfg, priors))}
    else:
        groups = {f: (np.flatnonzero(fold == f), rule_tables(cfg, w)) for f, w in priors.items()}
    out, used, conf = np.empty(len(p), int), np.empty(len(p), int), np.empty(len(p))
    got = np.empty(len(p), int)
    for idx, (stop, bucket, mass) in groups.values():
        n = np.full(len(idx), cfg.k_first)
        live = np.ones(len(idx), bool)
        while live.any():
            c = hits[idx, n]
            done = live & stop[c, n]
            out[idx[done]], conf[idx[done]], used[idx[done]] = bucket[c[done], n[done]], mass[c[done], n[done]], n[done]
            got[idx[done]] = c[done]
            live &= ~done
            n = np.where(live, np.minimum(n + cfg.k_step, cfg.k_max), n)
    if counts:
        return out, float(used.mean()), conf, (got, used)
    return out, float(used.mean()), conf


RELIABILITY_PROBLEMS = 20_000  # simulated problems of a run's reliability check (accuracy to about 0.003)


def reliability_check(correct, n, cfg: AdaptiveConfig, prior=None, problems: int = RELIABILITY_PROBLEMS,
                      seed: int = 0, bins: int = 10) -> dict:
    """How far a run's stored bucket masses can be read as probabilities, on a model of its own problems: pass rates
    drawn from the population fitted to the run's counts (``fit_prior``: NPMLE, smoothed) are run through the run's
    stopping rule with the run's prior (None: Jeffreys), and the mass each simulated problem's bucket was given is
    set against how often that bucket is the true one, per equal-width mass bin (a reliability diagram), with the
    expected calibration error. Model-based: it holds as far as the fitted population is the run's."""
    import numpy as np

    rng = np.random.default_rng(seed)
    w = fit_prior(correct, n)
    p = rng.choice(grid(len(w)), size=problems, p=w / w.sum())
    given, samples, conf = simulate_rule(p, cfg, rng, prior)
    hit = given == true_bucket(p, cfg.edges)
    b = np.minimum((conf * bins).astype(int), bins - 1)
    rows = [{"bin": [k / bins, (k + 1) / bins], "problems": int((b == k).sum()),
             "mean_mass": round(float(conf[b == k].mean()), 4), "share_right": round(float(hit[b == k].mean()), 4)}
            for k in range(bins) if (b == k).any()]
    return {"problems": problems, "seed": seed, "fitted_on_rows": int(len(np.asarray(correct))),
            "ece": round(calibration_error(conf, hit, bins), 4), "accuracy": round(float(hit.mean()), 4),
            "mean_samples": round(samples, 3), "bins": rows}
