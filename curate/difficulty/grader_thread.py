"""The estimator's grader thread: it takes the engine thread's messages in batches, grades every completion of a
batch in one call of the worker-process pool (``curate.difficulty.grading.GradingPool``), gives timed-out samples
their second pass, asks the sequential rule for a problem's next round, scores and records each finished problem,
and writes every chunk as soon as its last row is in (``curate.difficulty.chunks``). ``GraderThread`` is the part of
``curate.difficulty.estimate.Estimator`` that runs in that thread."""

from __future__ import annotations

import dataclasses
import logging
import math
import queue
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from curate.difficulty.adaptive import next_round
from curate.difficulty.chunks import STAGE, Chunk, Generated, Histogram, Message, NewChunk, RunInfo, Stored, write_chunk
from curate.difficulty.engines import Completion, Engine
from curate.difficulty.extraction import final_answer
from curate.difficulty.grading import GradingPool
from curate.difficulty.store import DIFFICULTY_COLUMNS, DifficultyStore
from curate.difficulty.suspect import consensus

if TYPE_CHECKING:
    from curate.difficulty.estimate import EstimateConfig

log = logging.getLogger("curate.difficulty.estimate")
# Fixed k: a row with a timed-out sample waits for the second pass, at the end of the stage or as soon as this many
# rows wait (its chunk is written after it); adaptive rows are graded again at once, before the stopping rule.
PARK_MAX = 256


def wilson(n_correct: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default); (0, 1) when n = 0."""
    if n <= 0:
        return 0.0, 1.0
    p = n_correct / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lo = 0.0 if n_correct == 0 else max(0.0, center - half)  # exact at the ends (no 0.9999999999999999)
    hi = 1.0 if n_correct == n else min(1.0, center + half)
    return lo, hi


class GraderThread:
    """What the grader thread does for an ``Estimator`` (the attributes below are the estimator's)."""

    cfg: EstimateConfig
    out: Path
    stats: defaultdict[str, float]
    info: RunInfo
    engine: Engine | None
    store: DifficultyStore | None
    grader_version: str  # recorded in every row (``GRADER_VERSION``)
    regrade_factor: int  # the second pass's timeout, in first-pass timeouts (``REGRADE_FACTOR``)
    _next_rounds: queue.Queue
    _prior: list[float] | None
    _open: int
    _lock: threading.Lock

    def _grader_loop(self, q: queue.Queue, errors: list, bar, hist: Histogram) -> None:
        """Take messages in batches: register chunks, grade every completion of the batch in one pool call,
        score rows, and write each chunk as soon as its last row is in."""
        chunks: dict[int, Chunk] = {}
        parked: list[tuple] = []  # (chunk, row, completions, outcomes, rounds, stop reason, bucket masses)
        try:
            with GradingPool(self.cfg.grader_workers, timeout_s=self.cfg.grader_timeout_s) as pool:
                finished = False
                while not finished:
                    items: list[Message | None] = [q.get()]
                    while len(items) < 256:
                        try:
                            items.append(q.get_nowait())
                        except queue.Empty:
                            break
                    finished = None in items
                    batch = [x for x in items if x is not None]
                    for m in batch:  # registrations first: a chunk's rows may arrive in the same batch
                        if isinstance(m, NewChunk):
                            chunks[m.chunk.index] = m.chunk
                    gens = [m for m in batch if isinstance(m, Generated)]
                    outcomes = self._grade(pool, chunks, gens)
                    if self.cfg.sequential.active:  # the stopping rule must see the final verdicts: the second pass
                        self._second_pass(pool, [(chunks[gens[gi].chunk].table["answer"][gens[gi].row].as_py(),
                                                  gens[gi].completions[j].text, outs, j)
                                                 for gi, outs in enumerate(outcomes) for j, o in enumerate(outs)
                                                 if o == "timeout"])
                    for m, outs in zip(gens, outcomes, strict=True):
                        ch = chunks[m.chunk]
                        if self.cfg.sequential.active:
                            done = self._next_round(ch, m.row, m.completions, outs)
                            if done is None:
                                continue
                        else:
                            done = (m.completions, outs, None, None, None)
                        if not self.cfg.sequential.active and "timeout" in done[1]:  # the second pass is later
                            parked.append((ch, m.row, *done))
                            continue
                        self._score_and_record(pool, ch, m.row, done, hist, bar)
                    if parked and (finished or len(parked) >= PARK_MAX):
                        self._regrade(pool, parked, hist, bar)
                        parked = []
                    for m in batch:
                        if isinstance(m, Stored):
                            chunks[m.chunk].from_store.add(m.row)
                            row: dict = {k: m.scores.get(k) for k in DIFFICULTY_COLUMNS}
                            if row.get("answers") is not None and row.get("outcomes") is not None:
                                row.update(consensus(pool, row["answers"], row["outcomes"]))  # today's rule
                            self._record(chunks[m.chunk], m.row, row, hist, bar)
                    for cidx in sorted(k for k, ch in chunks.items() if not ch.todo):
                        write_chunk(self.out, chunks.pop(cidx), self.store, STAGE)
                        el = max(1e-9, time.perf_counter() - self.info.gen_started)
                        log.info("estimate: part %d written: %d problems scored, %d samples (%.1f samples/s, %.0f "
                                 "tokens/s); pass counts %s", cidx, hist.total(), self.stats["samples"],
                                 self.stats["samples"] / el, self.stats["tokens"] / el, hist.text())
                self.info.grading = dict(pool.stats)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread, which re-raises it
            errors.append(e)
            while True:  # unblock the producer
                try:
                    q.get_nowait()
                except queue.Empty:
                    break

    def _score_and_record(self, pool: GradingPool, ch: Chunk, i: int, done: tuple, hist: Histogram, bar) -> None:
        row = self._score(ch, i, *done)
        row.update(consensus(pool, row["answers"], row["outcomes"]))
        self._record(ch, i, row, hist, bar)

    def _second_pass(self, pool: GradingPool, items: list[tuple[str, str, list[str], int]]) -> None:
        """Grade (gold, response) again, one at a time, with math-verify's timeout ``REGRADE_FACTOR`` times the first
        pass's, and write each verdict into ``outcomes[j]`` (items: gold, response, outcomes, j). A sample that times
        out again stays ``timeout`` (a failure, under its own label). The pool's stats count both passes."""
        if not items:
            return
        t0 = time.perf_counter()
        verdicts = pool.regrade([g for g, *_ in items], [r for _, r, *_ in items],
                                self.regrade_factor * self.cfg.grader_timeout_s)
        for (_, _, outs, j), o in zip(items, verdicts, strict=True):
            outs[j] = o
        self.stats["grade_seconds"] += time.perf_counter() - t0

    def _regrade(self, pool: GradingPool, parked: list[tuple], hist: Histogram, bar) -> None:
        """Fixed k: the second pass over the parked rows' timed-out samples (``_second_pass``), then their rows are
        scored and recorded (their chunks can be written)."""
        self._second_pass(pool, [(ch.table["answer"][i].as_py(), comps[j].text, outs, j)
                                 for ch, i, comps, outs, *_ in parked for j, o in enumerate(outs) if o == "timeout"])
        for ch, i, *done in parked:
            self._score_and_record(pool, ch, i, tuple(done), hist, bar)

    def _grade(self, pool: GradingPool, chunks: dict[int, Chunk], gens: list[Generated]) -> list[list[str]]:
        """Outcomes of every completion of ``gens``, in one pool call (``GradingPool.grade_completions``)."""
        golds, texts, cut, sizes = [], [], [], []
        for m in gens:
            gold = chunks[m.chunk].table["answer"][m.row].as_py()
            golds += [gold] * len(m.completions)
            texts += [x.text for x in m.completions]
            cut += [x.truncated for x in m.completions]
            sizes.append(len(m.completions))
        t0 = time.perf_counter()
        flat = pool.grade_completions(golds, texts, cut)
        self.stats["grade_seconds"] += time.perf_counter() - t0
        out, at = [], 0
        for n in sizes:
            out.append(flat[at : at + n])
            at += n
        return out

    def _record(self, ch: Chunk, i: int, row: dict, hist: Histogram, bar) -> None:
        ch.scored[i] = row
        ch.todo.discard(i)
        hist.add(row["n_correct"] or 0)
        if bar is not None:
            bar.update(1)
            el = max(1e-9, time.perf_counter() - self.info.gen_started)
            bar.set_postfix_str(f"{self.stats['samples'] / el:.1f} samples/s {self.stats['tokens'] / el:.0f} tok/s "
                                f"pass counts {hist.text()}", refresh=False)

    def _next_round(self, ch: Chunk, i: int, comps: list[Completion], outs: list[str]):
        """Sequential: add a round's samples; queue the next round, or return everything drawn once it stops."""
        prev_c, prev_o, rounds = ch.drawn.get(i, ([], [], 0))
        all_c, all_o, rounds = prev_c + comps, prev_o + outs, rounds + 1
        more, reason, dec = next_round(sum(o == "correct" for o in all_o), len(all_o), self.cfg.sampling.k,
                                       self.cfg.sequential, self._prior)
        if more:
            ch.drawn[i] = (all_c, all_o, rounds)
            self._next_rounds.put(dataclasses.replace(ch.requests[i], first=len(all_o), n=more))
            return None
        ch.drawn.pop(i, None)
        with self._lock:
            self._open -= 1
        return all_c, all_o, rounds, reason, list(dec.masses) if dec is not None else None

    def _score(self, ch: Chunk, i: int, comps: list[Completion], outs: list[str], rounds: int | None = None,
               stop_reason: str | None = None, bucket_masses: list[float] | None = None) -> dict:
        s = self.cfg.sampling
        correct = [o == "correct" for o in outs]
        n_graded = sum(o in ("correct", "wrong", "no_answer") for o in outs)  # definite verdicts
        n_correct = sum(correct)
        # every sample counts: a timeout or crash is a failure (verl and Open-R1 score them 0), kept by its label
        n = len(outs)
        lo, hi = wilson(n_correct, n)
        if self.cfg.keep_responses:
            pid = ch.table["id"][i].as_py()
            ch.responses += [
                {"id": pid, "sample": j, "text": x.text, "response_tokens": x.n_tokens, "finish_reason": x.finish_reason,
                 "outcome": o}
                for j, (x, o) in enumerate(zip(comps, outs, strict=True))
            ]
        for o in outs:
            self.stats["outcome/" + o] += 1
        assert self.engine is not None
        return {
            "model": self.info.model, "model_revision": self.info.revision, "backend": self.engine.backend,
            "template": self.cfg.template, "k": n, "temperature": s.temperature, "top_p": s.top_p,
            "max_tokens": s.max_tokens, "seed": s.seed, "n_correct": n_correct, "n_graded": n_graded,
            "pass_rate": n_correct / n, "correct": correct, "pass_rate_low": lo, "pass_rate_high": hi,
            "outcomes": outs, "response_tokens": [x.n_tokens for x in comps], "truncated": [x.truncated for x in comps],
            "prompt_tokens": ch.prompt_tokens.get(i), "grader_version": self.grader_version,
            "rounds": rounds, "stop_reason": stop_reason, "bucket_masses": bucket_masses,
            "answers": [final_answer(x.text) for x in comps],
        }
