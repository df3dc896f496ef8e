"""Python rows -> raw string batches: shared by the line-by-line readers and the synthetic generator."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

import pyarrow as pa

BATCH_ROWS = 16_384
MAX_FIELD_BYTES = 1 << 20  # a single field over 1 MiB is junk for a math problem; kept as a rejected row


def _value_to_str(v: object) -> tuple[str | None, str | None]:
    """(text, kind-if-not-a-scalar)."""
    if v is None:
        return None, None
    if isinstance(v, str):
        return v, None
    if isinstance(v, bool):
        return json.dumps(v), "bool"
    if isinstance(v, int | float):
        return str(v), "number"  # a number where text may be wanted: an adapter rejects a problem that is one
    return json.dumps(v, ensure_ascii=False), type(v).__name__


def batched_tables(rows: Iterable[tuple[int, object, str | None]]) -> Iterator[pa.Table]:
    """``rows_to_table`` over ``BATCH_ROWS`` rows at a time: what a line-by-line reader or a generator yields."""
    batch: list = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BATCH_ROWS:
            yield rows_to_table(batch)
            batch = []
    if batch:
        yield rows_to_table(batch)


def rows_to_table(rows: list[tuple[int, object, str | None]]) -> pa.Table:
    """Python rows (row number, parsed value or raw text, bad reason) -> raw string table.

    A value that is not a dict is kept whole as JSON text in ``_value`` (ORZ rows are lists).
    Non-scalar values of a dict are kept as JSON text and named in ``_nonscalar`` so that an adapter
    can reject a problem that is a list instead of a string.
    """
    keys: dict[str, None] = {}
    for _, v, _ in rows:
        if isinstance(v, dict):
            keys.update(dict.fromkeys(v))
    cols: dict[str, list] = {k: [] for k in keys}
    cols["_value"], cols["_nonscalar"], cols["_row"], cols["_bad"] = [], [], [], []
    for rowno, v, bad in rows:
        nonscalar = []
        if isinstance(v, dict):
            for k in keys:
                s, kind = _value_to_str(v.get(k))
                if kind:
                    nonscalar.append(f"{k}:{kind}")
                if s is not None and len(s) > MAX_FIELD_BYTES:
                    bad = bad or f"oversized_field:{k}"
                    s = s[:200]
                cols[k].append(s)
            cols["_value"].append(None)
        else:
            for k in keys:
                cols[k].append(None)
            s = v if isinstance(v, str) and bad else (None if v is None else json.dumps(v, ensure_ascii=False))
            cols["_value"].append(s if s is None else s[:MAX_FIELD_BYTES])
        cols["_nonscalar"].append(",".join(nonscalar) or None)
        cols["_row"].append(rowno)
        cols["_bad"].append(bad)
    return pa.table({k: pa.array(v, pa.int64() if k == "_row" else pa.string()) for k, v in cols.items()})
