"""Training: ``gradus train`` (one process, or N ranks under torchrun) and ``gradus model`` (the bundled model)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from curate.core.errors import GradusError


def cmd_train(a: argparse.Namespace) -> None:
    from curate.core.config import given
    from rl_stage.trainer import TrainConfig, Trainer, TrainError, updates_line

    if a.nproc_per_node > 1 and not a.dry_run and "WORLD_SIZE" not in os.environ:
        _torchrun(a.nproc_per_node)
        return
    if a.config:
        cfg = TrainConfig.load(Path(a.config), **given(TrainConfig, a))
    else:  # every setting from the command line (--data EXPORT --out RUN ...)
        from curate.core.config import from_dict

        cfg = from_dict(TrainConfig, {k: v for k, v in given(TrainConfig, a).items() if v is not None}, where="options")
    t = Trainer(cfg, resume=a.resume)
    main = os.environ.get("RANK", "0") == "0"
    if a.dry_run:
        if main:
            print(f"train: preset {cfg.preset} ({t.alg.cite}); {updates_line(cfg, t.alg)}")
            print(json.dumps({**dataclasses.asdict(t.cfg), "resolved": t.alg}, indent=2, default=str))
        return
    # the process group ends only after a run that finished on every rank: a rank that failed alone must not wait
    # in destroy_process_group while the others wait in a collective (it exits, and torchrun stops the rest)
    if not main:  # under torchrun: rank 0 speaks for the run
        t.run(progress=False)
        t.close()
        return
    print(f"train: preset {cfg.preset} ({t.alg.cite}); {updates_line(cfg, t.alg)}")
    ms = t.run(progress=not a.quiet)
    t.close()
    steps = [m for m in ms if m.get("step", 0) > 0]
    print(f"train: {len(steps)} steps this run, now at step {t.step}; metrics: {Path(cfg.out) / 'metrics.jsonl'}; "
          f"checkpoints: {Path(cfg.out) / 'checkpoints'}")
    if steps:
        from rl_stage.online import completions_line, read_metrics

        print("train: " + completions_line([m for m in read_metrics(Path(cfg.out)) if m.get("step", 0) > 0]))
    if steps and all(m.get("skipped") for m in steps):
        raise TrainError(f"every step of this run was skipped ({steps[-1]['skipped']}): nothing was trained")



def _torchrun(n: int) -> None:
    """``gradus train ... --nproc-per-node N``: the same command on N ranks of this machine under torchrun
    (``--standalone``). Several machines: run ``torchrun --nnodes M --node-rank R --rdzv-endpoint HOST:PORT
    --nproc-per-node N -m flows.cli train CONFIG`` on each (torchrun's own flags)."""
    import subprocess

    argv, skip = [], False
    for x in sys.argv[1:]:
        if skip:
            skip = False
        elif x == "--nproc-per-node":
            skip = True
        elif not x.startswith("--nproc-per-node="):
            argv.append(x)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", "-m", "flows.cli", *argv]
    rc = subprocess.run(cmd).returncode
    if rc:
        raise GradusError(f"torchrun with {n} ranks exited with code {rc} (each rank's error is above)")



def cmd_model(a: argparse.Namespace) -> None:
    from curate.difficulty.models import convert_default, default_model_dir

    if a.action == "path":
        print(default_model_dir())
    else:
        print(convert_default(force=a.force))

