"""Where an engine or the trainer runs and in what precision, decided once for both.

A GPU asked for and not there is an error, never a silent CPU run: ``device = "cuda"`` or a setting that only means
something on a GPU (``GPU_ENGINE_ARGS``, the trainer's vLLM memory share and sleep mode) stops with one line that says
why torch sees no GPU. ``device = "auto"`` runs on the CPU then, and says so in one line (a warning when torch was
built for CUDA: a broken driver or an empty ``CUDA_VISIBLE_DEVICES`` should not train for hours on the CPU unnoticed).

Precision: bf16 where the GPU computes it natively (compute capability 8.0 and up: A100, H100, RTX 30xx and later), fp16
for vLLM below that (T4, V100: vLLM refuses bf16 there), float32 on the CPU.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from curate.core.errors import GradusError

log = logging.getLogger(__name__)

DEVICES = ("auto", "cuda", "cpu")
# engine arguments that only mean something on a GPU: naming one where there is none is an error, not a CPU run
GPU_ENGINE_ARGS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "gpu_memory_utilization",
                   "enable_sleep_mode", "kv_cache_memory_bytes", "cpu_offload_gb")


class DeviceError(GradusError):
    """A GPU was asked for and torch sees none (or fewer than asked); the message says why."""


def no_gpu_reason(torch) -> str:
    """Why torch sees no CUDA device, in words a user can act on."""
    built = getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None)
    if not built:
        return f"torch {torch.__version__} is a CPU-only build (install the GPU extra: make install-gpu)"
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f"CUDA_VISIBLE_DEVICES={vis!r}" if vis is not None else "the NVIDIA driver (nvidia-smi)"
    return f"torch {torch.__version__} is built for CUDA {built} but finds no usable GPU: check {where}"


def pick_device(torch, device: str = "auto", what: str = "gradus", gpu_settings: dict[str, Any] | None = None) -> str:
    """``"cuda"`` or ``"cpu"`` for ``device`` (auto | cuda | cpu). ``gpu_settings``: the GPU-only settings the user
    gave (name -> value; None or absent: not given); any of them without a GPU is a ``DeviceError``."""
    if device not in DEVICES:
        raise DeviceError(f"device must be one of {', '.join(DEVICES)}, not {device!r}")
    named = sorted(k for k, v in (gpu_settings or {}).items() if v is not None)
    if device == "cpu":
        if named:
            raise DeviceError(f"device = cpu, but GPU settings are given ({', '.join(named)}): drop them or run on a GPU")
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    why = no_gpu_reason(torch)
    if device == "cuda" or named:
        asked = "device = cuda" if device == "cuda" else f"GPU settings given ({', '.join(named)})"
        raise DeviceError(f"{asked}, but {why}")
    if getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None):
        log.warning("%s runs on the CPU: %s", what, why)
    else:
        log.info("%s runs on the CPU (%s)", what, why)
    return "cpu"


def bf16_native(torch) -> bool:
    """Whether this CUDA device computes bf16 natively (compute capability >= 8.0), not through emulation."""
    if not torch.cuda.is_available():
        return False
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # a torch without the argument
        return torch.cuda.get_device_capability()[0] >= 8


def gpu_name(torch) -> str:
    if not torch.cuda.is_available():
        return "no GPU"
    major, minor = torch.cuda.get_device_capability()
    return f"{torch.cuda.get_device_name()} (compute capability {major}.{minor})"


def engine_dtype(torch, device: str) -> str:
    """An inference engine's dtype: float32 on the CPU, bf16 on GPUs that compute it, fp16 below (T4, V100)."""
    if device == "cpu":
        return "float32"
    return "bfloat16" if bf16_native(torch) else "float16"


def train_bf16(torch, device: str, asked: bool | None) -> bool:
    """Whether the trainer computes in bf16 (autocast; weights and AdamW stay fp32). Unset: on GPUs that compute
    bf16. Asked for on a GPU that does not: an error (fp16 training would need a loss scaler; fp32 is the choice)."""
    if asked is None:
        on = device == "cuda" and bf16_native(torch)
        if device == "cuda" and not on:
            log.warning("%s has no native bf16: training computes in fp32, vLLM rollouts run in fp16", gpu_name(torch))
        return on
    if asked and device == "cuda" and not bf16_native(torch):
        raise DeviceError(f"bf16 = true, but {gpu_name(torch)} has no native bf16 (it needs compute capability 8.0): "
                          "leave bf16 unset (fp32 compute)")
    return asked


def engine_device(device: str, what: str, engine_args: dict | None = None) -> str:
    """``cuda`` or ``cpu`` for an engine (``curate.difficulty.devices.pick_device``): a GPU asked for (``device =
    "cuda"`` or a GPU-only engine argument) and not there is a ``DeviceError``; a CPU run is said in one line."""
    try:
        import torch
    except ImportError:
        if device == "cuda":
            raise DeviceError(f"{what}: device = cuda, but torch is not installed") from None
        return "cpu"
    named = {k: v for k, v in (engine_args or {}).items() if k in GPU_ENGINE_ARGS}
    return pick_device(torch, device, what, named)


# engine arguments gradus sets from its own settings: given again, they would contradict the run's record
RESERVED_ENGINE_ARGS = ("model", "seed", "tokenizer")


def check_engine_args(args: dict) -> None:
    """User engine arguments (``engine_args``) checked against vLLM's own names (``EngineArgs``'s fields): one line
    for a wrong name, with the nearest right one."""
    import dataclasses

    from curate.core.config import suggest

    bad = [k for k in args if k in RESERVED_ENGINE_ARGS]
    if bad:
        raise DeviceError(f"engine argument {bad[0]!r} is set by gradus from its own settings (model, seed): set those")
    try:
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:
        return  # no vLLM: the engine's start says so
    known = {f.name for f in dataclasses.fields(EngineArgs)}
    for k in args:
        if k not in known:
            raise DeviceError(f"unknown vLLM engine argument {k!r}{suggest(k, known)} (vLLM's EngineArgs names; "
                              "e.g. tensor_parallel_size, gpu_memory_utilization, max_model_len, enforce_eager)")
