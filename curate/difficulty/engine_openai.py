"""The OpenAI-compatible HTTP engine: any server with ``/v1/completions`` or ``/v1/chat/completions`` (``vllm
serve``, providers), a bounded number of requests in flight on a thread pool, retried with backoff on the statuses of
``OpenAIEngine.RETRY_STATUS`` and on connection errors, one seed per request."""

from __future__ import annotations

import json
import os
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from curate.difficulty.engine_base import (
    Completion,
    Engine,
    EngineError,
    GenRequest,
    SamplingConfig,
    pull_requests,
    sample_seed,
)


class OpenAIEngine(Engine):
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
                    new, exhausted = pull_requests(it, self.max_inflight - len(inflight), exhausted)
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

