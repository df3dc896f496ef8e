"""The difficulty store: a stored estimate per (problem, gold, estimator) so that a problem is never scored twice
under the same settings, the keys that identify them, and the empirical-Bayes prior fitted on its rows."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from curate.core.errors import GradusError
from curate.core.shards import atomic_path, shard_paths, write_json_atomic
from curate.difficulty import templates
from curate.difficulty.adaptive import (
    MIN_PRIOR_ROWS,
    AdaptiveConfig,
    fit_prior,
    grid_masses,
)
from curate.difficulty.engines import SamplingConfig
from curate.difficulty.grading import GRADER_VERSION

# Bump when what a scored row means changes (2: pass_rate = n_correct / k, timeouts and crashes count as failures).
# Part of the stage's identity and of every store key, so no run resumes or copies rows scored under another rule.
SCORING_RULE = 2
DIFFICULTY_COLUMNS = ["model", "model_revision", "backend", "template", "k", "temperature", "top_p", "max_tokens", "seed",
                      "n_correct", "n_graded", "pass_rate", "correct", "pass_rate_low", "pass_rate_high", "outcomes",
                      "response_tokens", "truncated", "prompt_tokens", "grader_version", "rounds", "stop_reason",
                      "bucket_masses", "answers", "suspect_gold", "consensus_answer", "consensus_count"]


class EstimateError(GradusError):
    pass


def write_table_atomic(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def row_key(problem: str, answer: str) -> str:
    """What a stored estimate answers for: the exact problem text and the exact gold answer.

    The row ``id`` hashes a normalized text (so copies that differ only in spacing share it); two rows with
    one id may still carry different golds (two sources, a corrected gold), and a verdict graded against
    one gold says nothing about the other.
    """
    return hashlib.sha256(f"{problem}\x00{answer}".encode()).hexdigest()[:32]


def store_identity(model: str, revision: str, template: str, template_fingerprint: str, s: SamplingConfig,
                   grader_timeout_s: int, base_url: str | None = None, grader: str | None = None,
                   sequential: AdaptiveConfig | None = None) -> dict:
    """Everything that changes a difficulty estimate, and nothing else: what the store key hashes.

    The model and its exact revision; the template's rendered text (not only its name: the chat template of
    the tokenizer and the instruction are in it); every sampling parameter that changes what is drawn
    (k, temperature, top_p, max_tokens, seed, max_prompt_tokens); the grader (math-verify, sympy and
    latex2sympy versions and our extraction rule) and its timeout; and, for an OpenAI-compatible server, its
    base URL; sequential sampling's settings when it is on. The backend is recorded with each row, not keyed:
    vLLM and an HTTP server running the same weights with the same seeds are the same estimate.
    """
    extra = {"sequential": asdict(sequential)} if sequential is not None and sequential.active else {}
    return {**extra, "model": model, "revision": revision, "template": template, "template_fingerprint": template_fingerprint,
            "k": s.k, "temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens, "seed": s.seed,
            "max_prompt_tokens": s.max_prompt_tokens, "grader": grader or GRADER_VERSION, "grader_timeout_s": grader_timeout_s,
            "base_url": base_url, "scoring_rule": SCORING_RULE}


def param_key(identity: dict) -> str:
    """The store folder name for a ``store_identity``."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def template_fingerprint(template: str, tokenizer=None) -> str:
    """Hash of what the template makes of a probe problem: its text, its chat template and its instruction."""
    probe = "<<gradus-probe-problem>>"
    parts = [template, json.dumps(templates.messages(template, probe))]
    if tokenizer is not None or template not in templates.CHAT_TEMPLATES:
        parts.append(templates.render(template, probe, tokenizer))
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


class DifficultyStore:
    """Append-only Parquet segments per store key: ``ROOT/{param_key}/seg_*.parquet``.

    Rows are found by ``row_key`` (exact problem text + gold), never by the normalized-text ``id`` alone, and
    each folder holds ``identity.json``, the full ``store_identity`` its key hashes (checked on open).
    """

    def __init__(self, root: Path, identity: dict):
        self.key = param_key(identity)
        self.dir = Path(root) / self.key
        self.identity = identity
        self._rows: dict[str, dict] | None = None

    def load(self) -> dict[str, dict]:
        if self._rows is None:
            self._rows = {}
            ident = self.dir / "identity.json"
            if ident.exists() and json.loads(ident.read_text()) != json.loads(json.dumps(self.identity)):
                raise EstimateError(f"difficulty store {self.dir}: identity.json does not match its key; remove the folder")
            for p in shard_paths(self.dir):
                t = pq.read_table(p)
                if "row_key" not in t.column_names:
                    continue  # a segment from before rows were keyed by problem and gold: never trusted
                for row in t.to_pylist():
                    self._rows[row["row_key"]] = row
        return self._rows

    def get(self, problem: str, answer: str) -> dict | None:
        return self.load().get(row_key(problem, answer))

    def append(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        ident = self.dir / "identity.json"
        if not ident.exists():
            write_json_atomic(ident, self.identity)
        keys = [row_key(p, a) for p, a in zip(table["problem"].to_pylist(), table["answer"].to_pylist(), strict=True)]
        t = table.select(["id", *DIFFICULTY_COLUMNS]).append_column("row_key", pa.array(keys, pa.string()))
        write_table_atomic(t, self.dir / f"seg_{time.time_ns()}_{uuid.uuid4().hex[:8]}.parquet")
        if self._rows is not None:
            for row in t.to_pylist():
                self._rows[row["row_key"]] = row


# What must match for another store folder's rows to inform a prior: the same model and weights, prompt, sampling
# distribution and grader (k, seed and sequential settings may differ: they change how many samples, not their law).
SAME_ESTIMATOR = ("model", "revision", "template", "template_fingerprint", "temperature", "top_p", "max_tokens",
                  "max_prompt_tokens", "grader", "grader_timeout_s", "base_url", "scoring_rule")


def fit_store_prior(root: Path, identity: dict, exclude: set[str]) -> dict:
    """The empirical-Bayes prior of a run (``curate.difficulty.adaptive.fit_prior``) from the difficulty store: every
    stored row of another problem (its ``id``, the hash of the normalized problem text, not in ``exclude``, the run's
    own problems: out of sample, whatever gold they were graded against) scored by the same estimator
    (``SAME_ESTIMATOR``), one per problem (the one with the most samples). Fewer than
    ``MIN_PRIOR_ROWS``: Jeffreys, with a note saying so."""
    best: dict[str, tuple[int, int]] = {}
    folders = []
    for ident in sorted(Path(root).glob("*/identity.json")):
        other = json.loads(ident.read_text())
        if any(other.get(k) != identity.get(k) for k in SAME_ESTIMATOR):
            continue
        used = 0
        for p in shard_paths(ident.parent):
            cols = ["id", "n_correct", "k"]
            if not set(cols) <= set(pq.read_schema(p).names):
                continue
            t = pq.read_table(p, columns=cols)  # only what the fit reads (a segment holds every scored column)
            for key, c, k in zip(t["id"].to_pylist(), t["n_correct"].to_pylist(), t["k"].to_pylist(), strict=True):
                if key in exclude or c is None or not k:
                    continue
                used += 1
                if key not in best or k > best[key][1]:
                    best[key] = (c, k)
        if used:
            folders.append(ident.parent.name)
    if len(best) < MIN_PRIOR_ROWS:
        return {"kind": "jeffreys", "rows": len(best), "folders": folders,
                "note": f"the store holds {len(best)} rows of other problems scored by this model and settings; a "
                        f"fitted prior needs {MIN_PRIOR_ROWS}: Jeffreys"}
    c, k = zip(*best.values(), strict=True)
    w = fit_prior(c, k)
    return {"kind": "store", "rows": len(best), "folders": folders,
            "sha": hashlib.sha256(w.tobytes()).hexdigest()[:16], "weights": w.tolist(),
            "bucket_masses": [round(x, 4) for x in grid_masses(0, 0, w)]}
