"""The trainer's default prompt sampler: draw the prompts whose groups will carry a learning signal.

A GRPO group of G completions teaches nothing when all G rewards are equal: every advantage is zero, and
DAPO's dynamic sampling throws the group away. What a group is worth depends on the prompt's pass rate *under
the current policy*, p: it survives the filter with probability ``1 - p^G - (1 - p)^G`` and its reward
variance is ``p (1 - p)``. Every measured gain in prompt selection for RL on reasoning comes from drawing
near p = 1/2, online (DAPO's dynamic sampling; Bae et al. 2025, arXiv:2504.03380; Foster & Foerster 2025,
"Learning to Reason at the Frontier of Learnability"; GRESO, arXiv:2506.02177; MoPPS, arXiv:2507.04632).
This sampler starts from what the curation already knows, each row's offline difficulty estimate, and learns
the rest from the trainer's own rollouts.

The model is item response theory's two-parameter logistic, with the policy as the one moving part: prompt i
has a difficulty ``x_i`` and the policy an ability ``theta`` and a sharpness ``beta``; the pass rate is

    p_i = sigmoid(beta (theta - x_i)).

At the start theta = 0 and beta = 1, so ``-x_i`` is the prompt's log-odds of passing then.

- **prior**: the offline estimate, ``n_correct`` of ``k`` samples, discounted to be worth at most
  ``prior_strength`` samples: ``x_i`` is Gaussian with the mean and variance of ``-logit(p)`` under
  ``Beta(1 + w n_correct, 1 + w (k - n_correct))``, ``w = min(1, prior_strength / k)``. It was measured on
  the starting policy, often at another temperature or template: a hint, not a verdict. Rows without an
  estimate start at the log-odds moments of Beta(1, 1) (mean 0, variance pi^2 / 3).
- **update**: every graded group the trainer generates, kept or dropped, updates its prompt's difficulty
  (Laplace's approximation: the posterior's mode by Newton's method, its curvature there).
- **drift**: the policy moves for every prompt at once. A small model first learns to write a boxed answer,
  which lifts every pass rate (theta grows); then its entropy collapses and pass rates go to 0 or 1 (beta
  grows). ``(theta, log beta)`` follow a random walk of ``drift_sd`` per step, filtered after each round of
  groups on what the beliefs predicted for them (Laplace again, with a prompt's own uncertainty folded in by
  the probit approximation).
- **forgetting**: a prompt's own pass rate also moves (most of all when it is trained on): each step widens
  every difficulty's variance by ``forget_sd^2``, so a prompt that was confidently solved or unsolved becomes
  uncertain again and is revisited.

A batch is drawn by Thompson sampling: for every prompt one draw of its difficulty, the pass rate it gives at
the current (theta, beta), and the learning signal a group of G would carry there (``survival``: ``1 - p^G -
(1 - p)^G``; or ``variance``: ``p (1 - p)``); the ``n`` best form the batch, no prompt twice in a step. Uncertain
prompts draw widely and are explored; prompts confidently at 0 or 1 score near 0 and are skipped until their
evidence fades; every prompt of the pool stays eligible. A refill of dynamic sampling takes prompts in that
order only until the groups they are expected to keep reach the groups still missing, instead of a whole batch.

The whole state (the beliefs, the policy's (theta, beta) and its covariance, the step, the RNG) is a JSON-able
dict saved in each checkpoint: a resumed run draws exactly the prompts an uninterrupted one draws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rl_stage.data import DataError, Prompt, find_stages, load_rows

GROUP_SIGNALS = ("survival", "variance")


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-9, 1 - 1e-9)
    return np.log(p) - np.log1p(-p)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def digamma(x: np.ndarray) -> np.ndarray:
    """psi(x) for x > 0: the recurrence up to x >= 10, then the asymptotic series (error below 1e-12)."""
    x = np.array(x, dtype=np.float64, copy=True)
    out = np.zeros_like(x)
    while (small := x < 10).any():
        out[small] -= 1.0 / x[small]
        x[small] += 1.0
    r = 1.0 / (x * x)
    return out + np.log(x) - 0.5 / x - r * (1 / 12 - r * (1 / 120 - r * (1 / 252 - r * (1 / 240 - r / 132))))


def trigamma(x: np.ndarray) -> np.ndarray:
    """psi'(x) for x > 0, the same way."""
    x = np.array(x, dtype=np.float64, copy=True)
    out = np.zeros_like(x)
    while (small := x < 10).any():
        out[small] += 1.0 / (x[small] * x[small])
        x[small] += 1.0
    r = 1.0 / (x * x)
    return out + 1.0 / x + r / 2 + (1.0 / x) * r * (1 / 6 - r * (1 / 30 - r * (1 / 42 - r / 30)))


_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(32)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()


def expect(f, mu: np.ndarray, var: np.ndarray) -> np.ndarray:
    """E[f(sigmoid(eta))] for eta ~ N(mu, var), by 32-point Gauss-Hermite quadrature, for each (mu, var)."""
    eta = np.asarray(mu, dtype=np.float64)[:, None] + np.sqrt(np.asarray(var, dtype=np.float64))[:, None] * _NODES
    return f(_sigmoid(eta)) @ _WEIGHTS


def group_signal(p: np.ndarray, group_size: int, signal: str = "survival") -> np.ndarray:
    """The learning signal a group of ``group_size`` carries at pass rate ``p``: the chance that its rewards are not
    all equal (``survival``), or the reward variance ``p (1 - p)`` (``variance``)."""
    p = np.asarray(p, dtype=np.float64)
    if signal == "survival":
        return 1.0 - p**group_size - (1.0 - p) ** group_size
    if signal == "variance":
        return p * (1.0 - p)
    raise DataError(f"sampler signal must be one of {', '.join(GROUP_SIGNALS)}, not {signal!r}")


def offline_prior(n_correct: np.ndarray, k: np.ndarray, strength: float) -> tuple[np.ndarray, np.ndarray]:
    """The log-odds prior (mean, variance) of offline counts worth at most ``strength`` samples: the moments of
    logit(p) under Beta(1 + w n_correct, 1 + w (k - n_correct)), w = min(1, strength / k) (k = 0: Beta(1, 1))."""
    n_correct = np.asarray(n_correct, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    w = np.where(k > 0, np.minimum(1.0, strength / np.maximum(k, 1e-12)), 0.0)
    a, b = 1.0 + w * n_correct, 1.0 + w * (k - n_correct)
    return digamma(a) - digamma(b), trigamma(a) + trigamma(b)


FLAT_VAR = float(np.pi**2 / 3)  # the variance of logit(p) for p ~ Beta(1, 1)
MAX_VAR = 25.0  # log-odds variance at which a belief stops widening (sd 5: nearly all mass at 0 or 1)


def difficulty_update(m: np.ndarray, s: np.ndarray, theta: float, beta: float, c: np.ndarray,
                      n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The Gaussian nearest the posterior of a difficulty x ~ N(m, s) after ``c`` of ``n`` right at pass rate
    sigmoid(beta (theta - x)): its mode by Newton's method and the inverse curvature there (Laplace)."""
    x = np.array(m, dtype=np.float64, copy=True)
    for _ in range(100):
        q = _sigmoid(beta * (theta - x))
        g = -(x - m) / s - beta * (c - n * q)
        h = -1.0 / s - beta * beta * n * q * (1.0 - q)
        step = g / h
        x -= np.clip(step, -2.0, 2.0)
        if np.all(np.abs(step) < 1e-12):
            break
    q = _sigmoid(beta * (theta - x))
    return x, 1.0 / (1.0 / s + beta * beta * n * q * (1.0 - q))


class SignalSampler:
    """Thompson draws on per-prompt difficulty beliefs, scored by a group's learning signal (module docstring)."""

    def __init__(self, paths: Sequence[str | Path], group_size: int, seed: int = 0, prior_strength: float = 4.0,
                 forget_sd: float = 0.1, drift_sd: float = 0.2, signal: str = "survival", use_prior: bool = True,
                 sharpen_sd: float = 0.1):
        if signal not in GROUP_SIGNALS:
            raise DataError(f"sampler signal must be one of {', '.join(GROUP_SIGNALS)}, not {signal!r}")
        if prior_strength < 0 or drift_sd < 0 or forget_sd < 0:
            raise DataError("sampler prior_strength, forget_sd and drift_sd must be >= 0")
        self.stages = [("pool", [f for _, fs in find_stages(paths) for f in fs])]
        self.rows = load_rows(self.stages[0][1])
        self.group_size, self.signal = group_size, signal
        self.prior_strength, self.forget_sd, self.drift_sd, self.sharpen_sd = prior_strength, forget_sd, drift_sd, sharpen_sd
        n = len(self.rows["id"])
        k = np.asarray(self.rows["k"], dtype=np.float64)
        self.prior_mean = np.where(k > 0, np.asarray(self.rows["n_correct"]) / np.maximum(1, k), np.nan)
        mu, self.var = offline_prior(self.rows["n_correct"], k if use_prior else np.zeros(n), prior_strength)
        self.x = -mu  # difficulty: minus the log-odds of passing at the start
        self.t_ref = np.zeros(n)  # the step each belief was last brought up to date
        self.policy = np.zeros(2)  # (theta, log beta)
        self.policy_cov = np.zeros((2, 2))
        self.policy_t = -1  # the step at which (theta, beta) was last filtered
        self.t = 0
        self.drawn: list[int] = []  # prompts drawn in the current step (not drawn again before end_step)
        self.rng = np.random.default_rng(seed)

    # ---- the interface the trainer uses (shared with rl_stage.samplers.CurriculumSampler) ---------------------
    @property
    def size(self) -> int:
        return len(self.rows["id"])

    @property
    def stage_name(self) -> str:
        return "pool"

    @property
    def stage(self) -> int:
        return 0

    def end_step(self) -> bool:
        self.t += 1
        self.drawn = []
        return False

    # ---- the belief ----------------------------------------------------------------------------------
    @property
    def theta(self) -> float:
        return float(self.policy[0])

    @property
    def beta(self) -> float:
        return float(math.exp(self.policy[1]))

    def difficulty(self, idx: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the prompts' difficulties now: each variance widened by ``forget_sd^2`` a step since
        its belief was brought up to date (at most to ``MAX_VAR``)."""
        idx = np.arange(self.size) if idx is None else np.asarray(idx, dtype=np.int64)
        s = self.var[idx]
        return self.x[idx], np.maximum(s, np.minimum(MAX_VAR, s + self.forget_sd**2 * (self.t - self.t_ref[idx])))

    def current(self, idx: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the prompts' log-odds of passing now, beta (theta - x)."""
        m, s = self.difficulty(idx)
        return self.beta * (self.theta - m), self.beta**2 * s

    def mean(self, idx: np.ndarray | None = None) -> np.ndarray:
        """The expected pass rates now."""
        mu, var = self.current(idx)
        return expect(lambda p: p, mu, var)

    def survival(self, mu: np.ndarray, var: np.ndarray) -> np.ndarray:
        """The chance that a group of G is not all equal, under log-odds beliefs N(mu, var)."""
        return expect(lambda p: group_signal(p, self.group_size, "survival"), mu, var)

    def observe(self, results: Sequence[tuple[int, int, int]]) -> None:
        """One round of graded groups, ``(row index, n_correct, n_graded)`` each: the policy's (theta, beta) is filtered
        on what the beliefs predicted for them, then each difficulty takes its group."""
        if not results:
            return
        idx = np.array([i for i, _, _ in results], dtype=np.int64)
        c = np.array([x for _, x, _ in results], dtype=np.float64)
        n = np.array([x for _, _, x in results], dtype=np.float64)
        if self.drift_sd > 0:
            m, s = self.difficulty(idx)
            self.policy, self.policy_cov = self._filter_policy(m, s, c, n)
        for j, i in enumerate(idx.tolist()):  # one at a time: a prompt twice in a round builds on its first group
            m, s = self.difficulty(np.array([i]))
            m, s = difficulty_update(m, s, self.theta, self.beta, c[j : j + 1], n[j : j + 1])
            self.x[i], self.var[i], self.t_ref[i] = m[0], s[0], self.t

    def _filter_policy(self, m: np.ndarray, s: np.ndarray, c: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mode and covariance of (theta, log beta) after one round (Laplace; Fisher scoring): the random walk
        N(previous, covariance + drift_sd^2 I) times each group's binomial likelihood at sigmoid(k beta (theta - m)),
        k = 1 / sqrt(1 + pi beta^2 s / 8) folding the prompt's own uncertainty in (the probit approximation)."""
        prior = self.policy.copy()
        steps = self.t - self.policy_t  # the policy moves between steps, not between the rounds of one step
        self.policy_t = self.t
        cov = self.policy_cov + steps * np.diag([self.drift_sd**2, self.sharpen_sd**2])
        if not cov.any():  # drift_sd 0 at the first round: the policy is the starting one
            return self.policy, self.policy_cov
        p_inv = np.linalg.inv(cov + 1e-10 * np.eye(2))
        z = prior.copy()
        info = p_inv
        for _ in range(100):
            theta, beta = z[0], math.exp(z[1])
            k = 1.0 / np.sqrt(1.0 + np.pi * beta * beta * s / 8.0)
            u = k * beta * (theta - m)
            q = _sigmoid(u)
            r, w = c - n * q, n * q * (1.0 - q)
            du = np.stack([k * beta, u * k * k])  # d u / d theta, d u / d log beta
            g = du @ r - p_inv @ (z - prior)
            info = (du * w) @ du.T + p_inv
            step = np.linalg.solve(info, g)
            step *= min(1.0, 1.0 / max(1e-12, float(np.abs(step).max())))  # at most 1 in either a step
            z = z + step
            if float(np.abs(step).max()) < 1e-12:
                break
        return z, np.linalg.inv(info)

    # ---- drawing -------------------------------------------------------------------------------------
    def scores(self, draws: np.ndarray) -> np.ndarray:
        return group_signal(draws, self.group_size, self.signal)

    def sample(self, n: int, need: float | None = None, exclude: Sequence[int] = ()) -> list[Prompt]:
        """At most ``n`` distinct prompts not yet drawn this step nor in ``exclude`` (row indices), by Thompson
        sampling (module docstring).

        ``need``: the groups with a learning signal still wanted in this step (dynamic sampling's refill). The
        prompts are taken in score order until the groups they are expected to keep (the sum of each one's
        chance that its group survives the filter, ``survival``) reach ``need``, so a refill does not generate a
        whole batch for one missing group. None: ``n`` prompts."""
        free = np.ones(self.size, dtype=bool)
        free[self.drawn] = False
        free[list(exclude)] = False
        cand = np.flatnonzero(free)
        n = min(n, len(cand))
        if n == 0:
            return []
        mu, var = self.current(cand)
        x = _sigmoid(mu + np.sqrt(var) * self.rng.standard_normal(len(cand)))
        s = self.scores(x)
        # the n best scores; ties (equal scores) broken by the draw order of a random permutation
        tie = self.rng.permutation(len(cand))
        order = np.lexsort((tie, -s))[:n]
        if need is not None and need < n:
            expected = np.cumsum(self.survival(mu[order], var[order]))
            order = order[: int(np.searchsorted(expected, need - 1e-9)) + 1]
        chosen = cand[order]
        self.drawn += chosen.tolist()
        means = expect(lambda p: p, mu[order], var[order])
        return [self._prompt(int(i), float(m)) for i, m in zip(chosen, means, strict=True)]

    def _prompt(self, i: int, expected: float) -> Prompt:
        r = self.rows
        prior = self.prior_mean[i]
        return Prompt(r["id"][i], r["problem"][i], r["answer"][i], index=i, bucket=r["bucket"][i],
                      prior=None if math.isnan(prior) else float(prior), expected=expected)

    # ---- state ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"kind": "signal", "size": self.size, "t": self.t, "drawn": list(self.drawn), "x": self.x.tolist(),
                "var": self.var.tolist(), "t_ref": self.t_ref.tolist(), "policy": self.policy.tolist(),
                "policy_cov": self.policy_cov.tolist(), "policy_t": self.policy_t, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, st: dict) -> None:
        if st.get("kind") != "signal" or st.get("size") != self.size:
            raise DataError(f"the checkpoint's sampler state is not this run's (a {st.get('kind', 'curriculum')} sampler "
                            f"over {st.get('size', '?')} prompts; this run: signal over {self.size})")
        self.t = st["t"]
        self.drawn = list(st["drawn"])
        self.x, self.var = np.array(st["x"], dtype=np.float64), np.array(st["var"], dtype=np.float64)
        self.t_ref = np.array(st["t_ref"], dtype=np.float64)
        self.policy, self.policy_cov = np.array(st["policy"], dtype=np.float64), np.array(st["policy_cov"], dtype=np.float64)
        self.policy_t = st["policy_t"]
        self.rng.bit_generator.state = st["rng"]
