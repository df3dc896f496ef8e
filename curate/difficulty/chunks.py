"""The estimator's chunks: input rows read in fixed chunks of ``chunk_rows`` (chunk ``c`` becomes
``kept/part_{c:06d}.parquet``), the messages the engine thread hands the grader thread about them, and the writing of
a finished chunk's shards."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from curate.core.runner import reject_table
from curate.core.schema import SCHEMA, conform
from curate.core.shards import shard_paths
from curate.difficulty.engines import Completion, GenRequest
from curate.difficulty.store import DIFFICULTY_COLUMNS, DifficultyStore, write_table_atomic

STAGE = "estimate"

RESPONSE_SCHEMA = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("sample", pa.int32(), nullable=False),
    pa.field("text", pa.string(), nullable=False),
    pa.field("response_tokens", pa.int32(), nullable=False),
    pa.field("finish_reason", pa.string(), nullable=False),
    pa.field("outcome", pa.string(), nullable=False),
])



def read_chunks(folders: list[Path], size: int, limit: int | None = None) -> Iterator[pa.Table]:
    """Input rows in order (the first ``limit`` only, if set), cut into tables of exactly ``size`` rows."""
    buf: list[pa.Table] = []
    n = 0
    left = limit if limit is not None else float("inf")
    for folder in folders:
        for p in shard_paths(folder):
            for rb in pq.ParquetFile(p).iter_batches(batch_size=size):
                if left <= 0:
                    break
                t = pa.Table.from_batches([rb])
                if t.num_rows > left:
                    t = t.slice(0, int(left))
                left -= t.num_rows
                buf.append(t)
                n += t.num_rows
                while n >= size:
                    whole = pa.concat_tables(buf, promote_options="permissive") if len(buf) > 1 else buf[0]
                    yield whole.slice(0, size)
                    rest = whole.slice(size)
                    buf, n = ([rest] if rest.num_rows else []), rest.num_rows
    if n:
        yield pa.concat_tables(buf, promote_options="permissive") if len(buf) > 1 else buf[0]



def count_chunks(folders: list[Path], size: int, limit: int | None = None) -> int:
    """How many tables ``read_chunks`` cuts the inputs into, from the shards' metadata (no row is read)."""
    rows = sum(pq.ParquetFile(p).metadata.num_rows for folder in folders for p in shard_paths(folder))
    if limit is not None:
        rows = min(rows, limit)
    return -(-rows // size)



@dataclass
class Chunk:
    index: int
    table: pa.Table  # the input rows of this chunk
    todo: set[int]  # row positions still waiting for samples or grades
    rejected: dict[int, tuple[str, str]]  # position -> (reason, detail)
    prompt_tokens: dict[int, int | None]
    scored: dict[int, dict] = field(default_factory=dict)  # position -> difficulty columns
    responses: list[dict] = field(default_factory=list)
    from_store: set[int] = field(default_factory=set)
    requests: dict[int, GenRequest] = field(default_factory=dict)  # sequential: each row's request, for its next round
    drawn: dict[int, tuple[list[Completion], list[str], int]] = field(default_factory=dict)  # sequential: so far



@dataclass(frozen=True)
class NewChunk:
    """A chunk's rows are about to be served: register it before any of its results."""

    chunk: Chunk



@dataclass(frozen=True)
class Stored:
    """Row ``row`` of chunk ``chunk`` comes from the difficulty store."""

    chunk: int
    row: int
    scores: dict



@dataclass(frozen=True)
class Generated:
    """The k completions of row ``row`` of chunk ``chunk``, to be graded."""

    chunk: int
    row: int
    completions: list[Completion]


Message = NewChunk | Stored | Generated


@dataclass
class RunInfo:
    """What a run learns about its engine and store once it starts (all of it recorded in the manifest)."""

    model: str | None = None
    revision: str | None = None
    param_key: str | None = None
    store_note: str | None = None
    sampler: dict | None = None
    grading: dict = field(default_factory=dict)
    prior: dict | None = None  # adaptive with prior = store: what the prior was fitted on (``fit_store_prior``)
    gen_started: float = 0.0
    shares: int = 1  # engines the run was split across (``run_share``)



class Histogram:
    """Running pass-count histogram for the progress bar."""

    def __init__(self, k: int):
        self.k = k
        self.counts: Counter[int] = Counter()

    def add(self, n_correct: int) -> None:
        self.counts[n_correct] += 1

    def text(self) -> str:
        return " ".join(f"{i}:{self.counts.get(i, 0)}" for i in range(self.k + 1))

    def total(self) -> int:
        return sum(self.counts.values())



def progress_bar(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="problem", desc="estimate", dynamic_ncols=True)



def write_chunk(out: Path, ch: Chunk, store: DifficultyStore | None, stage: str) -> None:
    """A finished chunk's shards: responses and rejected rows, then the kept part, last (its presence marks the
    chunk finished); the fresh rows (not copied from the store) into ``store``."""
    name = f"part_{ch.index:06d}.parquet"
    keep = sorted(ch.scored)
    rej = sorted(ch.rejected)
    if ch.responses:
        write_table_atomic(pa.Table.from_pylist(ch.responses, schema=RESPONSE_SCHEMA), out / "responses" / name)
    if rej:
        t = ch.table.take(pa.array(rej, pa.int64()))
        t = conform({n: t[n] for n in t.column_names if n in SCHEMA.names}, len(rej))
        rt = reject_table(t, stage, [ch.rejected[i][0] for i in rej], [ch.rejected[i][1] for i in rej])
        write_table_atomic(rt, out / "rejected" / name)
    t = ch.table.take(pa.array(keep, pa.int64()))
    cols = {n: t[n] for n in t.column_names if n in SCHEMA.names}
    for col in DIFFICULTY_COLUMNS:
        cols[col] = pa.array([ch.scored[i][col] for i in keep], SCHEMA.field(col).type)
    kept = conform(cols, len(keep))
    write_table_atomic(kept, out / "kept" / name)  # last: a kept part on disk marks the chunk finished
    if store is not None:
        fresh = [j for j, i in enumerate(keep) if i not in ch.from_store]
        store.append(kept.take(pa.array(fresh, pa.int64())))
