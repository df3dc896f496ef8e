"""The shared stage runner: kept and rejected shards, counters, conservation check, manifest last.

A stage is a function that receives a ``StageRun`` and calls ``run.emit(kept, rejected)`` per batch.
The runner owns everything else:

- skip: an output folder whose ``manifest.json`` has the same input fingerprint and config hash is
  complete; the stage returns that manifest and does nothing (``"skipped": true`` in the result);
- clean restart: otherwise old shards and manifest are removed before the run, so a killed run
  leaves no half-state that a re-run could mistake for output (shards are tmp-then-rename anyway);
- counters: rows in/kept/rejected, rejected by reason, signal counts, per-source breakdown, timings;
- conservation: rows in = kept + rejected and the reasons add up, or the run fails before writing
  the manifest.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from curate.schema import REJECT_SCHEMA, SCHEMA, SCHEMA_VERSION
from curate.shards import MANIFEST, ROWS_PER_SHARD, ShardWriter, read_manifest, write_json_atomic

log = logging.getLogger(__name__)
SIGNALS = [f.name for f in SCHEMA if f.name.startswith("sig_")] + ["gold_parseable"]


def code_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gradus")
    except PackageNotFoundError:
        return "unknown"


def config_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def dir_fingerprint(folder: Path) -> str:
    """Fingerprint of a stage output: its manifest's shard hashes (complete outputs only)."""
    m = read_manifest(folder)
    if m is None:
        raise FileNotFoundError(f"{folder}: no manifest.json; the stage that writes it did not finish")
    return hashlib.sha256(json.dumps([s["sha256"] for s in m["kept_shards"]]).encode()).hexdigest()[:16]


def inputs_fingerprint(inputs: list[Path]) -> str:
    """Fingerprint of stage outputs or bare shard folders: manifest shard hashes, else the files' own hashes."""
    from curate.shards import file_sha256, shard_paths, stage_dir

    parts = []
    for inp in inputs:
        folder = stage_dir(Path(inp))
        m = read_manifest(folder.parent if folder.name == "kept" else folder)
        if m is not None and "kept_shards" in m:
            parts.append([s["sha256"] for s in m["kept_shards"]])
        else:
            parts.append([file_sha256(p) for p in shard_paths(folder)])
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def file_fingerprint(spec: str) -> str:
    p = Path(spec)
    if p.is_file():
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        return h.hexdigest()[:16]
    return hashlib.sha256(spec.encode()).hexdigest()[:16]  # hub ids and generator specs: by name


class StageRun:
    def __init__(self, name: str, out: Path, rows_per_shard: int):
        self.name = name
        self.out = out
        self.kept = ShardWriter(out / "kept", SCHEMA, rows_per_shard)
        self.rejected = ShardWriter(out / "rejected", REJECT_SCHEMA, rows_per_shard)
        self.rows_in = 0
        self.reasons: Counter[str] = Counter()
        self.signals: Counter[str] = Counter()
        self.by_source: dict[str, Counter[str]] = defaultdict(Counter)
        self.timings: Counter[str] = Counter()
        self.extra: dict = {}

    def reset(self) -> None:
        """Discard everything written so far (shards included) and start the counters again."""
        self.kept.abort()
        self.rejected.abort()
        for sub in ("kept", "rejected"):
            shutil.rmtree(self.out / sub, ignore_errors=True)
        self.__init__(self.name, self.out, self.kept.rows_per_shard)

    @contextmanager
    def timed(self, key: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings[key] += time.perf_counter() - t0

    def emit(self, kept: pa.Table, rejected: pa.Table | None = None, rows_in: int | None = None) -> None:
        """Write one batch's outcome. ``rows_in`` defaults to kept + rejected rows."""
        with self.timed("write"):
            n_rej = 0 if rejected is None else rejected.num_rows
            self.rows_in += kept.num_rows + n_rej if rows_in is None else rows_in
            if kept.num_rows:
                self.kept.write(kept)
                for src, n in _value_counts(kept["source"]).items():
                    self.by_source[src]["in"] += n
                    self.by_source[src]["kept"] += n
            if n_rej:
                self.rejected.write(rejected)
                reasons = rejected["reject_reason"]
                self.reasons.update(_value_counts(reasons))
                pairs = pc.binary_join_element_wise(pc.fill_null(rejected["source"], "?"), reasons, "\x1f")
                for key, n in _value_counts(pairs).items():
                    src, reason = key.split("\x1f", 1)
                    self.by_source[src]["in"] += n
                    self.by_source[src]["rejected/" + reason] += n
            for sig in SIGNALS:
                for t in (kept, rejected):
                    if t is not None and t.num_rows and sig in t.column_names:
                        self.signals[sig] += int(pc.sum(pc.fill_null(t[sig], False).cast(pa.int64())).as_py() or 0)


def _value_counts(col: pa.ChunkedArray | pa.Array) -> dict[str, int]:
    vc = pc.value_counts(col)
    return {v["values"].as_py(): v["counts"].as_py() for v in vc}


def reject_table(t: pa.Table, stage: str, reasons: pa.Array | list, details: pa.Array | list | None = None) -> pa.Table:
    """Rows of SCHEMA plus why they were rejected, as REJECT_SCHEMA."""
    n = t.num_rows
    reasons = reasons if isinstance(reasons, pa.Array | pa.ChunkedArray) else pa.array(reasons, pa.string())
    details = pa.nulls(n, pa.string()) if details is None else details
    if not isinstance(details, pa.Array | pa.ChunkedArray):
        details = pa.array(details, pa.string())
    cols = [t[f.name] if f.name in t.column_names else pa.nulls(n, f.type) for f in SCHEMA]
    cols += [pa.array([stage] * n, pa.string()), reasons, details]
    return pa.Table.from_arrays(cols, schema=REJECT_SCHEMA)


def run_stage(
    name: str,
    out: Path,
    inputs: dict,
    config: dict,
    body: Callable[[StageRun], None],
    rows_per_shard: int = ROWS_PER_SHARD,
    force: bool = False,
) -> dict:
    """Run ``body`` into ``out`` unless a complete manifest for the same inputs and config is there."""
    out = Path(out)
    fingerprint = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
    chash = config_hash(config)
    old = read_manifest(out)
    if old and not force and old.get("input_hash") == fingerprint and old.get("config_hash") == chash:
        log.info("%s: complete output found in %s, nothing to do", name, out)
        return {**old, "skipped": True}
    for sub in ("kept", "rejected"):
        shutil.rmtree(out / sub, ignore_errors=True)
    (out / MANIFEST).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    run = StageRun(name, out, rows_per_shard)
    t0 = time.perf_counter()
    try:
        body(run)
    except BaseException:
        run.kept.abort()
        run.rejected.abort()
        raise
    kept_shards, rej_shards = run.kept.close(), run.rejected.close()
    rows_kept, rows_rej = run.kept.rows, run.rejected.rows
    if run.rows_in != rows_kept + rows_rej or sum(run.reasons.values()) != rows_rej:
        raise RuntimeError(
            f"{name}: conservation broken: in={run.rows_in} kept={rows_kept} rejected={rows_rej} "
            f"reasons={sum(run.reasons.values())}"
        )
    manifest = {
        "stage": name,
        "schema_version": SCHEMA_VERSION,
        "code_version": code_version(),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "inputs": inputs,
        "input_hash": fingerprint,
        "config": config,
        "config_hash": chash,
        "rows_in": run.rows_in,
        "rows_kept": rows_kept,
        "rows_rejected": rows_rej,
        "rejected_by_reason": dict(sorted(run.reasons.items(), key=lambda kv: -kv[1])),
        "signals": dict(run.signals),
        "by_source": {k: dict(v) for k, v in sorted(run.by_source.items())},
        "seconds": round(time.perf_counter() - t0, 3),
        "timings": {k: round(v, 3) for k, v in run.timings.items()},
        "kept_shards": kept_shards,
        "rejected_shards": rej_shards,
        **run.extra,
    }
    write_json_atomic(out / MANIFEST, manifest)
    return {**manifest, "skipped": False}
