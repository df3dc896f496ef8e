"""The OpenAI-compatible sampler's HTTP logic against a local stdlib server: request shape, retries with
backoff on 429/503, a permanent 4xx as a clear error, and the estimator writing nothing for a failed chunk."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from curate.difficulty.engines import EngineError, GenRequest, OpenAIEngine, SamplingConfig, sample_seed


class Server:
    def __init__(self, script):
        self.script = script  # list of (status, body[, headers]) served in order; the last repeats
        self.requests = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append((self.path, body, self.headers.get("Authorization")))
                status, payload, *headers = outer.script[min(len(outer.requests) - 1, len(outer.script) - 1)]
                data = json.dumps(payload(body) if callable(payload) else payload).encode()
                self.send_response(status)
                for k, v in (headers[0] if headers else {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()


def ok(body):
    n = body["n"]
    key = "message" if "messages" in body else "text"
    def content(i):
        return {"message": {"role": "assistant", "content": f"\\boxed{{{i}}}"}} if key == "message" else {"text": f"ans {i}"}

    choices = [{"index": i, "finish_reason": "length" if i == 0 else "stop", **content(i)} for i in range(n)]
    return {"choices": choices[::-1], "usage": {"completion_tokens": 5 * n}}


def test_chat_request_retries_then_succeeds():
    srv = Server([(503, {"error": "busy"}), (429, {"error": "slow down"}), (200, ok)])
    try:
        cfg = SamplingConfig(k=3, temperature=0.8, top_p=0.9, max_tokens=64, seed=5)
        s = OpenAIEngine(srv.url, "my-model", cfg, api_key="sk-test", backoff_s=0.01)
        req = GenRequest("p1", "What is 1+1?", messages=[{"role": "user", "content": "What is 1+1?"}])
        [(rid, comps)] = list(s.stream([req]))
    finally:
        srv.close()
    assert rid == "p1" and s.stats == {"requests": 1, "retries": 2}
    assert [c.text for c in comps] == ["\\boxed{0}", "\\boxed{1}", "\\boxed{2}"]  # sorted by index
    assert [c.finish_reason for c in comps] == ["length", "stop", "stop"] and comps[0].truncated
    assert [c.n_tokens for c in comps] == [5, 5, 5]
    path, body, auth = srv.requests[-1]
    assert path == "/v1/chat/completions" and auth == "Bearer sk-test"
    assert {k: body[k] for k in ("model", "n", "temperature", "top_p", "max_tokens", "seed")} == {
        "model": "my-model", "n": 3, "temperature": 0.8, "top_p": 0.9, "max_tokens": 64, "seed": sample_seed(5, "p1", 0)}


def test_text_completion_and_permanent_errors():
    srv = Server([(200, ok)])
    try:
        s = OpenAIEngine(srv.url + "/v1", "m", SamplingConfig(k=2), backoff_s=0.01)
        [(_, comps)] = list(s.stream([GenRequest("q", "User: hi\nAssistant: <think>")]))
        assert srv.requests[-1][0] == "/v1/completions" and srv.requests[-1][1]["prompt"].endswith("<think>")
        assert [c.text for c in comps] == ["ans 0", "ans 1"]
    finally:
        srv.close()
    bad = Server([(400, {"error": "prompt too long"})])
    try:
        s = OpenAIEngine(bad.url, "m", SamplingConfig(k=2), backoff_s=0.01)
        with pytest.raises(EngineError, match="HTTP 400"):
            list(s.stream([GenRequest("q", "x")]))
        assert len(bad.requests) == 1  # no retry on a permanent error
    finally:
        bad.close()
    down = Server([(503, {"error": "down"})])
    try:
        s = OpenAIEngine(down.url, "m", SamplingConfig(k=2), backoff_s=0.01, max_retries=2)
        with pytest.raises(EngineError, match="gave up after 3 attempts"):
            list(s.stream([GenRequest("q", "x")]))
    finally:
        down.close()
    short = Server([(200, lambda b: {"choices": [{"index": 0, "text": "x", "finish_reason": "stop"}]})])
    try:
        s = OpenAIEngine(short.url, "m", SamplingConfig(k=2), backoff_s=0.01)
        with pytest.raises(EngineError, match="asked for n=2 samples, got 1"):
            list(s.stream([GenRequest("q", "x")]))
    finally:
        short.close()


def test_a_retry_waits_what_the_servers_retry_after_says_not_the_backoff():
    import time

    srv = Server([(429, {"error": "slow down"}, {"Retry-After": "0.2"}), (200, ok)])
    try:
        s = OpenAIEngine(srv.url, "m", SamplingConfig(k=2), backoff_s=30.0)  # a backoff of 30 s would time the test out
        t = time.perf_counter()
        [(_, comps)] = list(s.stream([GenRequest("q", "x")]))
        waited = time.perf_counter() - t
    finally:
        srv.close()
    assert len(comps) == 2 and s.stats == {"requests": 1, "retries": 1}
    assert 0.2 <= waited < 5
