"""The one stage runner (``Runner``) and the per-batch writer of ``shards`` stages (``StageRun``).

Every stage runs through ``Runner``: output-folder safety (never an input, never a folder gradus did not
write), skip when a complete output of the same identity is there (shard hashes verified), clean restart
or resume of finished parts, conservation against the upstream manifests, and the manifest written last.
A ``shards`` stage is a function that receives a ``StageRun`` and calls ``run.emit(kept, rejected)`` per
batch; ``parts`` (estimation) and ``folder`` (export) stages call ``begin`` and ``finish`` themselves.

One job, in one module of more than 500 lines: the contract every stage runs under (its checks share the
manifest, the identity and the folder rules).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import shutil
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from curate.core.errors import GradusError
from curate.core.locks import entries_besides
from curate.core.manifest import MANIFEST, MANIFEST_VERSION, STAGE_KINDS, Manifest, ManifestError
from curate.core.schema import REJECT_SCHEMA, SCHEMA, SCHEMA_VERSION
from curate.core.shards import ROWS_PER_SHARD, ShardWriter

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
        self.timings: defaultdict[str, float] = defaultdict(float)
        self.extra: dict = {}

    def reset(self) -> None:
        """Discard everything written so far (shards included) and start the counters again."""
        self.kept.abort()
        self.rejected.abort()
        for sub in ("kept", "rejected"):
            shutil.rmtree(self.out / sub, ignore_errors=True)
        fresh = StageRun(self.name, self.out, self.kept.rows_per_shard)
        self.__dict__.update(fresh.__dict__)

    @contextmanager
    def timed(self, key: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            took = time.perf_counter() - t0
            self.timings[key] += took
            from curate.core.stop import check

            check()  # between a stage's steps
            if key != "write" and took >= 1.0:  # a stage's long steps (dedup's signatures, pairs, clusters): progress
                log.info("%s: %s done in %.1f s", self.name, key, took)

    def emit(self, kept: pa.Table, rejected: pa.Table | None = None, rows_in: int | None = None) -> None:
        """Write one batch's outcome. ``rows_in`` defaults to kept + rejected rows."""
        from curate.core.stop import check

        check()  # a stop asked for (Ctrl-C): the stage ends here, between batches
        with self.timed("write"):
            n_rej = 0 if rejected is None else rejected.num_rows
            self.rows_in += kept.num_rows + n_rej if rows_in is None else rows_in
            if kept.num_rows:
                self.kept.write(kept)
                for src, n in value_counts(kept["source"]).items():
                    self.by_source[src]["in"] += n
                    self.by_source[src]["kept"] += n
            if rejected is not None and n_rej:
                self.rejected.write(rejected)
                reasons = rejected["reject_reason"]
                self.reasons.update(value_counts(reasons))
                pairs = pc.binary_join_element_wise(pc.fill_null(rejected["source"], "?"), reasons, "\x1f")
                for key, n in value_counts(pairs).items():
                    src, reason = key.split("\x1f", 1)
                    self.by_source[src]["in"] += n
                    self.by_source[src]["rejected/" + reason] += n
            for t in (kept, rejected):
                if t is None or not t.num_rows:
                    continue
                names = set(t.column_names)
                for sig in SIGNALS:
                    if sig in names:  # a boolean column's sum counts its true values (nulls are skipped)
                        self.signals[sig] += int(pc.sum(t[sig]).as_py() or 0)


def value_counts(col: pa.ChunkedArray | pa.Array) -> dict[str, int]:
    vc = pc.value_counts(col)
    return {v["values"].as_py(): v["counts"].as_py() for v in vc}


def reject_table(t: pa.Table, stage: str, reasons: pa.Array | list, details: pa.Array | list | None = None) -> pa.Table:
    """Rows of SCHEMA plus why they were rejected, as REJECT_SCHEMA."""
    n = t.num_rows
    reasons = reasons if isinstance(reasons, pa.Array | pa.ChunkedArray) else pa.array(reasons, pa.string())
    details = pa.nulls(n, pa.string()) if details is None else details
    if not isinstance(details, pa.Array | pa.ChunkedArray):
        details = pa.array(details, pa.string())
    names = set(t.column_names)  # once: ``t.column_names`` builds its list anew on each call
    cols = [t[f.name] if f.name in names else pa.nulls(n, f.type) for f in SCHEMA]
    cols += [pa.repeat(pa.scalar(stage, pa.string()), n), reasons, details]
    return pa.Table.from_arrays(cols, schema=REJECT_SCHEMA)


class StageError(GradusError):
    """An output folder the runner will not touch, or a stage whose counts do not add up."""


MARKER = ".gradus-stage.json"  # written before any data: this folder is a gradus stage output (maybe unfinished)
# what a stage output folder may hold, by output kind; anything else is a user's and stops the run
_CARD = {"README.md", "card.json", "plots"}  # a data card of the output (data_cards), rebuilt with it
LOCK = ".gradus-stage.lock"  # held (flock) by the stage run writing the folder (curate.core.locks)
_OWN = {
    "shards": {MANIFEST, MARKER, LOCK, "kept", "rejected", "work", *_CARD},  # work: dedup's on-disk files, until done
    # run.json: gradus 0.1's marker; prior.json (and its lock): an adaptive run's fitted prior, kept when resuming
    "parts": {MANIFEST, MARKER, LOCK, "kept", "rejected", "responses", "run.json", "prior.json", ".prior.lock", *_CARD},
    "folder": {MANIFEST, MARKER, LOCK, "data", "selection_report.json", *_CARD},
}


_STAGE_PART = re.compile(r"stage_\d+_[A-Za-z0-9_.-]+$")
# what may lie inside the folders a stage owns (anything else is a user's file, and stops the run)
_INSIDE = {"kept": (".parquet", ".tmp"), "rejected": (".parquet", ".tmp"), "responses": (".parquet", ".tmp"),
           "plots": (".png",), "data": (".parquet", ".jsonl", ".arrow", ".json", ".tmp"),
           "work": (".npy", ".bin", ".arrow", ".parquet", ".json", ".tmp")}
# the shard folders hold only shards by gradus's own names (shards.ShardWriter, the estimate's parts): a user's
# ``kept/mine.parquet`` is theirs, and stops the run instead of being deleted with the folder
_SHARD_NAME = re.compile(r"(?:shard|part)_\d{5,6}\.parquet(?:\.tmp)?$")
_NAMED = {"kept", "rejected", "responses"}
# dedup's work files by their names (curate.clean.dedup_disk: ids_00000.json, exact_00000.bin, pairs_000.bin, ...) and
# the card's plots by theirs (data_cards.plots): a user's work/notes.json or plots/x.png is theirs, not deleted
_WORK_NAME = re.compile(r"(?:format\.json|[a-z]+_\d{3,6}(?:\.cuts)?\.(?:npy|bin|arrow|json|parquet))(?:\.tmp)?$")
_DATA_NAME = re.compile(r"(?:part_\d{5,6}\.(?:parquet|jsonl)|data-\d{5}-of-\d{5}\.arrow|dataset_info\.json|state\.json)"
                        r"(?:\.tmp)?$")  # an export's files (curate.select.export._write): a user's data/mine.parquet is not
_PLOT_NAMES = {"waterfall.png", "pass_counts.png", "pass_rate_by_level.png", "reliability.png", "sources.png",
               "buckets.png", "training.png"}


def _inside_ok(folder: str, f: Path) -> bool:
    if not f.is_file() or f.is_symlink():
        return False
    if folder == "work":
        return bool(_WORK_NAME.match(f.name))
    if folder == "plots":
        return f.name in _PLOT_NAMES
    if folder == "data":
        return bool(_DATA_NAME.match(f.name))
    return bool(_SHARD_NAME.match(f.name)) if folder in _NAMED else f.name.endswith(_INSIDE[folder])


def _gradus_card(out: Path) -> bool:
    """Whether ``out/card.json`` is a card gradus wrote (it carries ``card_version``): then README.md and plots/ beside
    it are the card's; without it a README.md there is a user's."""
    try:
        return json.loads((out / "card.json").read_text()).get("card_version") is not None
    except (OSError, ValueError, AttributeError):
        return False


def foreign_entries(kind: str, out: Path) -> list[str]:
    """What in a stage output folder gradus did not write, as paths relative to it (files inside the folders it owns
    named one by one)."""
    found = []
    for e in sorted(out.iterdir()):
        if _owned(kind, e.name, e):
            continue
        base = e.name[: -len(".tmp")] if e.name.endswith(".tmp") else e.name
        if base in _OWN[kind] and base in _INSIDE and e.is_dir() and not e.is_symlink():
            found += [f"{e.name}/{f.name}" for f in sorted(e.iterdir()) if not _inside_ok(base, f)]
        else:
            found.append(e.name)
    return found


def _owned(kind: str, name: str, path: Path | None = None) -> bool:
    base = name[: -len(".tmp")] if name.endswith(".tmp") else name
    if base in _CARD and path is not None and not _gradus_card(path.parent):
        return False
    if kind == "folder" and _STAGE_PART.match(base):
        return path is None or _only(path, ("part.json", MANIFEST), "data")  # manifest.json: gradus 0.1's part file
    if base not in _OWN[kind]:
        return False
    if path is not None and path.is_symlink():
        return False
    if path is not None and path.is_dir():
        return base in _INSIDE and all(_inside_ok(base, f) for f in path.iterdir())
    return path is None or not path.is_dir()


def _only(folder: Path, files: tuple[str, ...], sub: str) -> bool:
    """``folder`` holds only ``files`` and a ``sub`` folder of data files (a curriculum stage of an export)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    for e in folder.iterdir():
        if e.name == sub and e.is_dir():
            if not all(_inside_ok(sub, f) for f in e.iterdir()):
                return False
        elif e.name not in files and not e.name.endswith(".tmp"):
            return False
    return True


def shard_changes(folder: Path, m: Manifest) -> str | None:
    """The first shard of a finished stage output that is not what its manifest says (missing, or another sha256),
    ``kept/`` and ``rejected/`` both: a rewritten answer column or a deleted reject would otherwise pass on silently."""
    from curate.core.shards import file_sha256

    for sub, recs in (("kept", m.kept_shards), ("rejected", m.rejected_shards)):
        for rec in recs:
            p = Path(folder) / rec.get("file", f"{sub}/{rec['path']}")
            if not p.is_file():
                return f"{p} is missing"
            if rec.get("sha256") and file_sha256(p) != rec["sha256"]:
                return f"{p} does not hash as its manifest says (it changed after its stage wrote it)"
    return None


def input_entries(folders: list[Path]) -> list[dict]:
    """``{"path", "fingerprint", "rows"}`` of each input stage output (or bare shard folder). A stage output's shards
    are checked against its manifest first: an input changed after its stage finished is an error naming the file."""
    from curate.core.shards import count_rows, file_sha256, shard_paths, stage_dir

    out = []
    seen: dict[Path, Path] = {}
    for given in folders:
        f = Path(given)
        if f.name == "kept" and not (f / MANIFEST).exists() and (f.parent / MANIFEST).exists():
            f = f.parent  # the kept/ folder of a stage output: its manifest is one level up
        real = f.resolve()
        if real in seen:  # DIR and DIR/kept, or a link to DIR: its rows would be read twice
            raise StageError(f"{given}: the same input as {seen[real]}; give each input once")
        seen[real] = Path(given)
        m = Manifest.find(f)
        if m is not None:
            bad = shard_changes(f, m)
            if bad:
                raise StageError(f"{f}: an input changed after its {m.stage} stage finished: {bad}; run that stage "
                                 "again (--force), or restore the file")
            fp = hashlib.sha256(json.dumps([s["sha256"] for s in m.kept_shards]).encode()).hexdigest()[:16]
            out.append({"path": str(f), "fingerprint": fp, "rows": m.rows_kept})
        else:
            d = stage_dir(f)
            if d.name == "kept" and (d.parent / MARKER).exists() and not (d.parent / MANIFEST).exists():
                raise StageError(f"{f}: an unfinished stage output (no manifest); finish that stage first")
            paths = shard_paths(d)
            _records_or_refuse(f, paths)
            fp = hashlib.sha256(json.dumps([file_sha256(p) for p in paths]).encode()).hexdigest()[:16]
            out.append({"path": str(f), "fingerprint": fp, "rows": count_rows(d)})
    return out


def _records_or_refuse(folder: Path, paths: list[Path]) -> None:
    """A folder of Parquet files without a manifest is read as gradus records: refused in one line when its files
    lack the record columns (a plain data set's Parquet: ``gradus ingest`` reads those)."""
    import pyarrow.parquet as pq

    for p in paths[:1]:
        names = pq.read_schema(p).names
        missing = [c for c in ("id", "problem", "answer") if c not in names]
        if missing:
            raise StageError(f"{folder}: not gradus records ({p.name} has no {', '.join(repr(c) for c in missing)} "
                             f"column); read it with `gradus ingest {folder}` first")


def identity_hash(inputs: list[dict]) -> str:
    """What the inputs are, not where they lie: fingerprints (and source specs), without folder paths."""
    keyed = [{k: v for k, v in e.items() if k not in ("path", "rows")} for e in inputs]
    return hashlib.sha256(json.dumps(keyed, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Runner:
    """The one stage runner: output-folder safety, skip, clean restart or resume, conservation, the manifest.

    - *Safety*: the output may not be, contain or lie inside an input; a non-empty folder must be a gradus
      stage output of the same kind (``MARKER`` or ``manifest.json``) holding nothing but what gradus
      writes there, or the run stops before touching anything.
    - *Skip*: a manifest with the same identity (input fingerprints, config, code version) whose shards
      still hash as recorded means the output is complete: nothing is done (``manifest.skipped``).
    - *Restart*: otherwise the manifest is deleted first (a half-cleaned folder is never "complete"),
      then what the stage owns; ``parts`` stages keep finished parts of a run with the same identity.
    - *Conservation*: rows in = kept + rejected, the reasons add up, and rows in equals what the upstream
      manifests say they kept (or ``expected_rows_in``), checked before the manifest is written.
    """

    def __init__(self, kind: str, out: Path, inputs: list[dict], config: dict, force: bool = False,
                 input_folders: list[Path] | None = None):
        if kind not in STAGE_KINDS:
            raise StageError(f"unknown stage kind {kind!r}")
        self.kind, self.out, self.inputs, self.config, self.force = kind, Path(out), inputs, config, force
        self.input_hash = identity_hash(inputs)
        self.config_hash = config_hash(config)
        self.code_version = code_version()
        self.input_folders = [Path(p) for p in (input_folders or [])]
        self.t0 = time.perf_counter()

    # ---- before the work -----------------------------------------------------------------------------
    def _identity(self) -> dict:
        return {"stage": self.kind, "input_hash": self.input_hash, "config_hash": self.config_hash,
                "code_version": self.code_version}

    def check_output(self) -> None:
        """Refuse, before touching anything, an output that would destroy data or overwrite other settings."""
        out = self.out.resolve()
        for p in self.input_folders:
            p = p.resolve()
            stage_folder = p.parent if p.name == "kept" else p
            if out == p or out in p.parents:
                raise StageError(f"--out {self.out} is or contains the input {p}: choose another output folder")
            if stage_folder in out.parents or stage_folder == out:
                raise StageError(f"--out {self.out} lies inside the input {stage_folder}: choose a folder outside it")
        if self.out.is_symlink() or (self.out.exists() and not self.out.is_dir()):
            raise StageError(f"--out {self.out} is a file or a link: give a folder")
        if not self.out.is_dir():
            return
        entries = entries_besides(self.out, LOCK)
        if entries == [MARKER + ".tmp"] and (self.out / entries[0]).is_file():
            # a run killed while it claimed this folder: the marker is the first thing written and nothing else was;
            # writing the marker again overwrites the temporary file and renames it
            return
        if not entries:
            return
        prev = self._read_own(MARKER) or self._read_own(MANIFEST)
        if prev is None:
            raise StageError(f"--out {self.out} holds files gradus did not write ({', '.join(entries[:5])}"
                             f"{', ...' if len(entries) > 5 else ''}): choose an empty or new folder")
        if prev.get("stage") != self.kind:
            raise StageError(f"--out {self.out} holds a {prev.get('stage')} stage output, not {self.kind}: choose another "
                             "folder")
        foreign = foreign_entries(STAGE_KINDS[self.kind].output, self.out)
        if foreign:
            raise StageError(f"--out {self.out} also holds files gradus did not write ({', '.join(foreign[:5])}); "
                             "move them away or choose another folder")
        same_version = prev.get("manifest_version", MANIFEST_VERSION) == MANIFEST_VERSION
        if same_version and not self.force and prev.get("config_hash") != self.config_hash:
            raise StageError(f"{self.out} holds a {self.kind} output made with other settings (config "
                             f"{prev.get('config_hash')}, now {self.config_hash}); use another --out, or --force "
                             "to replace it")

    def _read_own(self, name: str) -> dict | None:
        """The marker or manifest of this folder if it is one gradus wrote (a known stage kind), else None."""
        f = self.out / name
        if not f.is_file():
            return None
        try:
            d = json.loads(f.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError, OSError):
            return None
        if not isinstance(d, dict) or d.get("stage") not in STAGE_KINDS:
            return None
        if name == MANIFEST and d.get("manifest_version", 1) != MANIFEST_VERSION:
            d["manifest_version"] = d.get("manifest_version", 1)  # an older gradus's output: replaced whatever its settings
        return d

    def previous(self) -> Manifest | None:
        """The complete output already there for this identity, or None (the stage must run). A folder that may not be
        written (``check_output``: a user's files in it, another stage's output) is refused here already."""
        self.check_output()
        if self.force:
            return None
        try:
            m = Manifest.find(self.out)
        except ManifestError as e:
            log.warning("%s is replaced by this run: %s", self.out, str(e).split(";")[0])
            return None
        if m is None or (m.input_hash, m.config_hash, m.code_version, m.schema_version) != (
                self.input_hash, self.config_hash, self.code_version, SCHEMA_VERSION):
            return None  # another identity, or shards of another record schema: the stage runs again
        bad = self._verify(m)
        if bad:
            log.warning("%s: %s; running the stage again", self.out, bad)
            return None
        m.skipped = True
        return m

    def _verify(self, m: Manifest) -> str | None:
        bad = shard_changes(self.out, m)
        if bad:
            return bad
        if STAGE_KINDS[self.kind].output != "folder":
            listed = {rec["path"] for rec in m.kept_shards}
            extra = [p.name for p in (self.out / "kept").glob("*.parquet") if p.name not in listed]  # gradus's own names
            if extra:
                return f"kept/ holds shards its manifest does not list ({', '.join(extra[:3])})"
        return None

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """One writer per output folder: after ``check_output`` (nothing written yet), the folder is made and its lock
        taken for the whole run; a second run on it refuses at once, naming the holder."""
        from curate.core.locks import FolderLock

        self.check_output()
        self.out.mkdir(parents=True, exist_ok=True)
        lock = FolderLock(self.out / LOCK)
        lock.error = StageError
        lock.hint = "wait for it to finish, or use another --out"
        lock.acquire()
        lock.update({"command": f"gradus {self.kind}"})
        try:
            yield
        finally:
            lock.release()

    def undo_claim(self) -> None:
        """A run that made its folder and failed before writing a row (a wrong mapping, a duplicated column, a source
        that cannot be read) leaves nothing: the folder goes when it holds only the marker, the lock and empty shard
        folders."""
        claim = {MARKER, MARKER + ".tmp", LOCK}
        entries = list(self.out.iterdir())
        if not all(e.name in claim and e.is_file() and not e.is_symlink()
                   or e.name in ("kept", "rejected") and e.is_dir() and not e.is_symlink() and not any(e.iterdir())
                   for e in entries):
            return
        for e in entries:
            e.rmdir() if e.is_dir() else e.unlink()
        self.out.rmdir()

    def resumable(self) -> bool:
        """Whether the folder holds an unfinished run of this same identity (``parts`` stages resume it)."""
        if self.force:
            return False
        return self._read_own(MARKER) == self._identity()

    def begin(self, keep_parts: bool = False) -> None:
        """Claim the folder: manifest first, then what the stage owns (unless resuming parts); write the marker.

        Parts are kept only for an unfinished run of the same identity: a folder that holds a manifest (a finished
        run whose shards no longer verify, or another identity) starts clean.
        """
        from curate.core.shards import write_json_atomic

        self.check_output()
        finished = (self.out / MANIFEST).exists()
        same_run = not finished and self.resumable()
        resume = keep_parts and same_run
        (self.out / MANIFEST).unlink(missing_ok=True)
        if not resume:
            for e in list(self.out.iterdir()) if self.out.is_dir() else []:
                if e.name == "work" and same_run:
                    continue  # a stage's own scratch files of this same identity: it resumes from them
                if e.name not in (MARKER, LOCK) and _owned(STAGE_KINDS[self.kind].output, e.name, e):
                    shutil.rmtree(e) if e.is_dir() and not e.is_symlink() else e.unlink()
        self.out.mkdir(parents=True, exist_ok=True)
        for tmp in self.out.glob("*/*.tmp"):
            tmp.unlink()
        write_json_atomic(self.out / MARKER, self._identity())
        what = ", ".join(str(e.get("path") or e.get("source")) for e in self.inputs[:3]) + (
            f" and {len(self.inputs) - 3} more" if len(self.inputs) > 3 else "")
        log.info("%s: %s %s into %s", self.kind, "resuming" if resume else "reading", what, self.out)

    # ---- after the work ------------------------------------------------------------------------------
    def expected_rows_in(self) -> int | None:
        rows = [e.get("rows") for e in self.inputs if "path" in e]
        return sum(int(r) for r in rows if r is not None) if rows and all(r is not None for r in rows) else None

    def finish(self, rows_in: int, kept_shards: list[dict], rejected_shards: list[dict], reasons: dict[str, int],
               by_source: dict, stats: dict, expected_rows_in: int | None = None, folder: Path | None = None,
               rows_kept: int | None = None) -> Manifest:
        """Check conservation and write the manifest (into ``folder``, default the output) last."""
        from curate.core.shards import write_json_atomic

        if rows_kept is None:
            rows_kept = sum(s["rows"] for s in kept_shards)
        rows_rej = sum(s["rows"] for s in rejected_shards) if rejected_shards or not reasons else sum(reasons.values())
        expected = expected_rows_in if expected_rows_in is not None else self.expected_rows_in()
        if expected is not None and rows_in != expected:
            raise StageError(f"{self.kind}: conservation broken: read {rows_in} rows, but the inputs' manifests "
                             f"say they hold {expected}")
        if rows_in != rows_kept + rows_rej or sum(reasons.values()) != rows_rej:
            raise StageError(f"{self.kind}: conservation broken: in={rows_in} kept={rows_kept} rejected={rows_rej} "
                             f"reasons={sum(reasons.values())}")
        m = Manifest(
            stage=self.kind, inputs=self.inputs, input_hash=self.input_hash, config=self.config,
            config_hash=self.config_hash, code_version=self.code_version, schema_version=SCHEMA_VERSION,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            seconds=round(time.perf_counter() - self.t0, 3), rows_in=rows_in, rows_kept=rows_kept, rows_rejected=rows_rej,
            rejected_by_reason=dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
            by_source={k: dict(v) for k, v in sorted(by_source.items())}, kept_shards=kept_shards,
            rejected_shards=rejected_shards, stats=stats,
        )
        write_json_atomic((folder or self.out) / MANIFEST, m.to_dict())
        reasons_text = ", ".join(f"{k} {v:,}" for k, v in m.rejected_by_reason.items()) or "none"
        log.info("%s: %s rows in, %s kept, %s rejected (%s) in %.1f s; written to %s", self.kind, f"{rows_in:,}",
                 f"{rows_kept:,}", f"{rows_rej:,}", reasons_text, m.seconds, self.out)
        return m

    def run(self, body: Callable[[StageRun], None], rows_per_shard: int = ROWS_PER_SHARD,
            expected_rows_in: int | None = None) -> Manifest:
        """A ``shards`` stage: ``body`` emits kept/rejected batches through a ``StageRun``."""
        done = self.previous()
        if done is not None:
            log.info("%s: complete output found in %s, nothing to do", self.kind, self.out)
            return done
        created = not self.out.exists()
        with self.hold():
            self.begin()
            run = StageRun(self.kind, self.out, rows_per_shard)
            try:
                body(run)
                # the writers' threads may still hold the last batches: an error there surfaces here, and aborts too
                kept_shards, rej_shards = run.kept.close(), run.rejected.close()
            except BaseException:
                run.kept.abort()
                run.rejected.abort()
                if created:
                    self.undo_claim()
                raise
            stats = {**run.extra, "signals": dict(run.signals),
                     "timings": {k: round(v, 3) for k, v in run.timings.items()}}
            return self.finish(run.rows_in, kept_shards, rej_shards, dict(run.reasons), run.by_source, stats,
                               expected_rows_in=expected_rows_in)


def run_stage(kind: str, out: Path, inputs: list[dict], config: dict, body: Callable[[StageRun], None],
              rows_per_shard: int = ROWS_PER_SHARD, force: bool = False, input_folders: list[Path] | None = None,
              expected_rows_in: int | None = None) -> Manifest:
    """Run a ``shards`` stage through the ``Runner`` (see there for what it guarantees)."""
    return Runner(kind, out, inputs, config, force, input_folders).run(body, rows_per_shard, expected_rows_in)
