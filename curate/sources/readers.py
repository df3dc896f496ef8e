"""Readers: turn a file, a hub id or the synthetic generator into streamed batches of raw string columns.

Every batch is a ``pa.Table`` whose columns are strings (numbers become their text, nested values
become JSON text) plus two bookkeeping columns:

- ``_row``: the row's position in its input (int64), used as ``source_id`` when the source has no id;
- ``_bad``: null, or why the raw row cannot become a record (``invalid_utf8``, ``malformed_json``,
  ``problem:list`` ...). Adapters turn a non-null ``_bad`` into a rejected row: nothing is dropped.

Fast path: pyarrow's streaming JSON/CSV readers and Parquet ``iter_batches``. If the fast path cannot
read a file (invalid UTF-8, a malformed line, a column whose type changes between rows), the file is
read again line by line in Python, and each bad line becomes a row with ``_bad`` set.

One job, in one module of more than 500 lines: reading every source format into the same streamed batches (the
formats share the batching, the bookkeeping columns and the error rules).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from curate.core.errors import SourceError
from curate.sources.rows import BATCH_ROWS, json_loads, rows_to_table

# arrow: a datasets.save_to_disk folder; synthetic and reasoning_gym: generators
FORMATS = ("jsonl", "json", "csv", "parquet", "arrow", "hf", "synthetic", "reasoning_gym")
SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
GLOB = set("*?[")
NUMBERS_KEY = b"gradus_number_columns"  # schema metadata of a raw batch: its columns that held numbers


class FastPathFailed(Exception):
    """The arrow reader could not read this file; read it again line by line."""


def _file_format(p: Path) -> str | None:
    suffix = "".join(p.suffixes[-2:]) if p.suffix == ".gz" else p.suffix
    return SUFFIXES.get(suffix.replace(".gz", "").lower())


def is_saved_dataset(p: Path) -> bool:
    """A ``datasets`` ``save_to_disk`` folder: a Dataset (``state.json`` + ``dataset_info.json`` + arrow files) or a
    DatasetDict (``dataset_dict.json`` and one such folder per split)."""
    return p.is_dir() and ((p / "state.json").is_file() and (p / "dataset_info.json").is_file()
                           or (p / "dataset_dict.json").is_file())


def source_root(spec: str) -> Path | None:
    """The folder of a multi-file source (a folder, or a glob's folder before its first wildcard); None for a single
    file, a hub id or the generator. Row ids of such a source name each row's file relative to this folder."""
    if GLOB & set(spec):
        parts = Path(spec).parts
        i = next(i for i, x in enumerate(parts) if GLOB & set(x))
        return Path(*parts[:i]) if i else Path(".")
    p = Path(spec)
    return p if p.is_dir() else None


def source_files(spec: str) -> list[Path]:
    """Every file one source reads, sorted: a folder's data files (``*.parquet``, ``*.jsonl``, ... at any depth, hidden
    ones and a cache's ``.lock`` files left out), a glob's matches, a ``save_to_disk`` folder's every file, or the
    one file. Empty for a hub id or the generator. A link that leads out of the folder is never followed
    (``skipped_files`` names it)."""
    return _scan(spec)[0]


def skipped_files(spec: str) -> dict[str, str]:
    """What a folder or glob source holds and does not read: each file (relative to the folder) and why."""
    return _scan(spec)[1]


def _scan(spec: str) -> tuple[list[Path], dict[str, str]]:
    root = source_root(spec)
    if root is None:
        p = Path(spec)
        return ([p] if p.is_file() else []), {}
    pattern = Path(spec).parts[len(root.parts):] if GLOB & set(spec) else None
    inside = root.resolve()
    files, skipped = [], {}
    seen: dict[Path, str] = {}  # each file is read once, however many names (links) lead to it
    for f, kind in sorted(_walk(root)):  # in path order, as the files of a source always were
        rel = f.relative_to(root)
        if pattern is not None and not _glob_match(pattern, rel.parts):
            continue
        if any(part.startswith(".") for part in rel.parts):
            continue  # hidden files and a cache's .lock files: not data
        if kind != "file":
            skipped[str(rel)] = kind
            continue
        real = f.resolve()
        if real != inside and inside not in real.parents:
            skipped[str(rel)] = f"a link to {real}, outside the source folder"
        elif real in seen:
            skipped[str(rel)] = f"the same file as {seen[real]} (read once)"
        elif pattern is None and not is_saved_dataset(root) and _file_format(f) is None:
            skipped[str(rel)] = f"not a data file ({f.suffix or 'no suffix'}: {', '.join(sorted(SUFFIXES))}, optionally .gz)"
        else:
            seen[real] = str(rel)
            files.append(f)
    return files, skipped


def _walk(root: Path) -> Iterator[tuple[Path, str]]:
    """Every entry under ``root`` in sorted order, as (path, kind): ``file`` for a regular file (or a link to one), else
    why it is not read. Links to folders are not followed (a ``self -> .`` link or a loop of links would be read
    forever, or the same files many times); FIFOs, devices and sockets are never opened (a FIFO blocks a reader)."""
    import os
    import stat

    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        d = Path(dirpath)
        for name in sorted(filenames + [x for x in dirnames if (d / x).is_symlink()]):
            f = d / name
            try:
                st = f.stat()
            except OSError:
                yield f, "a broken link (or a link loop)"
                continue
            if stat.S_ISREG(st.st_mode):
                yield f, "file"
            elif stat.S_ISDIR(st.st_mode):
                yield f, "a link to a folder (not followed)"
            else:
                yield f, f"not a regular file ({_special(st.st_mode)})"


def _special(mode: int) -> str:
    import stat

    return ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")


def _glob_match(pattern: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    """Whether a relative path's parts match a glob's parts (``**`` matches any number of folders, as ``glob``'s
    recursive mode; other parts by ``fnmatch`` case-sensitively, a leading dot matched only by a leading dot)."""
    from fnmatch import fnmatchcase

    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_glob_match(rest, parts[i:]) for i in range(len(parts) + 1))
    if not parts or (parts[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatchcase(parts[0], head) and _glob_match(rest, parts[1:])


def detect_format(spec: str) -> str:
    if spec == "synthetic" or spec.startswith("synthetic:"):
        return "synthetic"
    if spec.startswith("reasoning_gym:"):
        return "reasoning_gym"
    p = Path(spec)
    if GLOB & set(spec) or p.is_dir():
        if p.is_dir() and is_saved_dataset(p):
            return "arrow"
        files = source_files(spec)
        if not files:
            raise SourceError(f"{spec}: no data files ({', '.join(sorted(SUFFIXES))}, optionally .gz) "
                              + ("match" if GLOB & set(spec) else "in this folder"))
        fmts = sorted({_file_format(f) or f.suffix for f in files})
        if len(fmts) > 1:
            raise SourceError(f"{spec}: files of several formats ({', '.join(fmts)}); give one glob per format, "
                              "e.g. 'folder/*.parquet'")
        fmt = fmts[0]
        if fmt not in FORMATS:
            raise SourceError(f"{spec}: unknown file type {fmt!r}")
        return _json_or_lines(files[0]) if fmt == "json" else fmt
    if p.exists():
        if not p.is_file():  # a FIFO would block the reader forever; a device is not data
            raise SourceError(f"{spec}: not a regular file ({_special(p.stat().st_mode)}); gradus reads files, folders "
                              "and globs")
        one = _file_format(p)
        if one is None:
            raise SourceError(f"{spec}: unknown file type {p.suffix!r}; use --format one of {', '.join(FORMATS)}")
        return _json_or_lines(p) if one == "json" else one
    looks_local = spec.startswith((".", "/", "~")) or spec.count("/") > 1 or Path(spec.split("@")[0]).suffix.lower() in (
        ".jsonl", ".ndjson", ".json", ".csv", ".parquet", ".gz", ".txt", ".tsv")
    if looks_local:
        raise SourceError(f"{spec}: no such file")
    if spec.startswith("hf:") or spec.count("/") == 1:
        return "hf"
    raise SourceError(f"{spec}: no such file, and not a hub id (owner/name) or 'synthetic'")


def _json_or_lines(p: Path) -> str:
    """A .json file may hold JSON lines."""
    with open(p, "rb") as f:
        head = f.read(4096).lstrip()
    return "json" if head.startswith(b"[") else "jsonl"


def _stringify(table: pa.Table, row0: int) -> pa.Table:
    """All columns as strings (nested ones as JSON text), plus the bookkeeping columns."""
    cols, names = [], []
    n = table.num_rows
    # per row, its nested columns (built only when the table has one: most sources are flat)
    nonscalar: list[list[str]] = [[] for _ in range(n)] if any(pa.types.is_nested(c.type) for c in table.columns) else []
    numbers: list[str] = []  # columns of numbers (named in the schema's metadata: a problem may not be one)
    for name, col in zip(table.column_names, table.columns, strict=False):
        t = col.type
        if pa.types.is_null(t):
            arr = pa.nulls(n, pa.string())
        elif pa.types.is_nested(t):
            vals = col.to_pylist()
            for i, v in enumerate(vals):
                if v is not None:
                    nonscalar[i].append(f"{name}:{'dict' if pa.types.is_struct(t) else 'list'}")
            arr = pa.array([None if v is None else json.dumps(v, ensure_ascii=False) for v in vals], pa.string())
        else:
            arr = pc.cast(col, pa.string())  # 60 -> "60", 142.0 -> "142" or "142.0" as arrow prints it
            if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
                numbers.append(name)
        cols.append(arr)
        names.append(name)
    cols += [
        pa.nulls(n, pa.string()),
        pa.array([",".join(x) or None for x in nonscalar], pa.string()) if nonscalar else pa.nulls(n, pa.string()),
        pa.array(np.arange(row0, row0 + n, dtype=np.int64)),
        pa.nulls(n, pa.string()),
    ]
    names += ["_value", "_nonscalar", "_row", "_bad"]
    out = pa.table(cols, names=names)
    return out.replace_schema_metadata({NUMBERS_KEY: ",".join(numbers)}) if numbers else out


def _open_bytes(path: Path):
    """The file for reading bytes, gunzipped when its name ends in ``.gz``; and the errors a compressed file cut short
    (a copy that did not finish) raises part way."""
    import gzip
    import zlib

    if path.suffix == ".gz":
        return gzip.open(path, "rb"), (EOFError, gzip.BadGzipFile, zlib.error)
    return open(path, "rb"), ()


def _lines(path: Path) -> Iterator[bytes]:
    """The lines of a file, gunzipped when its name ends in ``.gz``. A compressed file cut short gives the lines
    before the cut, then one ``_TRUNCATED`` marker with the reason."""
    f, cut_short = _open_bytes(path)
    with f:
        try:
            yield from f
        except cut_short as e:
            yield _TRUNCATED + str(e).encode()


_TRUNCATED = b"\x00gradus-truncated:"


def _jsonl_slow(path: Path) -> Iterator[pa.Table]:
    batch: list = []
    rowno = -1
    for raw in _lines(path):
        if raw.startswith(_TRUNCATED):  # the rest of the file is lost: said by one rejected row
            why = raw[len(_TRUNCATED):].decode()
            batch.append((rowno + 1, why, f"truncated_file:{why}; the rows after it are not in the file"))
            break
        if not raw.strip():
            continue
        rowno += 1
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            batch.append((rowno, raw[:200].decode("utf-8", "replace"), f"invalid_utf8:{e.start}"))
        else:
            try:
                batch.append((rowno, json_loads(line), None))
            except json.JSONDecodeError as e:
                batch.append((rowno, line[:200], f"malformed_json:{e.msg}"))
            except RecursionError:  # nested deeper than Python parses: one rejected row, not a traceback
                batch.append((rowno, line[:200], "malformed_json:nested too deep"))
        if len(batch) >= BATCH_ROWS:
            yield rows_to_table(batch)
            batch = []
    if batch:
        yield rows_to_table(batch)


MAX_OPENERS = 5_000  # '[' and '{' in one line, quoted or not: at least its nesting depth; arrow's JSON reader
# crashes the process (stack overflow) on a value nested past about 10,000, so such a file goes line by line


def _nested_too_deep(path: Path, limit: int = MAX_OPENERS) -> bool:
    """True when some line of the file holds more than ``limit`` brackets and braces (an upper bound on its depth).
    Counted per 64 KiB piece with ``bytes.count``; only a piece dense with brackets is counted line by line."""
    carry = 0  # openers since the last newline
    for piece in _pieces(path, 1 << 16):
        first, last = piece.find(b"\n"), piece.rfind(b"\n")
        if first < 0:
            carry += piece.count(b"[") + piece.count(b"{")
            if carry > limit:
                return True
            continue
        head, body, tail = piece[:first], piece[first:last], piece[last:]
        if carry + head.count(b"[") + head.count(b"{") > limit:
            return True
        if body.count(b"[") + body.count(b"{") > limit:  # dense: count each line
            a = np.frombuffer(body, np.uint8)
            ends = np.flatnonzero(a == 10)
            opens = np.cumsum((a == 91) | (a == 123), dtype=np.int64)
            if np.diff(np.append(opens[ends], opens[-1])).max(initial=0) > limit:
                return True
        carry = tail.count(b"[") + tail.count(b"{")
    return False


def _pieces(path: Path, size: int) -> Iterator[bytes]:
    f, cut_short = _open_bytes(path)
    with f:
        try:
            while piece := f.read(size):
                yield piece
        except cut_short:
            return  # the readers say it: a compressed file cut short


def _jsonl_fast(path: Path) -> Iterator[pa.Table]:
    row0 = 0
    if _nested_too_deep(path):
        raise FastPathFailed(f"a line nests deeper than {MAX_OPENERS} brackets: read line by line")
    try:
        reader = pajson.open_json(path, read_options=pajson.ReadOptions(block_size=8 << 20))
        for rb in reader:
            t = pa.Table.from_batches([rb])
            for name, col in zip(t.column_names, t.columns, strict=True):
                if pa.types.is_string(col.type):  # arrow's JSON reader does not check UTF-8 inside strings: a bad
                    col.validate(full=True)  # byte would fail the whole file later; the slow path rejects its row
                elif pa.types.is_floating(col.type):  # arrow read numbers through a double: 2^100, 0.333...3 and
                    raise FastPathFailed(f"column {name!r} holds numbers with a fraction or exponent, or integers "
                                         "past 64 bits: read line by line to keep their digits")  # 1e400 lose digits
            yield _stringify(t, row0)
            row0 += t.num_rows
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, UnicodeDecodeError, OSError,
            RecursionError) as e:  # OSError: a compressed file cut short; RecursionError: a value nested past json.dumps
        raise FastPathFailed(str(e)[:200]) from e  # read line by line, where each bad line is a rejected row


def _json_array(path: Path) -> Iterator[pa.Table]:
    """A file holding one JSON array (DeepScaleR, ORZ). Small files by nature: parsed whole."""
    raw = path.read_bytes()
    try:
        data = json_loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise SourceError(f"{path}: not UTF-8 at byte {e.start}; a JSON array cannot be split into rows") from e
    except json.JSONDecodeError as e:
        raise SourceError(f"{path}: malformed JSON ({e.msg} at line {e.lineno})") from e
    except RecursionError:  # one array holds every row: a value nested past Python's limit spoils the whole parse
        raise SourceError(f"{path}: a value nested deeper than Python's JSON reader goes; as JSON lines (one row a "
                          "line) only that row would be rejected") from None
    if isinstance(data, dict):  # {"data": [...]} or a single object
        lists = [v for v in data.values() if isinstance(v, list)]
        data = lists[0] if len(lists) == 1 else [data]
    for i in range(0, len(data), BATCH_ROWS):
        yield rows_to_table([(i + j, v, None) for j, v in enumerate(data[i : i + BATCH_ROWS])])


def _csv_header(path: Path) -> list[str]:
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        return next(csv.reader(f), [])


def _csv_fast(path: Path) -> Iterator[pa.Table]:
    names = _csv_header(path)
    if not names:
        raise SourceError(f"{path}: empty CSV file")
    row0 = 0
    try:
        reader = pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(block_size=8 << 20),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.string() for n in names}, strings_can_be_null=False, quoted_strings_can_be_null=False
            ),
        )
        for rb in reader:
            t = pa.Table.from_batches([rb])
            yield _stringify(t, row0)
            row0 += t.num_rows
    except (pa.ArrowInvalid, UnicodeDecodeError, OSError) as e:
        raise FastPathFailed(str(e)) from e


def _csv_slow(path: Path) -> Iterator[pa.Table]:
    raw = b"".join(_lines(path))
    cut = raw.find(_TRUNCATED)
    if cut >= 0:
        raise SourceError(f"{path}: the compressed file is cut short ({raw[cut + len(_TRUNCATED):].decode()}); "
                          "copy it again")
    lines = raw.decode("utf-8", "surrogateescape").splitlines(keepends=True)
    names = next(csv.reader(lines[:1]), [])
    batch: list = []
    rowno = -1
    for fields, bad in _csv_records(lines, 1):
        rowno += 1
        if bad is None and len(fields) != len(names):
            bad = f"malformed_csv:{len(fields)}_fields_expected_{len(names)}"
        row = {}
        for k, v in zip(names, fields, strict=False):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                bad = bad or f"invalid_utf8:{k}"
                v = v.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            row[k] = v
        batch.append((rowno, row, bad))
        if len(batch) >= BATCH_ROWS:
            yield rows_to_table(batch)
            batch = []
    if batch:
        yield rows_to_table(batch)


def _csv_records(lines: list[str], start: int) -> Iterator[tuple[list[str], str | None]]:
    """``(fields, bad)`` of each CSV record from line ``start`` on. A quote opened and never closed would make the
    rest of the file one field: that line is a malformed record of its own, and reading goes on at the next line."""
    while start < len(lines):
        reader = csv.reader(lines[start:], strict=True)
        first = start
        try:
            for fields in reader:
                yield fields, None
                first = start + reader.line_num
            return
        except csv.Error as e:
            yield [lines[first].rstrip("\r\n")], f"malformed_csv:{str(e).replace(' ', '_')}_at_line_{first + 1}"
            start = first + 1


def _parquet(path: Path) -> Iterator[pa.Table]:
    row0 = 0
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as e:
        named = _file_format(path)
        hint = f" (its name says {named}: leave --format out, or give the right one)" if named not in (None, "parquet") else ""
        raise SourceError(f"{path}: not a readable Parquet file{hint}: {e}") from e
    for rb in pf.iter_batches(batch_size=BATCH_ROWS):
        t = pa.Table.from_batches([rb])
        yield _stringify(t, row0)
        row0 += t.num_rows


def _hub(spec: str, pinned=None, slow: bool = False) -> Iterator[pa.Table]:
    """A Hugging Face hub id: ``owner/name``, ``hf:owner/name``, optional ``:config`` and ``@split``, read at the commit
    ``pinned`` names (``curate.sources.hub.resolve``): streamed from the Hub, or offline from the cached snapshot's
    files."""
    from curate.sources.hub import HubSource, offline, resolve, snapshot_files

    src = HubSource.parse(spec)
    pinned = pinned or resolve(spec)
    if offline() or pinned.how == "cache":
        if pinned.snapshot is None:
            raise SourceError(f"{spec}: offline, and commit {pinned.commit[:12]} is not in the hub cache")
        files = snapshot_files(spec, pinned.snapshot)
        fmts = {_file_format(f) for f in files}
        if len(fmts) != 1 or None in fmts:
            raise SourceError(f"{spec}: the cached snapshot's {src.split} files are not of one known format")
        yield from _files(files, pinned.snapshot, str(fmts.pop()), slow)
        return
    import datasets  # heavy; imported only for hub sources

    try:
        ds = datasets.load_dataset(src.name, src.config, split=src.split, streaming=True, revision=pinned.commit)
    except Exception as e:
        first = (str(e).splitlines() or [""])[0][:200]
        raise SourceError(f"{spec}: cannot load from the hub ({type(e).__name__}: {first})") from e
    row0 = 0
    for batch in ds.iter(batch_size=BATCH_ROWS):
        t = pa.table({k: pa.array(v) for k, v in batch.items()})
        yield _stringify(t, row0)
        row0 += t.num_rows


def _saved_dataset(path: Path) -> Iterator[pa.Table]:
    """A ``datasets.save_to_disk`` folder (its ``train`` split when it holds a DatasetDict), batch by batch."""
    import datasets

    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        if "train" not in ds:
            raise SourceError(f"{path}: a saved DatasetDict without a train split ({', '.join(ds)}); give the split's "
                              "folder as the source")
        ds = ds["train"]
    row0 = 0
    for t in ds.with_format("arrow").iter(batch_size=BATCH_ROWS):
        yield _stringify(t, row0)
        row0 += t.num_rows


def _files(files: list[Path], root: Path, fmt: str, slow: bool) -> Iterator[pa.Table]:
    """The batches of a multi-file source, each row tagged with its file relative to ``root`` (``_file``); a
    ``.json`` file of a JSON-lines source is read as lines."""
    for f in files:
        name = str(f.relative_to(root))
        for t in _one_file(f, _json_or_lines(f) if fmt == "json" else fmt, slow):
            yield t.append_column("_file", pa.array([name] * t.num_rows, pa.string()))


def _one_file(path: Path, fmt: str, slow: bool) -> Iterator[pa.Table]:
    if fmt == "json":
        yield from _json_array(path)
    elif fmt == "parquet":
        yield from _parquet(path)
    elif fmt == "jsonl":
        yield from (_jsonl_slow(path) if slow else _jsonl_fast(path))
    else:
        yield from (_csv_slow(path) if slow else _csv_fast(path))


def read_all(spec: str, fmt: str | None = None) -> list[pa.Table]:
    """Every raw batch of a small source (a benchmark, a check set), held in memory: arrow's readers first, the line
    readers when those give up (``FastPathFailed``: a bad byte, a number a double would round), as ingest does."""
    try:
        return list(read_source(spec, fmt))
    except FastPathFailed:
        return list(read_source(spec, fmt, slow=True))


def read_source(spec: str, fmt: str | None = None, slow: bool = False, pinned=None) -> Iterator[pa.Table]:
    """Stream raw string batches from ``spec`` (a file, a folder of shards, a glob, a ``save_to_disk`` folder, a hub id,
    ``synthetic[:key=val,...]`` or ``reasoning_gym:task=NAME,...``).

    JSONL and CSV go through arrow's streaming readers unless ``slow``; when those fail part way they
    raise ``FastPathFailed`` and the caller (``curate.ingest``) discards its partial output and reads the
    file again with ``slow=True``, where each bad line becomes a row with ``_bad`` set. The batches of a folder or a
    glob carry ``_file``: each row's file relative to the source's folder (its row numbers count within that file, so
    a shard added later leaves the ids of the rows already there as they were).
    """
    fmt = fmt or detect_format(spec)
    if fmt not in FORMATS:
        raise SourceError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "synthetic":
        from curate.sources.synthetic import synthetic_batches

        yield from synthetic_batches(spec)
        return
    if fmt == "reasoning_gym":
        from curate.sources.reasoning_gym import reasoning_gym_batches

        yield from reasoning_gym_batches(spec)
        return
    if fmt == "hf":  # pinned: the commit to read (``curate.sources.hub.Pinned``; resolved here when None)
        yield from _hub(spec, pinned, slow)
        return
    root = source_root(spec)
    if fmt == "arrow":
        if root is None or not is_saved_dataset(root):
            raise SourceError(f"{spec}: not a datasets save_to_disk folder (no state.json and dataset_info.json)")
        yield from _saved_dataset(root)
        return
    if root is None:
        path = Path(spec)
        if not path.is_file():
            raise SourceError(f"{spec}: no such file")
        yield from _one_file(path, fmt, slow)
        return
    files = source_files(spec)
    if not files:
        raise SourceError(f"{spec}: no data files")
    yield from _files(files, root, fmt, slow)


def file_fingerprint(spec: str) -> str:
    """What a source is, for the stage identity: a file's content hash; for a folder, a glob or a ``save_to_disk``
    folder, every file's name (relative to the folder), size and content hash, so a shard added, removed or changed
    re-ingests the source; for a hub id, its name (``curate.sources.hub`` pins it to a commit first); for the
    generator, its spec."""
    import hashlib

    from curate.core.shards import file_sha256

    p = Path(spec)
    if p.is_file():
        return file_sha256(p)[:16]
    root = source_root(spec)
    if root is not None:
        h = hashlib.sha256()
        for f in source_files(spec):
            h.update(f"{f.relative_to(root)}\0{f.stat().st_size}\0{file_sha256(f)}\n".encode())
        return h.hexdigest()[:16]
    return hashlib.sha256(spec.encode()).hexdigest()[:16]  # hub ids and generator specs: by name
