"""Python rows -> raw string batches: shared by the line-by-line readers and the synthetic generator."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

import pyarrow as pa

BATCH_ROWS = 16_384
MAX_FIELD_BYTES = 1 << 20  # a single field over 1 MiB is junk for a math problem; kept as a rejected row


class JsonNumber(str):
    """A JSON number with a fraction or an exponent, as its literal text: ``0.33333333333333333``, ``1e400`` and
    ``2.50`` stay what the file wrote (through a float they would lose digits, become ``inf``, or drop the zero). JSON
    integers are exact as Python ints and stay ints."""

    __slots__ = ()


class NonFinite(JsonNumber):
    """``NaN``, ``Infinity`` or ``-Infinity``: literals JSON does not have, which Python's reader accepts. A row
    holding one as a field is rejected (``non_finite_number``): as a gold it would be a wrong reward."""

    __slots__ = ()


def json_loads(text: str):
    """``json.loads`` keeping every number with a fraction or exponent as its literal text (``JsonNumber``) and marking
    non-finite literals (``NonFinite``) instead of reading them as floats."""
    return json.loads(text, parse_float=JsonNumber, parse_constant=NonFinite)


def _plain(v: object) -> object:
    """A nested value ready for ``json.dumps``: literal numbers back to numbers (nested, they are not golds)."""
    if isinstance(v, JsonNumber):
        return float(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _value_to_str(v: object) -> tuple[str | None, str | None]:
    """(text, kind-if-not-a-scalar)."""
    if v is None:
        return None, None
    if isinstance(v, JsonNumber):
        return str(v), "number"  # its literal text, digit for digit
    if isinstance(v, str):
        return v, None
    if isinstance(v, bool):
        return json.dumps(v), "bool"
    if isinstance(v, int | float):
        return str(v), "number"  # a number where text may be wanted: an adapter rejects a problem that is one
    return json.dumps(_plain(v), ensure_ascii=False), type(v).__name__


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
                if isinstance(v.get(k), NonFinite):
                    bad = bad or f"non_finite_number:{k}={v[k]}"
                try:
                    s, kind = _value_to_str(v.get(k))
                except RecursionError:  # a value nested deeper than json.dumps goes: the row is rejected, not the file
                    s, kind, bad = None, "nested", bad or f"malformed_json:{k} nested too deep"
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
            s = v if isinstance(v, str) and bad else (None if v is None else json.dumps(_plain(v), ensure_ascii=False))
            cols["_value"].append(s if s is None else s[:MAX_FIELD_BYTES])
        cols["_nonscalar"].append(",".join(nonscalar) or None)
        cols["_row"].append(rowno)
        cols["_bad"].append(bad)
    return pa.table({k: pa.array(v, pa.int64() if k == "_row" else pa.string()) for k, v in cols.items()})
