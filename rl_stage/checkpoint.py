"""A training run's checkpoints: ``OUT/checkpoints/step_N/``, a Hugging Face model folder (transformers and vLLM load
it) plus ``trainer_state.pt`` (optimizer, scheduler, sampler, RNGs, counters, the online difficulty table), written
under a temporary name and renamed; with several ranks the optimizer's shards through torch.distributed.checkpoint."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from pathlib import Path

import numpy as np

from curate.core.shards import write_text_atomic
from rl_stage.config import TrainError

log = logging.getLogger(__name__)


def latest(out: Path) -> Path | None:
    """The newest complete checkpoint of a run folder (its trainer state written last), or None."""
    root = out / "checkpoints"
    done = sorted(p for p in root.glob("step_*") if (p / "trainer_state.pt").exists()) if root.exists() else []
    return done[-1] if done else None


def _free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _no_room(t, root: Path) -> str | None:
    """Why the disk cannot hold one more checkpoint, or None when it can: checked before anything is written, since a
    full disk would otherwise stop the run inside torch.save with a cryptic message, a partial folder left behind, and
    every other writer on that disk failing too. A checkpoint's size is the last one's, else the weights and Adam's two
    moments."""
    last = latest(t.out)
    need = _size(last) if last is not None else 3 * sum(p.numel() * p.element_size() for p in t.model.parameters())
    free = _free_bytes(t.out)
    if free >= need:
        return None
    where = f"it goes on from {last.name}" if last is not None else "it starts over: no checkpoint yet"
    return (f"step {t.step}: no room for a checkpoint in {root}: {free / 1e9:.2f} GB free, one takes about "
            f"{need / 1e9:.2f} GB. Free space (or lower keep_checkpoints, or set out on a larger disk) and run again "
            f"with --resume: {where}")


def save(t) -> Path:
    """Hugging Face model folder + trainer state, under a temporary name, then renamed. With several ranks the
    optimizer's sharded state goes through torch.distributed.checkpoint (each rank writes its shards into
    ``optimizer/``; a shared file system across nodes) and each rank's RNG to ``rng_rank<r>.pt``."""
    torch = t.torch
    root = t.out / "checkpoints"
    final = root / f"step_{t.step:06d}"
    tmp = root / f".tmp_step_{t.step:06d}"
    no_room = None
    if t.pg.main:
        shutil.rmtree(tmp, ignore_errors=True)
        no_room = _no_room(t, root)
        if no_room is None:
            tmp.mkdir(parents=True)
    no_room = t.pg.gather(no_room)[0]  # rank 0's finding on every rank: all stop together, none waits at a barrier
    if no_room is not None:
        raise TrainError(no_room)
    rng = {"torch_rng": torch.get_rng_state(),
           "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
    if t.pg.world > 1:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

        full = get_model_state_dict(t.policy, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if t.pg.main:  # the model's own names, without a tied head's second copy (save_pretrained drops it too)
            own = {n for n, _ in t.model.named_parameters()} | {n for n, _ in t.model.named_buffers()}
            sd = {k.removeprefix("lm."): v for k, v in full.items() if k.removeprefix("lm.") in own}
            t.model.save_pretrained(tmp, state_dict=sd, safe_serialization=True)
        del full
        dcp.save({"optimizer": get_optimizer_state_dict(t.policy, t.opt)}, checkpoint_id=str(tmp / "optimizer"))
        torch.save(rng, tmp / f"rng_rank{t.pg.rank}.pt")
    elif t.pg.main:
        t.model.save_pretrained(tmp, safe_serialization=True)
    if t.pg.main:
        t.tokenizer.save_pretrained(tmp)
        t.write_online(tmp)
        state = {"step": t.step, "scheduler": t.sched.state_dict(), "world_size": t.pg.world,
                 "sampler": t.sampler.state_dict(), "python_rng": random.getstate(), "numpy_rng": np.random.get_state(),
                 "bad_in_row": t.bad_in_row, "completions": t.completions, "completions_trained": t.completions_trained,
                 "online": t.online, "screens": t.screens.state_dict() if t.screens is not None else [],
                 **({"optimizer": t.opt.state_dict(), **rng} if t.pg.world == 1 else {})}
        torch.save(state, tmp / "trainer_state.pt")
    t.pg.barrier()
    if t.pg.main:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        for old in sorted(p for p in root.glob("step_*"))[: -t.cfg.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        t.write_online(t.out)
        from rl_stage.online import plot_run

        plot_run(t.out)
    t.pg.barrier()
    return final


def load(t, ckpt: Path) -> None:
    """The run of trainer ``t`` continued from ``ckpt`` exactly: weights were loaded with the model; here the
    optimizer, scheduler, sampler, RNGs and counters, and the logs cut back to the checkpoint's step."""
    torch = t.torch
    st = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    if st.get("world_size", 1) != t.pg.world:
        raise TrainError(f"{ckpt} was written by {st.get('world_size', 1)} rank(s); resume it with as many "
                         f"(this run has {t.pg.world})")
    t.step = st["step"]
    if t.pg.world > 1:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

        osd = {"optimizer": get_optimizer_state_dict(t.policy, t.opt)}
        dcp.load(osd, checkpoint_id=str(ckpt / "optimizer"))
        set_optimizer_state_dict(t.policy, t.opt, osd["optimizer"])
        rng = torch.load(ckpt / f"rng_rank{t.pg.rank}.pt", weights_only=False)
    else:
        t.opt.load_state_dict(st["optimizer"])
        rng = st
    t.sched.load_state_dict(st["scheduler"])
    t.sampler.load_state_dict(st["sampler"])
    random.setstate(st["python_rng"])
    np.random.set_state(st["numpy_rng"])
    torch.set_rng_state(rng["torch_rng"])
    if rng.get("cuda_rng") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda_rng"])
    t.bad_in_row = st["bad_in_row"]
    t.completions = st.get("completions", 0)
    t.completions_trained = st.get("completions_trained", 0)
    t.online = {k: list(v) for k, v in st.get("online", {}).items()}
    if t.screens is not None:
        t.screens.load_state_dict(st.get("screens", []))
    # metrics and evaluations written after this checkpoint belong to steps that will be run again
    for name in ("metrics.jsonl", "eval.jsonl"):
        mpath = t.out / name
        if t.pg.main and mpath.exists():
            lines = [ln for ln in mpath.read_text().splitlines() if ln and json.loads(ln).get("step", 0) <= t.step]
            write_text_atomic(mpath, "".join(ln + "\n" for ln in lines))
    t.pg.barrier()
    t.rollouts.push()
    log.info("resumed from %s (step %d)", ckpt, t.step)
