"""The OpenAI-compatible engine's own cost per request: ``OpenAIEngine`` (httpx, tenacity) against a plain ``urllib``
client and against the ``openai`` SDK's ``completions.create``, each on a thread pool of the same size, against one
local stdlib server in a process of its own that answers at once, so what is timed is the client: building the
request, HTTP, parsing the answer.

    python benchmarks/openai_client.py [--requests 2000] [--n 8] [--concurrency 8]

Prints requests per second of each and the engine's against each of the others (above 1: the engine is faster). A
real server takes seconds per request; this is the floor the client adds to each. The SDK column needs ``openai``
installed (vLLM brings it).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real server
    disable_nagle_algorithm = True  # headers and body go in two writes: with Nagle each answer waits for an ACK

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        choices = [{"index": i, "text": f"the answer is \\boxed{{{i}}}", "finish_reason": "stop", "logprobs": None}
                   for i in range(body["n"])]
        data = json.dumps({"id": "c", "object": "text_completion", "created": 0, "model": body["model"],
                           "choices": choices, "usage": {"prompt_tokens": 10, "completion_tokens": 8 * body["n"],
                                                         "total_tokens": 10 + 8 * body["n"]}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


def serve(ready) -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ready.put(srv.server_address[1])
    srv.serve_forever()


def urllib_post(url: str, body: dict) -> list[str]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"},
                                 method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return [c["text"] for c in json.loads(resp.read())["choices"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=8)
    a = ap.parse_args()
    from curate.difficulty.engines import GenRequest, OpenAIEngine, SamplingConfig

    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Queue()
    server = ctx.Process(target=serve, args=(ready,), daemon=True)  # its own process: the client's GIL is its own
    server.start()
    url = f"http://127.0.0.1:{ready.get(timeout=60)}/v1"
    cfg = SamplingConfig(k=a.n, max_tokens=64)
    body = {"model": "m", "n": a.n, "prompt": "What is 1 + 1?", "max_tokens": 64, "temperature": 1.0}
    out: dict = {}

    def timed(fn) -> float:
        t = time.perf_counter()
        with ThreadPoolExecutor(a.concurrency) as pool:
            got = sum(pool.map(fn, range(a.requests)))
        assert got == a.requests * a.n
        return a.requests / (time.perf_counter() - t)

    try:
        import openai

        sdk = openai.OpenAI(base_url=url, api_key="EMPTY", max_retries=0)
    except ImportError:
        sdk = None
    for _ in range(2):  # the first round warms them up; the second is reported
        eng = OpenAIEngine(url, "m", cfg, concurrency=a.concurrency)
        t = time.perf_counter()
        got = sum(len(c) for _, c in eng.stream(GenRequest(f"p{i}", "What is 1 + 1?") for i in range(a.requests)))
        engine_rps = a.requests / (time.perf_counter() - t)
        assert got == a.requests * a.n
        eng.close()
        urllib_rps = timed(lambda _: len(urllib_post(url + "/completions", body)))
        out = {"requests": a.requests, "n": a.n, "concurrency": a.concurrency, "engine_req_per_s": round(engine_rps),
               "urllib_req_per_s": round(urllib_rps), "engine_over_urllib": round(engine_rps / urllib_rps, 2)}
        if sdk is not None:
            sdk_rps = timed(lambda _: len(sdk.completions.create(**body).choices))
            out |= {"sdk_req_per_s": round(sdk_rps), "engine_over_sdk": round(engine_rps / sdk_rps, 2)}
    server.terminate()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
