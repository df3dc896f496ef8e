"""The trainer's process group: data parallel on torch.distributed under torchrun, no-ops in one process.

NCCL on GPUs, gloo on CPU; FSDP2 shards each decoder layer, then the policy module as the root.
"""

from __future__ import annotations

import os
from typing import Any

from rl_stage.config import TrainError


class ProcessGroup:
    """This process's place among the ranks (``WORLD_SIZE``, ``RANK`` from torchrun) and the collectives the trainer
    uses; with one process every call returns at once with what one process has."""

    def __init__(self) -> None:
        self.world, self.rank = 1, 0
        self.torch: Any = None
        self.device: Any = None  # where all-reduced tensors live: this rank's GPU, or the CPU

    def start(self, torch, device: str = "cpu") -> None:
        """Join torchrun's ranks (``device``: where the trainer runs, ``cuda`` or ``cpu``): NCCL with one GPU per rank,
        bound at ``init_process_group`` (``device_id``), or gloo on CPUs. More ranks on a machine than GPUs is a
        one-line error naming ``--nproc-per-node``, not CUDA's "invalid device ordinal"."""
        self.torch = torch
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        cuda = device == "cuda"
        if self.world > 1:
            import torch.distributed as dist

            kw = {}
            if cuda:
                local, n = int(os.environ.get("LOCAL_RANK", "0")), torch.cuda.device_count()
                if local >= n:
                    raise TrainError(f"rank {self.rank} is local rank {local} on a machine that shows {n} GPU(s): run "
                                     f"at most --nproc-per-node {n} (one rank per GPU), or set device = cpu")
                torch.cuda.set_device(local)
                kw["device_id"] = torch.device("cuda", local)
            if not dist.is_initialized():
                dist.init_process_group("nccl" if cuda else "gloo", **kw)
        self.device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")

    def main_first(self, fn):
        """``fn()`` on rank 0, then on every other rank once rank 0 is done (a barrier between): a shared write
        (the default model's conversion, a cache) is made once, and the others find it made."""
        out = fn() if self.main else None
        self.barrier()
        return out if self.main else fn()

    @property
    def main(self) -> bool:
        return self.rank == 0

    def gather(self, obj) -> list:
        """Every rank's ``obj``, in rank order (one process: ``[obj]``)."""
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out: list = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def reduce(self, values: list[float], op: str = "sum") -> list[float]:
        """``values`` summed (or their maximum, ``op="max"``) over ranks."""
        if self.world == 1:
            return values
        import torch.distributed as dist

        t = self.torch.tensor(values, dtype=self.torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return t.tolist()

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        """End the process group (NCCL warns, and some versions hang, at the exit of a process that left it)."""
        if self.world > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def shard(model, policy, bf16: bool = False) -> None:
    """FSDP2: each decoder layer its own unit, then the policy module (embeddings, norm, head) as the root. The model
    comes in on the CPU (loaded there on every rank) and ``fully_shard`` moves each unit's shard to the rank's device,
    one layer at a time, so no rank ever holds the whole model on its GPU. With bf16 the gathered parameters are bf16
    and gradients are reduced in fp32 (verl's FSDP2 actor); the sharded master weights stay fp32."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    layers = getattr(model.base_model, "layers", None)
    if layers is None:
        raise TrainError(f"{type(model).__name__}: no decoder layers at .base_model.layers to shard with FSDP2")
    kw = {"mp_policy": mixed_precision(torch, bf16, MixedPrecisionPolicy)}
    for layer in layers:
        fully_shard(layer, **kw)
    fully_shard(policy, **kw)


def mixed_precision(torch, bf16: bool, policy_cls):
    """FSDP2's precision: bf16 all-gathers and fp32 gradient reduction when bf16 is on, fp32 throughout otherwise."""
    if not bf16:
        return policy_cls()
    return policy_cls(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
