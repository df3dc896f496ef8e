"""The trainer before and after a refactor: metrics (timings left out) and final weights on fixed seeds.

Three short runs on transformers rollouts from the bundled model over the test suite's easy sums: ``dr_grpo``
(8 completions a group), ``grpo`` with its KL term and two mini-batches, and ``dapo`` with screening. Rewards are
1, 0, 1, 0 in every group, whatever was sampled, so every group carries a signal on any CPU. Prints, per run, a
hash of its metrics and of its final weights; a refactor that changes no output prints the same lines.

    git worktree add /tmp/before HEAD~1 && (cd /tmp/before && python /work/main/dev/train_equivalence.py /tmp/eqv/before)
    python dev/train_equivalence.py /tmp/eqv/after     # from the checkout after the change; compare the lines

Run from the checkout under test (it imports the code of the current directory). About 5 minutes on 2 cores.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

RUNS = {
    "dr_grpo": dict(preset="dr_grpo", overlong_shaping=True, overlong_buffer=24, prompts_per_step=2, group_size=8),
    "grpo_kl": dict(preset="grpo", prompts_per_step=2, group_size=4, mini_batches=2),
    "dapo_screen": dict(preset="dapo", mini_batches=2, prompts_per_step=2, group_size=4, screen=2),
}


def main() -> None:
    sys.path.insert(0, ".")
    from safetensors.torch import load_file

    from curate.select.export import ExportConfig, export
    from rl_stage import rollout
    from rl_stage.trainer import TrainConfig, Trainer
    from tests.conftest import write_easy_sums

    def rewards(self, groups):  # 1, 0, 1, 0 in every group: a signal that does not rest on what was sampled
        r = [[float(i % 2 == 0) for i in range(len(g.completions))] for g in groups]
        return r, [[x == 1.0 for x in g] for g in r]

    rollout.Rollouts.rewards = rewards  # type: ignore[method-assign]
    root = Path(sys.argv[1])
    root.mkdir(parents=True, exist_ok=True)
    ex = root / "export"
    if not ex.exists():
        export([write_easy_sums(root / "scored")], ex, ExportConfig(curriculum=True))
    for name, kw in RUNS.items():
        out = root / name
        Trainer(TrainConfig(data=[str(ex)], out=str(out), rollout_backend="hf", max_tokens=12, steps=2, save_every=100,
                            lr=1e-5, keep_checkpoints=1, micro_batch_size=8, seed=3, eval_every=0, **kw)).run(progress=False)
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        rows = [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]
        ck = sorted((out / "checkpoints").glob("step_*"))[-1]
        w = load_file(ck / "model.safetensors")
        h = hashlib.sha256()
        for k in sorted(w):
            h.update(k.encode())
            h.update(w[k].float().numpy().tobytes())
        metrics = hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]
        print(name, "metrics", metrics, "weights", h.hexdigest()[:16], ck.name, flush=True)


if __name__ == "__main__":
    main()
