"""The one record schema of gradus: a pyarrow schema, its frozen dataclass twin, and a version.

Every stage reads and writes shards of exactly this schema (kept rows) or of ``REJECT_SCHEMA``
(the same columns plus why and where a row was rejected). Writers always pass ``schema=``;
nothing is inferred from a first batch. Columns a later stage fills (filter signals, dedup,
contamination, difficulty) are typed and nullable here, never packed into a free-form dict.

    python -c "from curate.core.schema import SCHEMA; print(SCHEMA)"
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pyarrow as pa

SCHEMA_VERSION = 4  # 2: Wilson bounds, per-sample outcomes/lengths/truncation, prompt tokens; 3: sequential sampling, answers;
# 4: bucket_probs renamed bucket_masses (Jeffreys posterior masses, not calibrated probabilities)

# Answer types the extractor assigns (curate.sources.answers.answer_type).
ANSWER_TYPES = ("integer", "number", "fraction", "expression", "interval", "set", "tuple", "equation", "text")

# (name, arrow type, nullable, one-line meaning). Order is the column order on disk.
_FIELDS: list[tuple[str, pa.DataType, bool, str]] = [
    # identity and content
    ("id", pa.string(), False, "stable content hash of the normalized problem (16 hex chars)"),
    ("source", pa.string(), False, "short source name: aime, math, orz, numina, synthetic, ..."),
    ("source_id", pa.string(), False, "the row's id in its source, or its row number there"),
    ("origin", pa.string(), False, "file path or hub id the row came from"),
    ("source_detail", pa.string(), True, "sub-source the data set declares (NuminaMath's 'olympiads', ...)"),
    ("problem", pa.string(), False, "problem statement as given (whitespace-trimmed)"),
    ("answer", pa.string(), True, "gold answer as extracted; null when the source has none"),
    ("solution", pa.string(), True, "reference solution when the source has one"),
    ("answer_type", pa.string(), True, "one of ANSWER_TYPES"),
    ("question_type", pa.string(), True, "question type as declared by the source (MCQ, proof, ...)"),
    # metadata the sources declare
    ("year", pa.int32(), True, "competition year"),
    ("level", pa.string(), True, "declared level (MATH 'Level 3', MATH-500 '3')"),
    ("subject", pa.string(), True, "declared subject/type/domain"),
    ("declared_difficulty", pa.float32(), True, "difficulty the source declares (scale is the source's)"),
    ("declared_valid", pa.bool_(), True, "validity the source declares (NuminaMath-1.5 problem/solution_is_valid)"),
    # filter signals (Big-Math style: one column per filter so a policy can be re-applied later)
    ("sig_mcq", pa.bool_(), True, "multiple-choice markers found"),
    ("sig_proof", pa.bool_(), True, "proof / show-that item"),
    ("sig_yesno", pa.bool_(), True, "yes/no or true/false answer"),
    ("sig_multipart", pa.bool_(), True, "several sub-questions"),
    ("sig_figure", pa.bool_(), True, "refers to a figure it does not contain"),
    ("gold_parseable", pa.bool_(), True, "math-verify parsed the gold answer"),
    # dedup / decontamination
    ("dedup_cluster", pa.string(), True, "id of the kept representative of this row's duplicate cluster"),
    ("contam_benchmark", pa.string(), True, "benchmark this row matched"),
    ("contam_id", pa.string(), True, "id of the matched benchmark item"),
    # difficulty block (filled by difficulty estimation)
    ("model", pa.string(), True, "model id used to estimate difficulty"),
    ("model_revision", pa.string(), True, "model revision or content hash"),
    ("backend", pa.string(), True, "sampling engine"),
    ("template", pa.string(), True, "prompt template name"),
    ("k", pa.int32(), True, "samples drawn"),
    ("temperature", pa.float32(), True, "sampling temperature"),
    ("top_p", pa.float32(), True, "nucleus sampling p"),
    ("max_tokens", pa.int32(), True, "generation budget per sample"),
    ("seed", pa.int64(), True, "sampling seed"),
    ("n_correct", pa.int32(), True, "samples graded correct"),
    ("n_graded", pa.int32(), True, "samples with a verdict (correct, wrong, no_answer); < k if some timed out or crashed"),
    ("pass_rate", pa.float32(), True, "n_correct / k: a timeout, crash or error counts as a failure"),
    ("correct", pa.list_(pa.bool_()), True, "per-sample correctness"),
    ("pass_rate_low", pa.float32(), True, "Wilson 95% interval, lower bound of the pass rate"),
    ("pass_rate_high", pa.float32(), True, "Wilson 95% interval, upper bound of the pass rate"),
    ("outcomes", pa.list_(pa.string()), True, "per-sample grading outcome: correct, wrong, no_answer, timeout, crash, error"),
    ("response_tokens", pa.list_(pa.int32()), True, "per-sample response length in tokens"),
    ("truncated", pa.list_(pa.bool_()), True, "per-sample: stopped by max_tokens"),
    ("prompt_tokens", pa.int32(), True, "prompt length in tokens under the template"),
    ("grader_version", pa.string(), True, "grader identity (math-verify, sympy, latex2sympy versions + gradus rule version)"),
    ("rounds", pa.int32(), True, "sequential sampling: rounds drawn (null: fixed k)"),
    ("stop_reason", pa.string(), True, "sequential sampling: decided | k_max | k | left_end (null: fixed k)"),
    ("bucket_masses", pa.list_(pa.float32()), True, "adaptive: posterior mass of unsolved .. solved (Jeffreys: not calibrated)"),
    ("answers", pa.list_(pa.string()), True, "per-sample final answer (final answer span or <answer> tag; null: none given)"),
    ("suspect_gold", pa.bool_(), True, "a clear majority of samples agree on one answer other than the gold"),
    ("consensus_answer", pa.string(), True, "suspect_gold: the answer the majority gave"),
    ("consensus_count", pa.int32(), True, "suspect_gold: how many samples gave it"),
]

SCHEMA = pa.schema(
    [pa.field(n, t, nullable=nl) for n, t, nl, _ in _FIELDS],
    metadata={b"gradus.schema_version": str(SCHEMA_VERSION).encode()},
)
REJECT_FIELDS = [
    pa.field("reject_stage", pa.string(), nullable=False),
    pa.field("reject_reason", pa.string(), nullable=False),
    pa.field("reject_detail", pa.string(), nullable=True),
]
# Rejected rows keep whatever the source gave, so every record column is nullable there.
REJECT_SCHEMA = pa.schema([f.with_nullable(True) for f in SCHEMA] + REJECT_FIELDS, metadata=SCHEMA.metadata)


@dataclass(frozen=True, slots=True)
class Record:
    """One row of SCHEMA. Field names, order and Python types mirror the arrow schema (a test checks)."""

    id: str
    source: str
    source_id: str
    origin: str
    source_detail: str | None = None
    problem: str = ""
    answer: str | None = None
    solution: str | None = None
    answer_type: str | None = None
    question_type: str | None = None
    year: int | None = None
    level: str | None = None
    subject: str | None = None
    declared_difficulty: float | None = None
    declared_valid: bool | None = None
    sig_mcq: bool | None = None
    sig_proof: bool | None = None
    sig_yesno: bool | None = None
    sig_multipart: bool | None = None
    sig_figure: bool | None = None
    gold_parseable: bool | None = None
    dedup_cluster: str | None = None
    contam_benchmark: str | None = None
    contam_id: str | None = None
    model: str | None = None
    model_revision: str | None = None
    backend: str | None = None
    template: str | None = None
    k: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    n_correct: int | None = None
    n_graded: int | None = None
    pass_rate: float | None = None
    correct: list[bool] | None = None
    pass_rate_low: float | None = None
    pass_rate_high: float | None = None
    outcomes: list[str] | None = None
    response_tokens: list[int] | None = None
    truncated: list[bool] | None = None
    prompt_tokens: int | None = None
    grader_version: str | None = None
    rounds: int | None = None
    stop_reason: str | None = None
    bucket_masses: list[float] | None = None
    answers: list[str | None] | None = None
    suspect_gold: bool | None = None
    consensus_answer: str | None = None
    consensus_count: int | None = None


def records_to_table(records: list[Record], schema: pa.Schema = SCHEMA) -> pa.Table:
    """Build a table of ``schema`` from dataclass rows (used by tests and small sources)."""
    cols = {f.name: [getattr(r, f.name) for r in records] for f in dataclasses.fields(Record)}
    return pa.table(cols, schema=schema)


def conform(columns: dict[str, pa.Array | list], n: int, schema: pa.Schema = SCHEMA) -> pa.Table:
    """Assemble a table of exactly ``schema`` from a partial column dict; missing columns are null."""
    arrays = []
    for field in schema:
        col = columns.get(field.name)
        if col is None:
            arrays.append(pa.nulls(n, field.type))
        else:
            arr = col if isinstance(col, pa.Array | pa.ChunkedArray) else pa.array(col, type=field.type)
            if arr.type != field.type:
                arr = arr.cast(field.type)
            arrays.append(arr)
    return pa.Table.from_arrays(arrays, schema=schema)
