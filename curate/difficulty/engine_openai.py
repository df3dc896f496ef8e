"""The OpenAI-compatible HTTP engine: any server with ``/v1/completions`` or ``/v1/chat/completions`` (``vllm
serve``, providers), on ``httpx`` (one pooled client: keep-alive, timeouts, proxies from ``HTTPS_PROXY`` /
``NO_PROXY``) with ``tenacity``'s retries (exponential backoff with jitter, or the server's ``Retry-After``), a bounded
number of requests in flight on a thread pool, one seed per request.

The client's own cost (``benchmarks/openai_client.py``: a local server that answers at once, 8 in flight, 2 cores):
this engine about 1,000 requests a second, the ``openai`` SDK 0.7x that (its typed models cost about 3 ms a request),
bare ``urllib`` about 1.8x. A request of k samples from a real server takes a second or more, so at any rate a fleet
can serve (1,000 requests of 8 samples a second) the client is not what waits."""

from __future__ import annotations

import os
import time
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


class _Transient(Exception):
    """An answer worth asking again: a status of ``RETRY_STATUS``, a connection error or timeout, a garbled body."""

    def __init__(self, what: str, retry_after: float | None = None):
        super().__init__(what)
        self.retry_after = retry_after


def _retry_after(value: str | None) -> float | None:
    try:
        return min(120.0, max(0.0, float(value))) if value else None  # seconds; an HTTP date is not honoured
    except ValueError:
        return None


class OpenAIEngine(Engine):
    """Any OpenAI-compatible server (``vllm serve``, providers): concurrency-limited, retried with backoff.

    Templates ``chat``/``qwen_math`` go to ``/v1/chat/completions`` as messages (the server applies its
    model's template); ``r1``/``none`` go to ``/v1/completions`` as text. A request that still fails after
    ``max_retries`` raises ``EngineError``: nothing partial is yielded for it, so the estimator writes no
    half chunk and a re-run resumes there. The key is ``api_key``, else ``OPENAI_API_KEY``, else none.
    """

    backend = "openai"
    RETRY_STATUS = (408, 409, 425, 429, 500, 502, 503, 504)

    def __init__(self, base_url: str, model: str, cfg: SamplingConfig, api_key: str | None = None, concurrency: int = 8,
                 timeout_s: float = 600.0, max_retries: int = 5, backoff_s: float = 1.0, chat: bool | None = None):
        import httpx

        super().__init__(cfg)
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.model_name = self.model_path = model
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.concurrency, self.max_retries, self.backoff_s, self.chat = concurrency, max_retries, backoff_s, chat
        self.max_inflight = concurrency * 2
        self.stats = {"requests": 0, "retries": 0}
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout_s,
                                 headers={"Authorization": f"Bearer {key}"} if key else {},
                                 limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency))

    def close(self) -> None:
        self.http.close()

    def _attempt(self, path: str, body: dict) -> dict:
        import httpx

        try:
            resp = self.http.post(path, json=body)
        except httpx.TransportError as e:  # connection refused or reset, timeouts
            raise _Transient(f"{type(e).__name__}: {e}") from e
        if resp.status_code in self.RETRY_STATUS:
            raise _Transient(f"HTTP {resp.status_code}: {resp.text[:300]}", _retry_after(resp.headers.get("retry-after")))
        if resp.status_code >= 400:
            raise EngineError(f"{self.base_url}{path}: HTTP {resp.status_code}: {resp.text[:300]}")
        try:
            out = resp.json()
        except ValueError as e:
            raise _Transient(f"{type(e).__name__}: {e}") from e
        self.stats["requests"] += 1
        return out

    def _post(self, path: str, body: dict) -> dict:
        from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential_jitter

        backoff = wait_exponential_jitter(multiplier=self.backoff_s, max=60 * self.backoff_s, jitter=self.backoff_s)

        def wait_s(state: RetryCallState) -> float:  # the server's Retry-After when it gives one, else the backoff
            e = state.outcome.exception() if state.outcome else None
            after = e.retry_after if isinstance(e, _Transient) else None
            return after if after is not None else backoff(state)

        def count(state: RetryCallState) -> None:
            self.stats["retries"] += 1

        retrying = Retrying(stop=stop_after_attempt(self.max_retries + 1), wait=wait_s, before_sleep=count,
                            retry=retry_if_exception_type(_Transient), reraise=True)
        try:
            return retrying(self._attempt, path, body)
        except _Transient as e:
            raise EngineError(f"{self.base_url}{path}: gave up after {self.max_retries + 1} attempts; "
                              f"last error: {e}") from e

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

