"""Grading with math-verify, in worker processes with hard timeouts. The only module importing math_verify.

Why processes: math-verify's own timeouts use ``signal.alarm``, which only works in a main thread
(outside one it raises, and a broad ``except`` then turned every score into 0 in other RL projects),
and a pathological expression can hang sympy in C code. Each worker is a separate process whose main
thread runs math-verify with its own timeout, under an address-space limit; the parent gives every
request a hard deadline and kills and replaces a worker that misses it. A timeout or a crash is an
outcome of its own (``timeout``, ``crash``), never "wrong" or "unparseable".

Gold answers are wrapped in ``$...$`` and count as parseable when math-verify returns a sympy object
(not only its string fallback). Results are memoized by their exact input strings.

    python -c "from curate.grading import GradingPool; print(GradingPool(1).parse_gold(['\\\\frac12', '\\\\frac{1}{']))"
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import time
from dataclasses import dataclass
from importlib.metadata import version
from multiprocessing.connection import Connection

GRADER_VERSION = f"math-verify=={version('math-verify')};gradus-grading=2"
_PLAIN_NUMBER = re.compile(r"^[-+]?(?:\d+|\d*\.\d+)$")  # math-verify parses these (checked by a test)
_PLAIN_INT = re.compile(r"^-?\d{1,30}$")  # exact integer compare agrees with math-verify (checked by a test)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)
MAX_FALLBACK_CHARS = 4000  # an unboxed response is graded on its tail: math-verify takes the last expression anyway

# Outcomes of grading one sample. Only "correct" counts; "timeout" and "crash" are never read as "wrong".
OUTCOMES = ("correct", "wrong", "no_answer", "timeout", "crash", "error")


def extract_prediction(text: str) -> tuple[str, str]:
    """``(what math-verify parses, how it was found)`` for a model response.

    The last complete ``\\boxed{}`` wins (``\\boxed{X}`` is passed on, so math-verify's own boxed rules
    apply); then the last ``<answer>...</answer>`` of the R1 template; otherwise the response's tail,
    where math-verify's fallback looks for the last expression. Markdown bold (``**73**``) is removed
    first: math-verify 0.9 reads ``**73**`` as ``73**``.
    """
    from curate.answers import last_boxed

    if "**" in text:
        text = text.replace("**", "")
    box = last_boxed(text)
    if box is not None:
        return f"\\boxed{{{box}}}", "boxed"
    tags = _ANSWER_TAG.findall(text)
    if tags and tags[-1].strip():
        return f"\\boxed{{{tags[-1].strip()}}}", "answer_tag"
    return text[-MAX_FALLBACK_CHARS:], "tail"


@dataclass(frozen=True, slots=True)
class ParseResult:
    ok: bool | None  # None: timed out or crashed
    reason: str  # "ok", "unparseable", "timeout", "crash", "error:<type>"


def _worker_parse_gold(gold: str, timeout_s: int) -> ParseResult:
    from math_verify import parse
    from math_verify.errors import TimeoutException

    try:
        parsed = parse(f"${gold}$", parsing_timeout=timeout_s, raise_on_error=True)
    except TimeoutException:  # subclasses BaseException: caught by name
        return ParseResult(None, "timeout")
    except Exception as e:  # noqa: BLE001 - any parser error means "unparseable", recorded with its type
        return ParseResult(False, f"error:{type(e).__name__}")
    ok = bool(parsed) and not isinstance(parsed[0], str)
    return ParseResult(ok, "ok" if ok else "unparseable")


_WORKER_GOLD: dict[str, list] = {}


def _worker_verify(item: tuple[str, str], timeout_s: int) -> ParseResult:
    """Grade one (gold, prediction) pair: gold parsed once per worker and passed first to ``verify``."""
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException

    gold, pred = item
    try:
        g = _WORKER_GOLD.get(gold)
        if g is None:
            g = parse(f"${gold}$", parsing_timeout=timeout_s, raise_on_error=True)
            if len(_WORKER_GOLD) > 100_000:
                _WORKER_GOLD.clear()
            _WORKER_GOLD[gold] = g
        p = parse(pred, parsing_timeout=timeout_s, raise_on_error=True)
        if not p:
            return ParseResult(False, "no_answer")
        ok = verify(g, p, timeout_seconds=timeout_s, raise_on_error=True)
    except TimeoutException:
        return ParseResult(None, "timeout")
    except Exception as e:  # noqa: BLE001 - a parser/sympy error on untrusted text is recorded, never raised
        return ParseResult(None, f"error:{type(e).__name__}")
    return ParseResult(bool(ok), "correct" if ok else "wrong")


def _worker_main(conn: Connection, mem_bytes: int | None) -> None:
    if mem_bytes:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    import math_verify  # noqa: F401 - imported once here (about a second), before the first request's deadline starts

    conn.send("ready")
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        op, items, timeout_s = msg
        out = []
        for item in items:
            try:
                if op == "parse_gold":
                    out.append(_worker_parse_gold(item, timeout_s))
                elif op == "verify":
                    out.append(_worker_verify(item, timeout_s))
                else:
                    raise ValueError(f"unknown op {op}")
            except MemoryError:
                out.append(ParseResult(None, "crash"))
        conn.send(out)


class _Worker:
    def __init__(self, ctx: mp.context.BaseContext, mem_bytes: int | None):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, mem_bytes), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        if not self.ready:
            if not self.conn.poll(timeout_s):
                raise RuntimeError("grading worker did not start (importing math_verify took too long)")
            self.conn.recv()
            self.ready = True

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()


class GradingPool:
    """A small pool of math-verify worker processes with memoization and hard deadlines.

    ``workers`` defaults to the number of CPUs; ``timeout_s`` is math-verify's own per-call timeout,
    and a request of ``m`` items gets a hard deadline of ``m * timeout_s + slack_s`` seconds.
    """

    def __init__(
        self,
        workers: int | None = None,
        timeout_s: int = 5,
        mem_mb: int | None = 2048,
        chunk: int = 256,
        slack_s: float = 10.0,
    ):
        self.n = max(1, workers or (os.cpu_count() or 1))
        self.timeout_s = timeout_s
        self.mem_bytes = mem_mb * (1 << 20) if mem_mb else None
        self.chunk = chunk
        self.slack_s = slack_s
        self._ctx = mp.get_context("forkserver" if os.name == "posix" else "spawn")
        self._workers: list[_Worker] = []
        self._gold_memo: dict[str, ParseResult] = {}
        self._verify_memo: dict[tuple[str, str], str] = {}
        self.stats = {"calls": 0, "memo_hits": 0, "fast_path": 0, "timeouts": 0, "crashes": 0, "verify_calls": 0,
                      "verify_memo_hits": 0, "verify_fast_path": 0, "verify_sent": 0}

    def __enter__(self) -> GradingPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for w in self._workers:
            try:
                w.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            w.proc.join(timeout=2)
            if w.proc.is_alive():
                w.kill()
        self._workers = []

    def _ensure(self) -> None:
        """Start missing workers (in parallel) and wait until each has imported math-verify."""
        while len(self._workers) < self.n:
            self._workers.append(_Worker(self._ctx, self.mem_bytes))
        for w in self._workers:
            w.wait_ready()

    def start(self) -> GradingPool:
        self._ensure()
        return self

    def _run(self, op: str, items: list) -> list[ParseResult]:
        """Run ``op`` over items across workers; a chunk that misses its deadline is retried item by item."""
        self._ensure()
        size = max(1, min(self.chunk, -(-len(items) // (self.n * 4))))  # spread small batches over every worker
        chunks = [items[i : i + size] for i in range(0, len(items), size)]
        results: list[list[ParseResult] | None] = [None] * len(chunks)
        pending = list(range(len(chunks)))
        busy: dict[int, tuple[int, float]] = {}  # worker index -> (chunk index, deadline)

        while pending or busy:
            for wi in range(self.n):
                if wi not in busy and pending:
                    ci = pending.pop(0)
                    self._workers[wi].conn.send((op, chunks[ci], self.timeout_s))
                    busy[wi] = (ci, time.monotonic() + len(chunks[ci]) * self.timeout_s + self.slack_s)
            for wi, (ci, deadline) in list(busy.items()):
                w = self._workers[wi]
                if w.conn.poll(0.005):
                    try:
                        results[ci] = w.conn.recv()
                    except (EOFError, OSError):
                        results[ci] = self._after_failure(op, chunks[ci], wi)
                    del busy[wi]
                elif not w.proc.is_alive() or time.monotonic() > deadline:
                    results[ci] = self._after_failure(op, chunks[ci], wi)
                    del busy[wi]
        return [r for chunk in results for r in (chunk or [])]

    def _after_failure(self, op: str, items: list[str], wi: int) -> list[ParseResult]:
        """Replace the worker; if several items were in flight, redo them one at a time to isolate the culprit."""
        alive = self._workers[wi].proc.is_alive()
        self._workers[wi].kill()
        self._workers[wi] = _Worker(self._ctx, self.mem_bytes)
        self._workers[wi].wait_ready()
        if len(items) == 1:
            self.stats["timeouts" if alive else "crashes"] += 1
            return [ParseResult(None, "timeout" if alive else "crash")]
        saved, self.chunk = self.chunk, 1
        try:
            return self._run(op, items)
        finally:
            self.chunk = saved

    def parse_gold(self, answers: list[str]) -> list[ParseResult]:
        """Whether math-verify can parse each gold answer; memoized, plain numbers answered directly."""
        self.stats["calls"] += len(answers)
        todo = []
        for a in dict.fromkeys(answers):
            if a in self._gold_memo:
                continue
            if _PLAIN_NUMBER.match(a):
                self._gold_memo[a] = ParseResult(True, "ok")
                self.stats["fast_path"] += 1
            else:
                todo.append(a)
        if todo:
            for a, r in zip(todo, self._run("parse_gold", todo), strict=False):
                self._gold_memo[a] = r
        self.stats["memo_hits"] += len(answers) - len(todo)
        return [self._gold_memo[a] for a in answers]

    def grade(self, golds: list[str], responses: list[str]) -> list[str]:
        """One outcome per (gold, response) pair (see ``OUTCOMES``); identical pairs are graded once.

        The prediction is extracted in this process (``extract_prediction``); integer-vs-integer pairs
        are compared exactly without a worker; everything else goes to the workers, gold first.
        """
        if len(golds) != len(responses):
            raise ValueError("golds and responses differ in length")
        self.stats["verify_calls"] += len(golds)
        keys = []
        todo: dict[tuple[str, str], None] = {}
        for g, r in zip(golds, responses, strict=True):
            pred, how = extract_prediction(r)
            key = (g, pred)
            keys.append(key)
            if key in self._verify_memo or key in todo:
                self.stats["verify_memo_hits"] += 1
                continue
            if how != "tail" and _PLAIN_INT.match(g):
                inner = pred[7:-1].strip()  # \boxed{...}
                if _PLAIN_INT.match(inner):
                    self._verify_memo[key] = "correct" if int(inner) == int(g) else "wrong"
                    self.stats["verify_fast_path"] += 1
                    continue
            todo[key] = None
        if todo:
            items = list(todo)
            self.stats["verify_sent"] += len(items)
            for key, res in zip(items, self._run("verify", items), strict=True):
                outcome = res.reason if res.reason in OUTCOMES else "error"
                self._verify_memo[key] = outcome
            if len(self._verify_memo) > 1_000_000:
                self._verify_memo.clear()
        return [self._verify_memo[k] for k in keys]
