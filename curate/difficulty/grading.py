"""Grading with math-verify, in worker processes with hard timeouts. The only module importing math_verify.

Why processes: math-verify's own timeouts use ``signal.alarm``, which only works in a main thread
(outside one it raises, and a broad ``except`` then turned every score into 0 in other RL projects),
and a pathological expression can hang sympy in C code. Each worker is a separate process whose main
thread runs math-verify with its own timeout, under an address-space limit; the parent gives every
request a hard deadline and kills and replaces a worker that misses it. A timeout or a crash is an
outcome of its own (``timeout``, ``crash``), never "wrong" or "unparseable".

Gold answers are wrapped in ``$...$`` and count as parseable when math-verify returns a sympy object
(not only its string fallback). Results are memoized by their exact input strings.

    python -c "from curate.difficulty import GradingPool; print(GradingPool(1).parse_gold(['\\\\frac12', '\\\\frac{1}{']))"

One job, in one module of more than 500 lines: a verdict per (gold, response); the worker-process pool is
here because it exists only to run math-verify under hard timeouts (extraction: ``curate.difficulty.extraction``;
the verdict store: ``curate.difficulty.verdicts``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from curate.difficulty.extraction import EXPLICIT, cut_off_unanswered, extract_prediction, join_thousands

if TYPE_CHECKING:
    import pyarrow as pa

_GRADING_RULE = 6  # bump when extraction or verdict rules change: it is part of every store key and run identity


def _dist_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


# Everything that can change a verdict: math-verify and the parsers under it, and our own rule's version.
GRADER_VERSION = (f"math-verify=={_dist_version('math-verify')};sympy=={_dist_version('sympy')};"
                  f"latex2sympy2_extended=={_dist_version('latex2sympy2_extended')};gradus-grading={_GRADING_RULE}")
_PLAIN_NUMBER = re.compile(r"^[-+]?(?:\d+|\d*\.\d+)$")  # math-verify parses these (checked by a test)
# golds math-verify parses whatever the digits: integers and decimals, and fractions of integers as \frac{a}{b},
# \dfrac{a}{b}, \tfrac{a}{b} or a/b (checked on every distinct gold of the real files, tests/test_realdata.py)
# (ASCII digits only, as RE2 reads ``\d``: the gate runs the same pattern in arrow, ``plain_golds``)
_PLAIN_GOLD = re.compile(r"^[-+]?(?:\d+|\d*\.\d+|\\[dt]?frac\{\d{1,30}\}\{\d{1,30}\}|\d{1,30}/\d{1,30})$", re.ASCII)
_PLAIN_INT = re.compile(r"^-?\d{1,30}$")  # exact integer compare agrees with math-verify (checked by a test)
# Outcomes of grading one sample. Only "correct" counts; every other outcome is a failure when pass rates
# and rewards are computed (as verl and Open-R1 score a timeout or a verify exception 0), but keeps its label.
OUTCOMES = ("correct", "wrong", "no_answer", "timeout", "crash", "error")


@dataclass(frozen=True, slots=True)
class ParseResult:
    ok: bool | None  # None: timed out or crashed
    reason: str  # "ok", "unparseable", "timeout", "crash", "error:<type>"


def _worker_parse_gold(gold: str, timeout_s: int) -> ParseResult:
    from math_verify import parse
    from math_verify.errors import TimeoutException

    try:
        parsed = parse(f"${join_thousands(gold)}$", parsing_timeout=timeout_s, raise_on_error=True)
    except TimeoutException:  # subclasses BaseException: caught by name
        return ParseResult(None, "timeout")
    except Exception as e:  # noqa: BLE001 - any parser error means "unparseable", recorded with its type
        return ParseResult(False, f"error:{type(e).__name__}")
    ok = bool(parsed) and not isinstance(parsed[0], str)
    return ParseResult(ok, "ok" if ok else "unparseable")


_WORKER_GOLD: dict[str, list] = {}
_ANCHORED_CONFIG: list | None = None


def _anchored_config() -> list:
    """math-verify extraction that needs an anchor: Open-R1's accuracy-reward LaTeX config (its normalization,
    boxed first, ``try_extract_without_anchor=False``), plus plain numbers after an anchor ("Answer: 5")."""
    global _ANCHORED_CONFIG
    if _ANCHORED_CONFIG is None:
        from latex2sympy2_extended import NormalizationConfig
        from math_verify import ExprExtractionConfig, LatexExtractionConfig

        # Open-R1 also sets equations=True, which latex2sympy2_extended now deprecates (the parser handles equations)
        norm = NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True, boxed="all",
                                   units=True)
        _ANCHORED_CONFIG = [LatexExtractionConfig(normalization_config=norm, boxed_match_priority=0,
                                                  try_extract_without_anchor=False),
                            ExprExtractionConfig(try_extract_without_anchor=False)]
    return _ANCHORED_CONFIG


def _worker_verify(item: tuple, timeout_s: int) -> ParseResult:
    """Grade one (gold, prediction[, how]) item: gold parsed once per worker and passed first to ``verify``.

    Every (gold candidate, prediction candidate) pair is compared on its own, as ``verify`` does: one that
    matches makes the item ``correct``; one that fails with an error counts as not equal (``verify``'s own
    ``raise_on_error=False`` rule). One that times out makes the item ``timeout`` unless another pair matched:
    a verdict that depends on the machine's speed is never recorded as ``wrong``.
    """
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException

    gold, pred = item[0], join_thousands(item[1])
    how = item[2] if len(item) > 2 else "boxed"
    try:
        g = _WORKER_GOLD.get(gold)
        if g is None:
            g = parse(f"${join_thousands(gold)}$", parsing_timeout=timeout_s, raise_on_error=True)
            if len(_WORKER_GOLD) > 100_000:
                _WORKER_GOLD.clear()
            _WORKER_GOLD[gold] = g
        if how == "tail_any":  # the pre-anchored rule, kept only so dev/grading_rule.py can compare
            p = parse(pred, parsing_timeout=timeout_s, raise_on_error=True)
        elif how == "anchored":
            p = parse(pred, extraction_config=_anchored_config(), extraction_mode="first_match",
                      parsing_timeout=timeout_s, raise_on_error=True)
        else:
            p = parse(pred, parsing_timeout=timeout_s, raise_on_error=True)
        if not p:
            return ParseResult(False, "no_answer")
        timed_out = False
        for gi in g:
            for pj in p:
                try:
                    if verify(gi, pj, timeout_seconds=timeout_s, raise_on_error=True):
                        return ParseResult(True, "correct")
                except TimeoutException:
                    timed_out = True
                except Exception:  # noqa: BLE001 - a comparison that fails is "not equal", as in verify
                    continue
    except TimeoutException:
        return ParseResult(None, "timeout")
    except Exception as e:  # noqa: BLE001 - a parser/sympy error on untrusted text is recorded, never raised
        return ParseResult(None, f"error:{type(e).__name__}")
    return ParseResult(None, "timeout") if timed_out else ParseResult(False, "wrong")


def _worker_same(item: tuple, timeout_s: int) -> ParseResult:
    """Whether two gold answers are the same answer: each parsed as LaTeX, ``verify`` either way round."""
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException

    try:
        a = parse(f"${join_thousands(item[0])}$", parsing_timeout=timeout_s, raise_on_error=True)
        b = parse(f"${join_thousands(item[1])}$", parsing_timeout=timeout_s, raise_on_error=True)
        if not a or not b:
            return ParseResult(False, "unparseable")
        ok = verify(a, b, timeout_seconds=timeout_s, raise_on_error=False) or verify(
            b, a, timeout_seconds=timeout_s, raise_on_error=False)
    except TimeoutException:
        return ParseResult(None, "timeout")
    except Exception as e:  # noqa: BLE001 - a parser/sympy error on untrusted text is recorded, never raised
        return ParseResult(None, f"error:{type(e).__name__}")
    return ParseResult(bool(ok), "same" if ok else "different")


def _worker_main(conn: Connection, mem_bytes: int | None) -> None:
    """Serve requests ``(request id, op, items, timeout)``; answer each item as ``(request id, index, result)``.

    One reply per item lets the parent give every item its own deadline and know exactly which item a
    missed deadline belongs to; the request id lets it refuse any reply that is not for the current request.
    """
    _quiet_worker()
    if mem_bytes:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    import logging

    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # a timeout is an outcome here, not a log line
    verify(parse("$4$"), parse("\\boxed{4}"))  # warm up (imports and caches) before any deadline is running
    conn.send("ready")
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError, MemoryError):
            return  # the parent is gone, or the request cannot be held: exit; the parent replaces this worker
        if msg is None:
            return
        req_id, op, items, timeout_s = msg
        for j, item in enumerate(items):
            try:
                if op == "parse_gold":
                    res = _worker_parse_gold(item, timeout_s)
                elif op == "verify":
                    res = _worker_verify(item, timeout_s)
                elif op == "same":
                    res = _worker_same(item, timeout_s)
                else:
                    raise ValueError(f"unknown op {op}")
            except MemoryError:
                res = ParseResult(None, "crash")
            try:
                conn.send((req_id, j, res))
            except OSError:  # the parent is gone (BrokenPipeError): nothing to answer to
                return


def _quiet_worker() -> None:
    """A worker leaves interrupts to its parent and ends with it. Ctrl-C reaches the whole process group: the parent
    stops its pool and says so in one line, where each worker used to print a KeyboardInterrupt traceback. A parent
    killed outright (kill -9) takes its workers with it (Linux: the parent-death signal), where they used to live on
    and print BrokenPipeError."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: SIGTERM when the parent dies
    except (OSError, AttributeError):  # not Linux: the EOF on the pipe still ends the worker at its next request
        pass


class _Worker:
    def __init__(self, ctx, mem_bytes: int | None):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, mem_bytes), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        if not self.ready:
            try:
                if not self.conn.poll(timeout_s):
                    raise RuntimeError("grading worker did not start (importing math_verify took too long)")
                self.conn.recv()
            except (EOFError, OSError) as e:
                raise RuntimeError(f"grading worker died while starting (exit code {self.proc.exitcode}); "
                                   "is math-verify installed in this environment?") from e
            self.ready = True

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()


@dataclass
class _Job:
    """A worker's current request: which items (positions in the caller's list), how far it got, its deadline."""

    req_id: int
    positions: list[int]
    done: int
    deadline: float


def _outcome(res: ParseResult) -> str:
    """A verify item's outcome (``OUTCOMES``): its reason, or ``error`` for a parser error of any type."""
    return res.reason if res.reason in OUTCOMES else "error"


class GradingPool:
    """A small pool of math-verify worker processes with memoization and hard deadlines.

    ``workers`` defaults to the number of CPUs; ``timeout_s`` is math-verify's own per-call timeout, and
    every item gets a hard deadline of ``3 * timeout_s + slack_s`` seconds (``item_deadline_s``).
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
        self._req = 0
        self._ctx = mp.get_context("forkserver" if os.name == "posix" else "spawn")
        self._workers: list[_Worker] = []
        self._gold_memo: dict[str, ParseResult] = {}
        self._gold_known: set[str] = set()  # golds whose verdict came from an earlier run (``remember``)
        self._gold_new: dict[str, ParseResult] = {}  # verdicts the workers found in this run
        self._plain: list = []  # plain golds decided in arrow (``plain_golds``), to be counted once each
        self._verify_memo: dict[tuple[str, str, str], str] = {}
        self._same_memo: dict[tuple[str, str], bool | None] = {}
        self._regraded: set[tuple[str, str, str]] = set()  # pairs the second pass graded (``regrade``)
        self.stats = {"calls": 0, "memo_hits": 0, "fast_path": 0, "known": 0, "worker_parsed": 0, "timeouts": 0,
                      "crashes": 0, "verify_calls": 0,
                      "verify_memo_hits": 0, "verify_fast_path": 0, "verify_sent": 0, "verify_timeouts": 0,
                      "regraded": 0, "regrade_timeouts": 0, "regrade_changed": 0}

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

    @property
    def item_deadline_s(self) -> float:
        """Hard deadline for one item: gold parse, prediction parse and comparisons each get ``timeout_s``
        inside the worker (signal-based); this backstop catches work the signal cannot interrupt (C code)."""
        return 3 * self.timeout_s + self.slack_s

    def _ensure(self) -> None:
        """Start missing workers (in parallel), replace dead ones, and wait until each has imported math-verify."""
        for wi, w in enumerate(self._workers):
            if not w.proc.is_alive():  # died while idle (OOM killer, a signal): a fresh one takes its place
                w.kill()
                self._workers[wi] = _Worker(self._ctx, self.mem_bytes)
        while len(self._workers) < self.n:
            self._workers.append(_Worker(self._ctx, self.mem_bytes))
        for w in self._workers:
            w.wait_ready()

    def start(self) -> GradingPool:
        self._ensure()
        return self

    def spawn(self) -> GradingPool:
        """Start the worker processes without waiting for them: they import math-verify while the caller goes on
        (the filter's heuristics), and the first call finds them ready."""
        while len(self._workers) < self.n:
            self._workers.append(_Worker(self._ctx, self.mem_bytes))
        return self

    def _run(self, op: str, items: list) -> list[ParseResult]:
        """Run ``op`` over ``items`` on the workers; one result per item, in order.

        Every request carries a fresh id and every reply names its request and item, so a reply is never
        taken for another item's. Each item has its own hard deadline (``item_deadline_s`` after the previous
        reply, or after sending); a worker that misses it, or dies, is killed and replaced by a fresh one,
        the item in flight is recorded as ``timeout`` (or ``crash``), and the request's remaining items go
        back to the queue for whichever worker is free.
        """
        self._ensure()
        results: list[ParseResult | None] = [None] * len(items)
        size = max(1, min(self.chunk, -(-len(items) // (self.n * 4))))  # spread small batches over every worker
        pending = [list(range(i, min(i + size, len(items)))) for i in range(0, len(items), size)]
        jobs: dict[int, _Job] = {}  # worker index -> its current request
        while pending or jobs:
            for wi in range(self.n):
                if wi not in jobs and pending:
                    positions = pending.pop(0)
                    self._req += 1
                    try:
                        self._workers[wi].conn.send((self._req, op, [items[i] for i in positions], self.timeout_s))
                    except OSError:  # the worker died since its last reply: replace it, requeue the items
                        pending.insert(0, positions)
                        self._replace(wi)
                        continue
                    jobs[wi] = _Job(self._req, positions, 0, time.monotonic() + self.item_deadline_s)
            now = time.monotonic()
            timeout = max(0.0, min(j.deadline for j in jobs.values()) - now)
            by_handle: dict[Any, int] = {}
            for wi in jobs:
                w = self._workers[wi]
                by_handle[w.conn] = wi
                by_handle[w.proc.sentinel] = wi
            for handle in wait(list(by_handle), timeout=timeout):
                wi = by_handle[handle]
                if wi in jobs and handle is self._workers[wi].conn:
                    self._drain(wi, jobs, results)
            now = time.monotonic()
            for wi, job in list(jobs.items()):
                w = self._workers[wi]
                if w.proc.is_alive() and now <= job.deadline:
                    continue
                intact = self._drain(wi, jobs, results)  # replies that arrived since: never lose a verdict
                if wi not in jobs:
                    continue
                dead = not intact or not w.proc.is_alive()
                if not dead and time.monotonic() <= job.deadline:
                    continue
                self.stats["crashes" if dead else "timeouts"] += 1
                results[job.positions[job.done]] = ParseResult(None, "crash" if dead else "timeout")
                rest = job.positions[job.done + 1 :]
                if rest:
                    pending.insert(0, rest)
                del jobs[wi]
                self._replace(wi)  # a fresh worker: nothing the old one still had queued can be read later
        return results  # type: ignore[return-value]

    def _replace(self, wi: int) -> None:
        self._workers[wi].kill()
        self._workers[wi] = _Worker(self._ctx, self.mem_bytes)
        self._workers[wi].wait_ready()

    def _drain(self, wi: int, jobs: dict[int, _Job], results: list) -> bool:
        """Read every reply worker ``wi`` has sent; False when its pipe broke (the worker died)."""
        job, conn = jobs[wi], self._workers[wi].conn
        try:
            while conn.poll():
                req_id, j, res = conn.recv()
                if req_id != job.req_id or j != job.done:
                    raise RuntimeError(f"grading worker answered request {req_id} item {j}, "
                                       f"expected request {job.req_id} item {job.done}")
                results[job.positions[j]] = res
                job.done += 1
                job.deadline = time.monotonic() + self.item_deadline_s
                if job.done == len(job.positions):
                    del jobs[wi]
                    return True
        except (EOFError, OSError):
            return False
        return True

    def remember(self, verdicts: dict[str, ParseResult]) -> None:
        """Take gold verdicts found by earlier runs (``GoldVerdicts.load``): those golds are not parsed again."""
        for g, r in verdicts.items():
            if g not in self._gold_memo:
                self._gold_memo[g] = r
                self._gold_known.add(g)

    def new_gold_verdicts(self) -> dict[str, ParseResult]:
        """The gold verdicts the workers found in this run (for ``GoldVerdicts.append``)."""
        return dict(self._gold_new)

    def plain_golds(self, golds: pa.Array) -> pa.Array:
        """Which of ``golds`` (distinct strings) are plain (``_PLAIN_GOLD``), decided in arrow: those are parseable
        without a worker. They are remembered to be counted once each in ``stats["fast_path"]`` (``count_plain``)."""
        import pyarrow.compute as pc

        plain = pc.match_substring_regex(golds, _PLAIN_GOLD.pattern)
        self._plain.append(golds.filter(plain))
        return plain

    def count_plain(self) -> None:
        """Add the distinct plain golds seen by ``plain_golds`` to ``stats["fast_path"]`` (once per run)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self._plain:
            self.stats["fast_path"] += len(pc.unique(pa.chunked_array(self._plain, pa.string())))
            self._plain = []

    def parse_gold(self, answers: list[str]) -> list[ParseResult]:
        """Whether math-verify can parse each gold answer; memoized, plain numbers answered directly, golds known
        from earlier runs (``remember``) not parsed again. Stats: ``fast_path``, ``known`` and ``worker_parsed``
        count distinct golds, ``calls`` every one asked."""
        self.stats["calls"] += len(answers)
        todo = []
        for a in dict.fromkeys(answers):
            if a in self._gold_memo:
                if a in self._gold_known:
                    self._gold_known.discard(a)
                    self.stats["known"] += 1
                continue
            if _PLAIN_GOLD.match(a):
                self._gold_memo[a] = ParseResult(True, "ok")
                self.stats["fast_path"] += 1
            else:
                todo.append(a)
        if todo:
            self.stats["worker_parsed"] += len(todo)
            for a, r in zip(todo, self._run("parse_gold", todo), strict=False):
                self._gold_memo[a] = r
                self._gold_new[a] = r
        self.stats["memo_hits"] += len(answers) - len(todo)
        return [self._gold_memo[a] for a in answers]

    def same_answer(self, pairs: list[tuple[str, str]]) -> list[bool | None]:
        """Whether each pair of gold answers is one answer (``073`` and ``73``, ``\\frac13`` and ``\\frac{1}{3}``,
        ``x+11`` and ``11+x``); None where math-verify timed out or failed. Equal strings and plain numbers
        are answered here; a missing gold gives None; memoized."""
        out: list[bool | None] = []
        todo: dict[tuple[str, str], None] = {}
        keys = []
        for a, b in pairs:
            a, b = (a or "").strip(), (b or "").strip()
            key = (a, b) if a <= b else (b, a)
            keys.append(key)
            if key in self._same_memo or key in todo:
                continue
            if not a or not b:
                self._same_memo[key] = None  # a missing gold is neither the same answer nor another one
            elif re.sub(r"\s+", "", a) == re.sub(r"\s+", "", b):
                self._same_memo[key] = True
            elif _PLAIN_INT.match(a) and _PLAIN_INT.match(b):
                self._same_memo[key] = int(a) == int(b)  # exact: 20-digit integers are not floats
            elif _PLAIN_NUMBER.match(a) and _PLAIN_NUMBER.match(b):
                self._same_memo[key] = float(a) == float(b)
            else:
                todo[key] = None
        if todo:
            items = list(todo)
            for key, res in zip(items, self._run("same", items), strict=True):
                self._same_memo[key] = res.ok
        out = [self._same_memo[k] for k in keys]
        return out

    def grade(self, golds: list[str], responses: list[str]) -> list[str]:
        """One outcome per (gold, response) pair (see ``OUTCOMES``); identical pairs are graded once.

        The prediction is extracted in this process (``extract_prediction``); integer-vs-integer pairs
        are compared exactly without a worker; everything else goes to the workers, gold first.
        """
        if len(golds) != len(responses):
            raise ValueError("golds and responses differ in length")
        self.stats["verify_calls"] += len(golds)
        keys = []
        todo: dict[tuple[str, str, str], None] = {}
        for g, r in zip(golds, responses, strict=True):
            pred, how = extract_prediction(r)
            key = (g, pred, how)
            keys.append(key)
            if key in self._verify_memo or key in todo:
                self.stats["verify_memo_hits"] += 1
                continue
            if how in EXPLICIT and _PLAIN_INT.match(g):
                inner = pred[7:-1].strip() if how == "boxed" else pred.strip("$")  # \boxed{...}, $...$
                if _PLAIN_INT.match(inner):
                    self._verify_memo[key] = "correct" if int(inner) == int(g) else "wrong"
                    self.stats["verify_fast_path"] += 1
                    continue
            todo[key] = None
        if todo:
            items = list(todo)
            self.stats["verify_sent"] += len(items)
            for key, res in zip(items, self._run("verify", items), strict=True):
                outcome = _outcome(res)
                self.stats["verify_timeouts"] += outcome == "timeout"
                self._verify_memo[key] = outcome
        out = [self._verify_memo[k] for k in keys]
        if len(self._verify_memo) > 1_000_000:  # bounded: cleared after this call's verdicts are read
            self._verify_memo.clear()
        return out

    def grade_completions(self, golds: list[str], texts: list[str], truncated: list[bool]) -> list[str]:
        """``grade`` for a model's completions, the one rule of difficulty estimation and of training rewards: a
        completion cut off by the token limit before any explicit answer is ``no_answer`` without grading
        (``cut_off_unanswered``); the rest are graded."""
        out = ["no_answer" if cut_off_unanswered(t, tr) else "" for t, tr in zip(texts, truncated, strict=True)]
        todo = [i for i, o in enumerate(out) if not o]
        if todo:
            for i, o in zip(todo, self.grade([golds[i] for i in todo], [texts[i] for i in todo]), strict=True):
                out[i] = o
        return out

    def regrade(self, golds: list[str], responses: list[str], timeout_s: int) -> list[str]:
        """Grade pairs again one at a time, with math-verify's timeout raised to ``timeout_s`` (the hard deadline
        scales with it): the second pass over pairs that timed out under load. Each pair is alone on one worker,
        so its verdict depends on its own cost, not on what else the machine is doing. What it finds replaces
        the first verdict in the memo; the pool's stats count the pairs, those still timed out, those changed."""
        before, self.timeout_s = self.timeout_s, timeout_s
        out = []
        try:
            for g, r in zip(golds, responses, strict=True):
                pred, how = extract_prediction(r)
                key = (g, pred, how)
                if key in self._regraded and key in self._verify_memo:  # graded again before: its verdict stands
                    out.append(self._verify_memo[key])
                    continue
                first = self._verify_memo.get(key)
                outcome = _outcome(self._run("verify", [key])[0])
                self._verify_memo[key] = outcome
                self.stats["regraded"] += 1
                self.stats["regrade_timeouts"] += outcome == "timeout"
                self.stats["regrade_changed"] += first is not None and outcome != first
                self._regraded.add(key)
                out.append(outcome)
        finally:
            self.timeout_s = before
        return out
