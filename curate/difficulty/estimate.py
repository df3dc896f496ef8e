"""Difficulty estimation: k high-temperature samples per problem, graded by math-verify, pass rate stored.

The recipe is Kimi k1.5's (Sec. 2.3.1 of the report): sample ten answers per problem at a relatively high
temperature and use the pass rate as the difficulty (lower = harder). This module drives an engine
(``curate.difficulty.engines``) and the grading pool (``curate.difficulty.grading``) over curated shards:

- the engine runs in the main thread and is kept full (``Engine.stream``); each finished problem goes to a
  grader thread (``curate.difficulty.grader_thread``) that grades it in worker processes and writes shards, so
  grading overlaps generation;
- input rows are cut into fixed chunks of ``chunk_rows`` (``curate.difficulty.chunks``); chunk ``c`` becomes
  ``kept/part_{c:06d}.parquet``
  (written last, tmp then rename), plus ``rejected/`` and, with ``keep_responses``, ``responses/`` shards.
  A kept part on disk is a finished chunk: a killed run, started again, skips those and redoes the rest;
  no row is duplicated or lost (the manifest's conservation check counts them);
- a response cut off by ``max_tokens`` before any boxed (or ``<answer>``) answer is ``no_answer`` without
  grading: math-verify's fallback would otherwise read the last number of unfinished text as the answer;
- each sample's seed derives from (seed, problem id, sample index), so a resumed run draws what an
  uninterrupted one would (vLLM), whatever the batching;
- a persistent difficulty store keyed by (problem id, model + revision, template, sampling parameters,
  grader) lets later runs copy scores instead of sampling again.

    gradus estimate runs/demo/4_dedup --out runs/demo/5_difficulty --backend vllm --k 10 --temperature 1.0

One job, in one module of more than 500 lines: the run (setup, the engine thread, shares and the manifest;
the grader thread: ``curate.difficulty.grader_thread``; chunks: ``curate.difficulty.chunks``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.core.config import ConfigError, check_choice
from curate.core.manifest import Manifest
from curate.core.runner import Runner, StageError, input_entries
from curate.core.shards import file_sha256, shard_paths, stage_dir, write_json_atomic
from curate.difficulty import templates
from curate.difficulty.adaptive import (
    AdaptiveConfig,
    reliability_check,
)
from curate.difficulty.chunks import (
    STAGE,
    Chunk,
    Generated,
    Histogram,
    NewChunk,
    RunInfo,
    Stored,
    count_chunks,
    progress_bar,
    read_chunks,
)
from curate.difficulty.engines import Engine, GenRequest, SamplingConfig, make_engine
from curate.difficulty.grader_thread import GraderThread, wilson
from curate.difficulty.grading import GRADER_VERSION, OUTCOMES, GradingPool
from curate.difficulty.store import (
    SCORING_RULE,
    DifficultyStore,
    EstimateError,
    fit_store_prior,
    param_key,
    row_key,
    store_identity,
    template_fingerprint,
)
from curate.difficulty.suspect import SUSPECT_RULE, suspect_recall

log = logging.getLogger(__name__)
# A sample whose grading timed out is graded again at the end of the stage, alone, with this many times the
# first pass's math-verify timeout (30 s at the default 5 s): a verdict should depend on the pair, not on the load.
REGRADE_FACTOR = 6  # changes verdicts: bump _GRADING_RULE in grading.py (part of every store key) when it changes
# Fixed k: a row with a timed-out sample waits for the second pass, at the end of the stage or as soon as this many
# rows wait (its chunk is written after it); adaptive rows are graded again at once, before the stopping rule.


@dataclass(frozen=True)
class EstimateConfig:
    model: str | None = None  # model folder or hub id; None: the bundled SmolLM2-135M-Instruct (converted once)
    backend: str = "vllm"  # vllm (in process) | hf (transformers generate) | openai (any OpenAI-compatible server)
    template: str = "chat"  # chat (the model's own) | qwen_math | r1 | none (Dr. GRPO's comparison) | fewshot
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    chunk_rows: int = 64  # rows per output part, the unit of resume (our choice: a part every minute or so on CPU)
    keep_responses: bool = False  # also write every response to responses/
    base_url: str | None = None  # OpenAI-compatible server, e.g. http://localhost:8000/v1 (backend openai)
    grader_workers: int | None = None  # math-verify worker processes; None: one per CPU
    grader_timeout_s: int = 5  # math-verify's seconds per parse/verify (its own default)
    store: str | None = "default"  # difficulty store folder; "default": under $GRADUS_HOME; None: no store
    model_revision: str | None = None  # hub revision to record (and key the store by) when the model is not a local folder
    limit: int | None = None  # score only the first N input rows (a sample; the manifest says so)
    concurrency: int = 8  # backend openai: requests in flight (our choice; raise it for a fleet)
    sequential: AdaptiveConfig = field(default_factory=AdaptiveConfig)  # adaptive sampling, resampling of the ends
    device: str = "auto"  # auto | cuda | cpu (vllm, hf); cuda without a GPU is an error, never a CPU run
    # vLLM's own engine arguments over gradus's defaults, e.g. {tensor_parallel_size = 8, gpu_memory_utilization =
    # 0.9, max_model_len = 8192}; on the command line --engine-args KEY=VALUE (repeatable). Checked against vLLM's names
    engine_args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        from curate.difficulty.engines import BACKENDS

        check_choice("backend", self.backend, BACKENDS)
        check_choice("template", self.template, templates.TEMPLATES)
        for name in ("chunk_rows", "grader_timeout_s", "concurrency"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        if self.limit is not None and self.limit < 1:
            raise ConfigError("limit must be >= 1")
        if self.backend == "openai" and not self.base_url:
            raise ConfigError("backend openai needs base_url (e.g. http://localhost:8000/v1)")
        from curate.difficulty.devices import DEVICES

        check_choice("device", self.device, DEVICES)
        if self.engine_args and self.backend != "vllm":
            raise ConfigError(f"engine_args are vLLM's engine arguments: backend {self.backend} takes none")
        q = self.sequential
        if q.resample_ends and not q.adaptive and q.k_max <= self.sampling.k:
            raise ConfigError(f"resample_ends needs k_max ({q.k_max}) above k ({self.sampling.k})")

    def as_dict(self) -> dict:
        d = asdict(self)
        d["sampling"] = self.sampling.as_dict()
        if not self.sequential.active:
            d.pop("sequential")  # fixed k: the identity of every run before sequential sampling existed
        for name, unset in (("device", "auto"), ("engine_args", {})):  # recorded where given, as new settings are
            if d[name] == unset:
                d.pop(name)
        return d


class Estimator(GraderThread):
    """One estimation run into ``out``; see the module docstring for the layout and guarantees."""

    def __init__(self, inputs: list[Path], out: Path, cfg: EstimateConfig, engine: Engine | None = None,
                 progress: bool = True):
        self.inputs = [stage_dir(Path(p)) for p in inputs]
        self.out = Path(out)
        self.cfg = cfg
        self._engine = engine
        self.progress = progress
        self.stats: defaultdict[str, float] = defaultdict(float)  # counts and seconds of this run
        self.info = RunInfo()
        self.engine: Engine | None = None
        self.store: DifficultyStore | None = None
        self._next_rounds: queue.Queue = queue.Queue()  # sequential: later rounds, from the grader thread
        self._prior: list[float] | None = None  # adaptive, prior = store: the fitted prior on the grid
        self._open = 0  # sequential: problems sent and not yet stopped
        self._lock = threading.Lock()
        self.grader_version = GRADER_VERSION
        self.regrade_factor = REGRADE_FACTOR

    # ---- setup -------------------------------------------------------------------------------------
    def _config(self) -> dict:
        """The stage's identity besides its inputs: every setting that changes a row, and the grader."""
        run_cfg = self.cfg.as_dict()
        for k in ("grader_workers", "store", "concurrency"):  # how, not what
            run_cfg.pop(k)
        # what else changes a verdict: a resumed or re-run stage never mixes graders or scoring rules
        run_cfg["grader_version"] = GRADER_VERSION
        run_cfg["scoring_rule"] = SCORING_RULE
        run_cfg["suspect_rule"] = SUSPECT_RULE
        return run_cfg

    def _resolve_model(self) -> None:
        """The model's name and exact revision before anything else: they are part of the stage's identity, so a
        checkpoint folder overwritten in place is a new estimate, never a skipped or resumed old one."""
        from curate.difficulty.models import model_revision, resolve_model

        cfg, info = self.cfg, self.info
        if self._engine is not None:
            info.model, path = self._engine.model_name, self._engine.model_path
        elif cfg.backend == "openai":
            info.model, path = cfg.model or "default", None
        else:
            path, info.model = resolve_model(cfg.model)
        info.revision = cfg.model_revision or (model_revision(path) if path else "unresolved")

    def _runner(self, force: bool = False) -> Runner:
        self._resolve_model()
        config = {**self._config(), "model_name": self.info.model, "model_revision_resolved": self.info.revision}
        return Runner(STAGE, self.out, input_entries(self.inputs), config, force, input_folders=self.inputs)

    def _done(self) -> set[int]:
        return {int(p.stem.split("_")[1]) for p in shard_paths(self.out / "kept")}

    def _claim(self, force: bool) -> tuple[Runner, Manifest | None]:
        """The stage's runner, and the complete output already there (nothing to do) or None once the folder is
        claimed (finished parts of the same identity kept for resuming)."""
        runner = self._runner(force)
        done_before = runner.previous()
        if done_before is None:
            runner.begin(keep_parts=True)
        return runner, done_before

    def run(self, force: bool = False) -> Manifest:
        runner = self._runner(force)
        done_before = runner.previous()
        if done_before is not None:
            return done_before
        with runner.hold():  # one writer per folder (curate.core.runner)
            runner.begin(keep_parts=True)
            done = self._done()
            self._generate(done)
            return self._finish(runner, len(done))

    # ---- one run split into shares (the flow fans them out, one engine each) -------------------------
    def begin(self, force: bool = False) -> Manifest | None:
        """Claim the output folder for a shared run; returns the complete output if there is one (nothing to do)."""
        return self._claim(force)[1]

    def run_share(self, worker: int, workers: int) -> dict:
        """Score chunk ``c`` for every ``c % workers == worker`` not already on disk, with an engine of its own.

        Per-sample seeds depend on the problem and the sample index only, so the shares together draw exactly what
        one process draws; what this share did comes back as a small dict for ``finish_shares``."""
        if not 0 <= worker < workers:
            raise EstimateError(f"worker {worker} is not one of 0..{workers - 1}")
        self._resolve_model()
        done = self._done()
        self._generate(done, lambda c: c % workers == worker)
        mine = [c for c in done if c % workers == worker]
        return {"worker": worker, "stats": dict(self.stats), "chunks_done_before": len(mine), "info": asdict(self.info)}

    def finish_shares(self, shares: list[dict]) -> Manifest:
        """The manifest of a shared run, once every share has returned (every chunk checked on disk)."""
        runner = self._runner()
        total = count_chunks(self.inputs, self.cfg.chunk_rows, self.cfg.limit)
        missing = sorted(set(range(total)) - self._done())
        if missing:
            raise EstimateError(f"{len(missing)} chunk(s) not scored ({missing[:5]}...): a share did not finish; "
                                "run it again (finished chunks are kept)")
        stats: defaultdict[str, float] = defaultdict(float)
        for sh in shares:
            for k, v in sh["stats"].items():
                if k == "generate_seconds":  # the shares run side by side: the run took as long as the slowest
                    stats[k] = max(stats[k], v)
                elif k not in ("chunks_total", "chunks_done_before"):
                    stats[k] += v
        stats["chunks_total"] = total
        self.stats = stats
        infos = [sh["info"] for sh in sorted(shares, key=lambda x: x["worker"]) if sh["info"].get("sampler")]
        if infos:
            first = infos[0]
            self.info.param_key, self.info.store_note = first["param_key"], first["store_note"]
            self.info.sampler = first["sampler"]
            self.info.prior = first.get("prior")
            grading: Counter = Counter()
            for i in infos:
                grading.update({k: v for k, v in (i.get("grading") or {}).items() if isinstance(v, int | float)})
            self.info.grading = dict(grading)
        self.info.shares = len(shares)
        return self._finish(runner, sum(sh["chunks_done_before"] for sh in shares))

    # ---- the run -------------------------------------------------------------------------------------
    def _generate(self, done: set[int], mine: Callable[[int], bool] | None = None) -> None:
        cfg, s = self.cfg, self.cfg.sampling
        all_chunks = list(read_chunks(self.inputs, cfg.chunk_rows, cfg.limit))
        todo_chunks = [(i, t) for i, t in enumerate(all_chunks) if i not in done and (mine is None or mine(i))]
        self.stats["chunks_total"] = len(all_chunks)
        self.stats["chunks_done_before"] = len(done)
        if not todo_chunks:
            return
        extra: dict[str, Any] = {"concurrency": cfg.concurrency} if cfg.backend == "openai" else {"device": cfg.device}
        if cfg.backend == "vllm":
            extra.update(cfg.engine_args)
        engine = self._engine or make_engine(cfg.backend, cfg.model, s, base_url=cfg.base_url, **extra)
        self.engine = engine
        info = self.info
        info.sampler = engine.info()
        identity = store_identity(info.model or engine.model_name, info.revision or "unresolved", cfg.template,
                                  template_fingerprint(cfg.template, engine.tokenizer), s, cfg.grader_timeout_s,
                                  base_url=cfg.base_url if cfg.backend == "openai" else None, grader=GRADER_VERSION,
                                  sequential=cfg.sequential)
        if cfg.sequential.adaptive and cfg.sequential.prior == "store":
            identity["prior"] = self._store_prior(identity, all_chunks)  # the fitted prior decides when rows stop
        info.param_key = param_key(identity)
        store = None
        info.store_note = "off (--no-store)" if not cfg.store else "on"
        if cfg.store and info.revision == "unresolved":
            # a hub id not in the local cache, or a server: "unresolved" would match any weights under that name
            info.store_note = "off: the model revision is unresolved (pass --model-revision to use the store)"
            log.warning("difficulty store %s", info.store_note)
        elif cfg.store:
            root = self._store_root()
            assert root is not None
            store = DifficultyStore(root, identity)
            store.load()
        self.store = store

        q: queue.Queue = queue.Queue(maxsize=4096)
        errors: list[BaseException] = []
        n_rows = sum(t.num_rows for _, t in todo_chunks)
        bar = progress_bar(n_rows, self.progress)
        hist = Histogram(s.k)
        grader = threading.Thread(target=self._grader_loop, args=(q, errors, bar, hist), name="gradus-grader", daemon=True)
        grader.start()
        info.gen_started = time.perf_counter()
        try:
            from curate.core.stop import check

            for rid, comps in engine.stream(self._requests(todo_chunks, q, errors)):
                if errors:
                    break
                check()  # a stop asked for: finished parts are on disk, the run resumes from them
                c, i = (int(x) for x in rid.split(":", 2)[:2])
                self.stats["samples"] += len(comps)
                self.stats["tokens"] += sum(x.n_tokens for x in comps)
                q.put(Generated(c, i, comps))
        finally:
            q.put(None)
            grader.join()
            if bar is not None:
                bar.close()
            if self._engine is None:
                engine.close()
        if errors:
            raise errors[0]
        self.stats["generate_seconds"] = round(time.perf_counter() - info.gen_started, 3)

    def _store_root(self) -> Path | None:
        from curate.difficulty.models import cache_dir

        return cache_dir(self.cfg.store, "difficulty_store") if self.cfg.store else None

    def _store_prior(self, identity: dict, chunks: list[pa.Table]) -> str | None:
        """Fit (or, resuming, read back) the run's prior: ``OUT/prior.json``, written once under a lock, so every
        share and every resumed run of this folder stops its problems under the same prior. Its hash goes into the
        store key: rows stopped under one prior are never copied into a run under another."""
        import fcntl

        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / "prior.json"
        from curate.core.errors import open_no_follow

        with open(open_no_follow(self.out / ".prior.lock", os.O_RDWR | os.O_CREAT)) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.exists():
                rec = json.loads(path.read_text())
            else:
                root = self._store_root()
                own = {i for t in chunks for i in t["id"].to_pylist()}  # the problems, whatever their golds say
                if root is None:
                    rec = {"kind": "jeffreys", "rows": 0, "note": "no difficulty store (--no-store): Jeffreys"}
                elif identity.get("revision") == "unresolved":
                    rec = {"kind": "jeffreys", "rows": 0,
                           "note": "the model revision is unresolved, so no stored rows are known to be its: Jeffreys"}
                else:
                    rec = fit_store_prior(root, identity, own)
                write_json_atomic(path, rec)
        if rec.get("note"):
            log.warning("adaptive prior: %s", rec["note"])
        self._prior = rec.get("weights")
        self.info.prior = {k: v for k, v in rec.items() if k != "weights"}
        return rec.get("sha")

    def _requests(self, chunks: list[tuple[int, pa.Table]], q: queue.Queue, errors: list) -> Iterator[GenRequest | None]:
        cfg, s = self.cfg, self.cfg.sampling
        engine, store = self.engine, self.store
        assert engine is not None
        special = templates.adds_special_tokens(cfg.template)
        for c, table in chunks:
            if errors:
                return
            ids = table["id"].to_pylist()
            problems = table["problem"].to_pylist()
            answers = table["answer"].to_pylist() if "answer" in table.column_names else [None] * table.num_rows
            reqs: list[tuple[int, GenRequest]] = []
            rejected: dict[int, tuple[str, str]] = {}
            ptoks: dict[int, int | None] = {}
            hits: dict[int, dict] = {}
            for i, (pid, prob, ans) in enumerate(zip(ids, problems, answers, strict=True)):
                if ans is None or not str(ans).strip():
                    rejected[i] = ("no_gold", "no gold answer to grade against")
                    continue
                msgs = templates.messages(cfg.template, prob)
                if engine.tokenizer is not None:
                    req = engine.prepare(f"{c}:{i}:{pid}", templates.render(cfg.template, prob, engine.tokenizer), special,
                                          msgs, seed_key=pid)
                    n_prompt = len(req.prompt_ids or [])
                    ptoks[i] = n_prompt
                    if n_prompt > s.max_prompt_tokens:  # checked before the store: a stored row obeys the same limit
                        rejected[i] = ("prompt_too_long", f"{n_prompt} prompt tokens > max_prompt_tokens {s.max_prompt_tokens}")
                        continue
                else:
                    chat = cfg.template in templates.MESSAGE_TEMPLATES  # a chat endpoint applies the model's markup
                    text = prob if chat else templates.render(cfg.template, prob)
                    req = GenRequest(f"{c}:{i}:{pid}", text, None, msgs if chat else None,
                                     seed_key=pid)
                    ptoks[i] = None
                row = store.get(prob, str(ans)) if store is not None else None
                if row is not None:
                    hits[i] = row
                    continue
                reqs.append((i, req))
            todo = {i for i, _ in reqs} | set(hits)
            seq = cfg.sequential
            if seq.adaptive:
                reqs = [(i, dataclasses.replace(r, n=seq.k_first)) for i, r in reqs]
            ch = Chunk(c, table, todo, rejected, ptoks, requests=dict(reqs) if seq.active else {})
            if seq.active:
                with self._lock:
                    self._open += len(reqs)
            q.put(NewChunk(ch))
            for i, row in hits.items():
                q.put(Stored(c, i, row))
            self.stats["store_hits"] += len(hits)
            for _, req in reqs:
                yield from self._follow_ups()  # later rounds first: they finish problems and free their chunks
                yield req
        if cfg.sequential.active:  # every first round is out: send later rounds until every problem has stopped
            while not errors:
                with self._lock:
                    if self._open == 0:
                        return
                got = list(self._follow_ups())
                yield from got
                if not got:
                    yield None  # nothing to send now; the engine keeps stepping what it has

    def _follow_ups(self) -> Iterator[GenRequest]:
        while True:
            try:
                yield self._next_rounds.get_nowait()
            except queue.Empty:
                return


    # ---- the manifest ---------------------------------------------------------------------------------
    def _sequential_stats(self, t: pa.Table | None) -> dict:
        """Samples per problem, stopping reasons, posterior buckets and what resampling the ends found (``t``: the
        kept rows, read by ``_finish`` with the columns this needs)."""
        from curate.difficulty.adaptive import BUCKETS

        seq = self.cfg.sequential
        settings = asdict(seq)
        if t is None or not t.num_rows:
            return {"settings": settings}
        ks = t["k"].to_pylist()
        out: dict = {"settings": settings, "mean_samples": round(sum(ks) / len(ks), 3),
                     "samples_histogram": dict(sorted(Counter(ks).items())),
                     "stop_reasons": dict(Counter(t["stop_reason"].to_pylist()))}
        probs = [p for p in t["bucket_masses"].to_pylist() if p]
        if probs:
            out["posterior_buckets"] = dict(Counter(BUCKETS[max(range(len(p)), key=p.__getitem__)] for p in probs))
        if seq.adaptive:
            saved = self.out / "prior.json"
            weights = self._prior
            if saved.exists() and (self.info.prior is None or weights is None):  # resumed with nothing to generate
                rec = json.loads(saved.read_text())
                self.info.prior = self.info.prior or {k: v for k, v in rec.items() if k != "weights"}
                weights = rec.get("weights")
            out["prior"] = self.info.prior or {"kind": "jeffreys"}
            # the stored masses read as probabilities? on a model of the run's own problems (adaptive.reliability_check)
            out["reliability"] = reliability_check(t["n_correct"].to_pylist(), ks, seq, weights)
        if seq.resample_ends:
            out["ends"] = _ends_report(t["correct"].to_pylist(), seq.k_first if seq.adaptive else self.cfg.sampling.k)
        return out

    def _suspect_check(self, kept: pa.Table | None) -> dict:
        """How well the suspect-gold rule would catch a wrong gold on this run's own samples (``suspect_recall``)."""
        answers = kept["answers"].to_pylist() if kept is not None else []
        outcomes = kept["outcomes"].to_pylist() if kept is not None else []
        with GradingPool(1, timeout_s=self.cfg.grader_timeout_s) as pool:  # a worker starts only for a non-plain pair
            return suspect_recall(pool, answers, outcomes)

    def _finish(self, runner: Runner, resumed: int) -> Manifest:
        kept_paths, rej_paths = shard_paths(self.out / "kept"), shard_paths(self.out / "rejected")
        cols = ["source", "n_correct", "n_graded", "outcomes", "truncated", "response_tokens", "k", "suspect_gold",
                "answers"]
        if self.cfg.sequential.active:
            cols += ["correct", "stop_reason", "bucket_masses"]
        kept = pa.concat_tables([pq.read_table(p, columns=cols) for p in kept_paths]) if kept_paths else None
        rej = pa.concat_tables([pq.read_table(p, columns=["source", "reject_reason"]) for p in rej_paths]) if rej_paths else None
        n_kept = kept.num_rows if kept is not None else 0
        n_rej = rej.num_rows if rej is not None else 0
        upstream = runner.expected_rows_in()
        expected = min(upstream, self.cfg.limit) if upstream is not None and self.cfg.limit is not None else upstream
        reasons = Counter(rej["reject_reason"].to_pylist()) if rej is not None else Counter()
        by_source: dict[str, Counter] = {}
        hist: dict[str, int] = {}
        outcomes: dict[str, int] = {}
        pass_counts_by_source: dict[str, Counter] = {}
        trunc_rate = mean_tokens = None
        if kept is not None and n_kept:
            hist = {str(k): v for k, v in sorted(Counter(kept["n_correct"].to_pylist()).items())}
            outcomes = dict(Counter(pc.list_flatten(kept["outcomes"]).to_pylist()))
            tr = pc.list_flatten(kept["truncated"])
            trunc_rate = round(pc.mean(tr.cast(pa.float64())).as_py(), 4) if len(tr) else None
            rt = pc.list_flatten(kept["response_tokens"])
            mean_tokens = round(pc.mean(rt).as_py(), 1) if len(rt) else None
            for src, nc in zip(kept["source"].to_pylist(), kept["n_correct"].to_pylist(), strict=True):
                by_source.setdefault(src, Counter()).update({"in": 1, "kept": 1})
                pass_counts_by_source.setdefault(src, Counter())[str(nc)] += 1
        if rej is not None:
            for src, reason in zip(rej["source"].to_pylist(), rej["reject_reason"].to_pylist(), strict=True):
                by_source.setdefault(src, Counter()).update({"in": 1, f"rejected/{reason}": 1})
        s = self.cfg.sampling
        seq_stats = self._sequential_stats(kept) if self.cfg.sequential.active else None
        gen_s = self.stats.get("generate_seconds") or 0
        stats = {
            "model": self.info.model, "model_revision": self.info.revision,
            "param_key": self.info.param_key, "grader_version": GRADER_VERSION,
            "store": self.info.store_note, "k": s.k,
            "pass_count_histogram": hist, "sample_outcomes": outcomes,
            "truncation_rate": trunc_rate, "mean_response_tokens": mean_tokens,
            "suspect_gold": int(pc.sum(pc.fill_null(kept["suspect_gold"], False)).as_py() or 0) if kept is not None else 0,
            "suspect_gold_check": self._suspect_check(kept),
            "pass_counts_by_source": {k: dict(sorted(v.items(), key=lambda kv: int(kv[0])))
                                      for k, v in sorted(pass_counts_by_source.items())},
            "this_run": {
                "chunks_total": int(self.stats["chunks_total"]), "chunks_already_done": resumed,
                "store_hits": int(self.stats["store_hits"]),
                "samples": int(self.stats["samples"]), "tokens": int(self.stats["tokens"]),
                "generate_seconds": gen_s, "grade_seconds": round(self.stats.get("grade_seconds", 0), 3),
                "tokens_per_s": round(self.stats["tokens"] / gen_s, 1) if gen_s else None,
                "grading": self.info.grading,
                "sampler": self.info.sampler,
                "shares": self.info.shares,
            },
        }
        if seq_stats is not None:
            stats["sequential"] = seq_stats
        kept_shards = [{"path": p.name, "rows": pq.ParquetFile(p).metadata.num_rows, "sha256": file_sha256(p)}
                       for p in kept_paths]
        rej_shards = [{"path": p.name, "rows": pq.ParquetFile(p).metadata.num_rows} for p in rej_paths]
        try:
            return runner.finish(n_kept + n_rej, kept_shards, rej_shards, dict(reasons), by_source, stats,
                                 expected_rows_in=expected)
        except StageError as e:
            raise EstimateError(str(e)) from e

def _ends_report(correct: list[list[bool]], base: int) -> dict:
    """Of the rows with no correct (or no wrong) sample in their first ``base`` samples, how many showed one later."""
    zero = [c for c in correct if len(c) >= base and not any(c[:base])]
    full = [c for c in correct if len(c) >= base and all(c[:base])]
    return {"base_samples": base, "none_correct_at_base": len(zero), "of_them_solved_later": sum(any(c) for c in zero),
            "all_correct_at_base": len(full), "of_them_failed_later": sum(not all(c) for c in full)}


def estimate(inputs: list[Path], out: Path, cfg: EstimateConfig, engine: Engine | None = None, force: bool = False,
             progress: bool = True) -> Manifest:
    """Score every row of ``inputs`` into ``out`` (resumable); returns the manifest."""
    return Estimator(inputs, out, cfg, engine, progress).run(force)


def estimate_shared(inputs: list[Path], out: Path, cfg: EstimateConfig, workers: int, engine: Engine | None = None,
                    force: bool = False) -> Manifest:
    """``estimate`` split into ``workers`` shares run one after another in this process (what the flow runs side
    by side on Ray, an engine each); the same rows and pass counts as ``estimate``."""
    done = Estimator(inputs, out, cfg, engine, progress=False).begin(force)
    if done is not None:
        return done
    shares = [Estimator(inputs, out, cfg, engine, progress=False).run_share(w, workers) for w in range(workers)]
    return Estimator(inputs, out, cfg, engine, progress=False).finish_shares(shares)


__all__ = ["EstimateConfig", "DifficultyStore", "Estimator", "estimate", "estimate_shared", "wilson", "param_key", "row_key",
           "store_identity", "OUTCOMES"]
