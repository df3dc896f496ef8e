"""The prompt samplers on a simulated policy: completions per trained group, and groups trained for a budget.

No model runs here: a pool of prompts with latent difficulties ``b_i`` and a policy of ability ``theta`` that
passes prompt i with probability ``sigmoid(theta - b_i + e_i)`` (``e_i``: a prompt's own offset, fixed). The
offline estimate is ``k`` samples per prompt at the starting ability, at another temperature (a log-odds
noise of ``--offline-noise``). Training: each kept group raises the ability by ``--lr-global`` and its own
prompt's offset by ``--lr-prompt`` (so prompts learn at different speeds and never-solved prompts become
solvable), and sharpens the policy (``--sharpen``: the log-odds scale grows, as a policy's entropy collapses
and its pass rates go to 0 or 1). Each step runs DAPO's dynamic sampling as the trainer does: rounds of ``--prompts`` prompts,
groups of G, all-equal groups dropped, at most ``--max-rounds`` rounds, kept groups past the batch dropped.

The real sampler classes are used (``rl_stage.samplers``: ``SignalSampler``, ``CurriculumSampler``)
on a pool written to a temporary Parquet folder. Printed per arm, over ``--seeds`` seeds: completions per
trained group, groups trained within the budget, and the final mean true pass rate of the pool.

    python benchmarks/sampler_sim.py                      # the defaults against uniform and Kimi's weights
    python benchmarks/sampler_sim.py --grid               # the signal sampler's settings side by side

An arm ``NAME:screen=S`` screens its candidates as the trainer's ``screen = S`` does (``rl_stage.screening.Queue``):
candidates by the sampler's refill rule, S completions each, observed, the rest of the group only for the
candidates whose chance of a mixed group is at least ``--screen-min-chance``, those at the bar not needed held for
``--screen-carry`` steps; every completion counts in the budget.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def make_pool(folder: Path, n: int, k: int, rng: np.random.Generator, theta0: float, noise: float):
    b = rng.normal(0.0, 1.6, size=n)
    e = np.zeros(n)
    p0 = 1 / (1 + np.exp(-(theta0 - b + rng.normal(0, noise, size=n))))
    nc = rng.binomial(k, p0)
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": [f"q{i}" for i in range(n)], "problem": [f"problem {i}" for i in range(n)],
                             "answer": ["1"] * n, "n_correct": nc.astype(np.int32), "n_graded": np.full(n, k, np.int32),
                             "k": np.full(n, k, np.int32)}), folder / "part.parquet")
    return b, e


class _Oracle:
    """Draws the prompts whose groups are most likely to survive, from the true pass rates."""

    def __init__(self, true_p, group: int, n: int):
        self.true_p, self.group, self.drawn = true_p, group, set()
        self.ids = [f"q{i}" for i in range(n)]

    def sample(self, n, need=None, exclude=()):
        from rl_stage.data import Prompt

        p = self.true_p()
        surv = 1 - p**self.group - (1 - p) ** self.group
        order = [i for i in np.argsort(-surv) if i not in self.drawn and i not in set(exclude)][:n]
        if need is not None:
            cum = np.cumsum(surv[order])
            order = order[: int(np.searchsorted(cum, need - 1e-9)) + 1]
        self.drawn |= set(order)
        return [Prompt(self.ids[i], "", "1", index=int(i)) for i in order]

    def observe(self, results):
        pass

    def end_step(self):
        self.drawn = set()


def run_arm(arm: str, a, seed: int) -> dict:
    from rl_stage import screening
    from rl_stage.samplers import CurriculumSampler, SignalSampler

    rng = np.random.default_rng(seed)
    screen = 0
    for part in arm.split(":")[1:]:  # ARM:screen=S (rl_stage.screening): S completions first, the rest where worth it
        if part.startswith("screen="):
            screen = int(part.split("=")[1])
    arm = ":".join(x for x in arm.split(":") if not x.startswith("screen="))
    with tempfile.TemporaryDirectory() as tmp:
        b, e = make_pool(Path(tmp) / "pool", a.pool, a.k, rng, a.theta0, a.offline_noise)
        kw = dict(prior_strength=a.prior_strength, forget_sd=a.forget_sd, drift_sd=a.drift_sd)
        if arm == "oracle":  # knows every true pass rate: the ceiling of any sampler
            s = _Oracle(lambda: 1 / (1 + np.exp(-scale * (theta - b + e))), a.group, a.pool)
        elif arm.startswith("signal"):
            opts = dict(kw)
            for part in arm.split(":")[1:]:
                key, _, val = part.partition("=")
                opts[key] = float(val)
            s = SignalSampler([str(Path(tmp) / "pool")], a.group, seed=seed, use_prior=arm != "signal_flat", **opts)
        else:
            s = CurriculumSampler([str(Path(tmp) / "pool")], seed=seed, prioritized=arm == "kimi", one_pool=True)
        theta, scale = a.theta0, 1.0
        used = trained = 0
        queue = screening.Queue(screen, a.group, a.screen_min_chance, a.screen_candidates, a.screen_carry)

        def true_p(p):
            i = int(p.id[1:])
            return 1 / (1 + np.exp(-scale * (theta - b[i] + e[i])))

        while used < a.budget:
            kept, rounds, ids = 0, 0, set()
            queue.begin_step()  # the held screens past screen_carry steps: screened out
            while kept < a.prompts and rounds < a.max_rounds and used < a.budget:
                missing = a.prompts - kept
                if screen:  # as the trainer's _screened: screens observed, the queue decides, the chosen go on
                    prompts = queue.draw(s, missing)
                    if not prompts and not queue.held:
                        break
                    first = [int(rng.binomial(screen, true_p(p))) for p in prompts]
                    used += screen * len(prompts)
                    s.observe([(p.index, c, screen) for p, c in zip(prompts, first, strict=True)])
                    go, _ = queue.decide(s, [screening.Screened(p, c, "") for p, c in zip(prompts, first, strict=True)],
                                         missing)
                    rest = [int(rng.binomial(a.group - screen, true_p(x.prompt))) for x in go]
                    used += (a.group - screen) * len(go)
                    s.observe([(x.prompt.index, c, a.group - screen) for x, c in zip(go, rest, strict=True)])
                    counts = [(x.prompt, x.correct + c) for x, c in zip(go, rest, strict=True)]
                else:
                    prompts = s.sample(a.prompts, need=missing)
                    if not prompts:
                        break
                    counts = [(p, int(rng.binomial(a.group, true_p(p)))) for p in prompts]
                    used += a.group * len(prompts)
                    s.observe([(p.index, c, a.group) for p, c in counts])
                rounds += 1
                for p, c in counts:
                    i = int(p.id[1:])
                    if 0 < c < a.group and p.id not in ids and kept < a.prompts:
                        ids.add(p.id)
                        kept += 1
                        e[i] += a.lr_prompt
            if kept == a.prompts:  # a full batch is trained on
                trained += kept
                theta += a.lr_global * kept
                scale += a.sharpen * kept
            s.end_step()
            queue.end_step()
        final = float(np.mean(1 / (1 + np.exp(-scale * (theta - b + e)))))
    return {"completions_per_group": used / max(1, trained), "groups": trained, "final_pass_rate": final}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arms", default="uniform,kimi,signal,signal_flat,oracle,uniform:screen=4,signal:screen=4,"
                    "signal:screen=2")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--pool", type=int, default=240)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-rounds", type=int, default=10)
    ap.add_argument("--budget", type=int, default=3000, help="completions per run")
    ap.add_argument("--theta0", type=float, default=-0.8)
    ap.add_argument("--offline-noise", type=float, default=0.5)
    ap.add_argument("--lr-global", type=float, default=0.02)
    ap.add_argument("--lr-prompt", type=float, default=0.3)
    ap.add_argument("--sharpen", type=float, default=0.02,
                    help="growth of the policy's log-odds scale per kept group (entropy collapse: pass rates go to 0 or 1)")
    ap.add_argument("--prior-strength", type=float, default=4.0)
    ap.add_argument("--forget-sd", type=float, default=0.1)
    ap.add_argument("--drift-sd", type=float, default=0.2)
    ap.add_argument("--screen-candidates", type=float, default=2.0, help="ARM:screen=S: candidates per missing group")
    ap.add_argument("--screen-min-chance", type=float, default=0.5, help="ARM:screen=S: the chance a candidate needs")
    ap.add_argument("--screen-carry", type=int, default=1, help="ARM:screen=S: steps a screened candidate may be held")
    ap.add_argument("--grid", action="store_true", help="the signal sampler over prior_strength x forget_sd x drift_sd")
    a = ap.parse_args()
    arms = a.arms.split(",")
    if a.grid:
        arms = ["uniform"] + [f"signal:prior_strength={p}:forget_sd={f}:drift_sd={d}"
                              for p, f, d in itertools.product((2, 4, 8), (0.0, 0.1, 0.3), (0, 0.1, 0.2, 0.4))]
    print(f"pool {a.pool}, k {a.k}, G {a.group}, {a.prompts} prompts a step, budget {a.budget} completions, "
          f"{a.seeds} seeds")
    print(f"{'arm':55s} {'compl/group':>12s} {'groups':>8s} {'final p':>8s}")
    for arm in arms:
        rs = [run_arm(arm, a, seed) for seed in range(a.seeds)]
        cpg = statistics.mean(r["completions_per_group"] for r in rs)
        print(f"{arm:55s} {cpg:12.2f} {statistics.mean(r['groups'] for r in rs):8.1f} "
              f"{statistics.mean(r['final_pass_rate'] for r in rs):8.3f}", flush=True)


if __name__ == "__main__":
    main()
