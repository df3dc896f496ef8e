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

    def start(self, torch) -> None:
        self.torch = torch
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        if self.world > 1:
            import torch.distributed as dist

            if torch.cuda.is_available():
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            if not dist.is_initialized():
                dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        cuda = torch.cuda.is_available()
        self.device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")

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


def shard(model, policy) -> None:
    """FSDP2: each decoder layer its own unit, then the policy module (embeddings, norm, head) as the root."""
    from torch.distributed.fsdp import fully_shard

    layers = getattr(model.base_model, "layers", None)
    if layers is None:
        raise TrainError(f"{type(model).__name__}: no decoder layers at .base_model.layers to shard with FSDP2")
    for layer in layers:
        fully_shard(layer)
    fully_shard(policy)
