"""Exports of balanced, difficulty-scored prompt sets: Parquet shards, JSON lines, Hugging Face ``datasets``.

    gradus export runs/demo/5_difficulty --format parquet --out runs/demo/6_export --total 1000 --curriculum

Every export row carries the prompt rendered by a named template (plain ``prompt`` text and chat
``messages``), the gold answer, the difficulty (pass rate, counts, Wilson bounds, bucket), the curriculum
stage and the resampling ``sample_weight``, so any trainer can use it as is. The folder is built under a
temporary name and renamed into place: a reader never sees half an export. Rows come in a seeded order;
the same inputs, settings and seed give the same rows in the same order (Parquet and JSONL files are
byte-identical; ``datasets`` adds its own fingerprint to ``state.json``).

Layout::

    OUT/manifest.json            settings, selection report, files with row counts and sha256
    OUT/selection_report.json    available / asked / taken per bucket, source and subject; exclusions
    OUT/data/...                 without --curriculum: the whole selection
    OUT/stage_1_easy/data/...    with --curriculum: one folder per stage, easy to hard, each with a part.json
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.core.config import ConfigError, check_choice
from curate.core.manifest import Manifest, ManifestError
from curate.core.runner import Runner, input_entries
from curate.core.shards import ShardWriter, file_sha256, shard_paths, stage_dir, write_json_atomic
from curate.difficulty import templates
from curate.select.curriculum import BucketSpec, Selection, SelectionError, Target, curriculum_stages, select

FORMATS = ("parquet", "jsonl", "hf", "trl", "verl", "openrlhf")
TRAINER_FORMATS = ("trl", "verl", "openrlhf")  # shaped for another trainer's own loader (see trainer_table)
PART_FILE = "part.json"  # in each curriculum stage folder: its bucket, rows, files and mean pass rate
MESSAGE = pa.struct([pa.field("role", pa.string()), pa.field("content", pa.string())])
EXPORT_SCHEMA = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("source", pa.string()),
    pa.field("source_id", pa.string()),
    pa.field("subject", pa.string()),
    pa.field("level", pa.string()),
    pa.field("problem", pa.string()),
    pa.field("answer", pa.string()),
    pa.field("prompt", pa.string()),
    pa.field("messages", pa.list_(MESSAGE)),
    pa.field("template", pa.string()),
    pa.field("pass_rate", pa.float32()),
    pa.field("pass_rate_low", pa.float32()),
    pa.field("pass_rate_high", pa.float32()),
    pa.field("n_correct", pa.int32()),
    pa.field("n_graded", pa.int32()),
    pa.field("k", pa.int32()),
    pa.field("difficulty_model", pa.string()),
    pa.field("difficulty_template", pa.string()),
    pa.field("bucket", pa.string()),
    pa.field("stage", pa.int32()),
    pa.field("sample_weight", pa.float32()),
])
INPUT_COLUMNS = ["id", "source", "source_id", "subject", "level", "problem", "answer", "pass_rate", "pass_rate_low",
                 "pass_rate_high", "n_correct", "n_graded", "k", "model", "template", "suspect_gold", "bucket_masses"]


@dataclass(frozen=True)
class ExportConfig:
    format: str = "parquet"  # parquet | jsonl | hf (datasets.save_to_disk) | trl | verl | openrlhf (their loaders' shapes)
    total: int | None = None  # rows to select; None: every eligible row
    target: str = "uniform"  # uniform (Kimi k1.5's balanced mix) | band:LO-HI (Open-R1: band:0.1-0.9) | hard=0.5,medium=0.3,...
    buckets: str | None = None  # middle buckets by upper pass rate; None: hard=1/3,medium=2/3,easy=1 (our choice)
    shortfall: str = "redistribute"  # when a bucket has fewer rows than its quota: redistribute | fail
    include_ends: bool | None = None  # keep never- and always-solved rows, flagged by bucket (unset: uniform target only)
    # "Never solved when scored" is not "never learnable": the trainer's sampler revisits them. False leaves them out
    # (Skywork-OR1, Open-R1 and POLARIS do); None keeps them under the uniform target, not in a band or custom target
    curriculum: bool = False  # one folder per stage, easy to hard (Kimi k1.5's curriculum sampling)
    template: str | None = None  # chat | qwen_math | r1 | none | fewshot (unset: the template the rows were scored with)
    # chat where the rows record none or several
    tokenizer: str | None = None  # model whose chat template renders the prompt text (template chat)
    seed: int = 0  # selection and order seed
    weight_floor: float = 0.05  # floor of Kimi's 1 - pass_rate resampling weight (our choice: solved rows not starved)
    rows_per_shard: int = 50_000  # rows per output file (our choice: ~50-100 MB Parquet at typical row sizes)
    card: bool = True  # the caller (gradus export, the flow) writes a data card (README.md, card.json, plots/) into it
    drop_suspect_gold: bool = False  # leave out rows whose samples agree on another answer than the gold

    def __post_init__(self):
        check_choice("format", self.format, FORMATS)
        check_choice("shortfall", self.shortfall, ("redistribute", "fail"))
        if self.template is not None:
            check_choice("template", self.template, templates.TEMPLATES)
        if self.rows_per_shard < 1:
            raise ConfigError("rows_per_shard must be >= 1")
        if self.total is not None and self.total < 1:
            raise ConfigError("total must be >= 1 (or left out for every eligible row)")
        if not 0 <= self.weight_floor <= 1:
            raise ConfigError("weight_floor must be in [0, 1]")


def load_scored(inputs: list[Path]) -> pa.Table:
    """Scored rows of one or more ``estimate`` outputs (or shard folders), with the columns exports need."""
    tables = []
    for inp in inputs:
        folder = stage_dir(Path(inp))
        for p in shard_paths(folder):
            names = pq.ParquetFile(p).schema_arrow.names
            missing = [c for c in ("n_correct", "n_graded", "pass_rate") if c not in names]
            if missing:
                raise SelectionError(f"{p}: not difficulty-scored (missing {missing}); run `gradus estimate` first")
            t = pq.read_table(p, columns=[c for c in INPUT_COLUMNS if c in names])
            for c in INPUT_COLUMNS:
                if c not in t.column_names:  # scored before the column existed
                    kind = {"suspect_gold": pa.bool_(), "bucket_masses": pa.list_(pa.float64())}.get(c, pa.string())
                    t = t.append_column(c, pa.nulls(t.num_rows, kind))
            tables.append(t.select(INPUT_COLUMNS))
    if not tables:
        raise SelectionError(f"no scored shards in {[str(p) for p in inputs]}")
    t = pa.concat_tables(tables, promote_options="permissive")
    if t.num_rows == 0:
        raise SelectionError("the scored shards hold no rows")
    return pass_rates_over_k(t)


def ends_included(cfg: ExportConfig) -> bool:
    """Whether the export keeps the never- and always-solved rows (``include_ends``; None: under the uniform target)."""
    return cfg.include_ends if cfg.include_ends is not None else (cfg.target or "uniform").strip() == "uniform"


def scored_template(table: pa.Table) -> str:
    """The template every row was scored with; ``chat`` where the rows record none or several."""
    names = {v for v in pc.unique(table["template"]).to_pylist() if v is not None}
    return names.pop() if len(names) == 1 and not table["template"].null_count else "chat"


def pass_rates_over_k(t: pa.Table) -> pa.Table:
    """``pass_rate`` and its Wilson bounds as ``n_correct / k`` wherever ``k`` is known.

    Rows scored before timeouts counted as failures hold ``n_correct / n_graded``; buckets, bands and
    sample weights must all read the same rate, so it is recomputed from the counts here.
    """
    from curate.difficulty.estimate import wilson

    ks, ncs = t["k"].to_pylist(), t["n_correct"].to_pylist()
    pr, lo, hi = t["pass_rate"].to_pylist(), t["pass_rate_low"].to_pylist(), t["pass_rate_high"].to_pylist()
    for i, (k, nc) in enumerate(zip(ks, ncs, strict=True)):
        if k and nc is not None:
            pr[i] = nc / k
            lo[i], hi[i] = wilson(nc, k)
    for name, vals in (("pass_rate", pr), ("pass_rate_low", lo), ("pass_rate_high", hi)):
        t = t.set_column(t.column_names.index(name), name, pa.array(vals, pa.float32()))
    return t


def _render(table: pa.Table, cfg: ExportConfig, stage: list[int | None]) -> pa.Table:
    template = cfg.template or "chat"  # export() has put the scoring template in when none was named
    tok = None
    if template in templates.CHAT_TEMPLATES and cfg.tokenizer:
        from transformers import AutoTokenizer

        from curate.difficulty.models import resolve_model

        tok = AutoTokenizer.from_pretrained(resolve_model(cfg.tokenizer)[0])
    prompts, messages = [], []
    for prob in table["problem"].to_pylist():
        msgs = templates.messages(template, prob)
        messages.append(msgs)
        if template in templates.CHAT_TEMPLATES and tok is None:
            # no tokenizer named: the last user turn, for trainers that template it (``messages`` has the examples)
            prompts.append(msgs[-1]["content"])
        else:
            prompts.append(templates.render(template, prob, tok))
    n = table.num_rows
    cols = {
        "id": table["id"], "source": table["source"], "source_id": table["source_id"], "subject": table["subject"],
        "level": table["level"], "problem": table["problem"], "answer": table["answer"],
        "prompt": pa.array(prompts, pa.string()), "messages": pa.array(messages, pa.list_(MESSAGE)),
        "template": pa.array([template] * n, pa.string()),
        "pass_rate": table["pass_rate"], "pass_rate_low": table["pass_rate_low"], "pass_rate_high": table["pass_rate_high"],
        "n_correct": table["n_correct"], "n_graded": table["n_graded"], "k": table["k"],
        "difficulty_model": table["model"], "difficulty_template": table["template"], "bucket": table["bucket"],
        "stage": pa.array(stage, pa.int32()),
        "sample_weight": table["sample_weight"],
    }
    return pa.Table.from_arrays([cols[f.name].cast(f.type) if cols[f.name].type != f.type else cols[f.name]
                                 for f in EXPORT_SCHEMA], schema=EXPORT_SCHEMA)


DIFFICULTY_FIELDS = ["id", "source", "subject", "level", "pass_rate", "pass_rate_low", "pass_rate_high", "n_correct",
                     "n_graded", "k", "difficulty_model", "difficulty_template", "bucket", "stage"]
VERL_EXTRA = pa.struct([pa.field("index", pa.int64())] + [EXPORT_SCHEMA.field(n) for n in DIFFICULTY_FIELDS]
                       + [pa.field("sample_weight", pa.float32()), pa.field("problem", pa.string())])
TRAINER_SCHEMAS = {
    # TRL GRPOTrainer: a conversational "prompt" (list of messages); every other column reaches the reward functions
    # as a keyword argument, so "answer" is the gold for rl_stage.rewards.math_reward.
    "trl": pa.schema([pa.field("prompt", pa.list_(MESSAGE)), pa.field("answer", pa.string())]
                     + [EXPORT_SCHEMA.field(n) for n in DIFFICULTY_FIELDS] + [pa.field("sample_weight", pa.float32())]),
    # verl RLHFDataset: data_source, prompt (messages), ability, reward_model {style, ground_truth}, extra_info.
    "verl": pa.schema([pa.field("data_source", pa.string()), pa.field("prompt", pa.list_(MESSAGE)),
                       pa.field("ability", pa.string()),
                       pa.field("reward_model", pa.struct([pa.field("style", pa.string()),
                                                           pa.field("ground_truth", pa.string())])),
                       pa.field("extra_info", VERL_EXTRA), pa.field("sample_weight", pa.float32())]),
    # OpenRLHF: JSON lines with an input key (messages, for --apply_chat_template; or the rendered text) and a label key.
    "openrlhf": pa.schema([pa.field("input", pa.list_(MESSAGE)), pa.field("prompt", pa.string()),
                           pa.field("label", pa.string())]
                          + [EXPORT_SCHEMA.field(n) for n in DIFFICULTY_FIELDS] + [pa.field("sample_weight", pa.float32())]),
}


def schema_of(fmt: str) -> pa.Schema:
    """The columns an export of format ``fmt`` holds."""
    return TRAINER_SCHEMAS.get(fmt, EXPORT_SCHEMA)


def trainer_table(table: pa.Table, fmt: str) -> pa.Table:
    """An ``EXPORT_SCHEMA`` table in the shape trainer ``fmt`` reads (the difficulty block goes where it can)."""
    diff = {n: table[n] for n in DIFFICULTY_FIELDS}
    if fmt == "trl":
        cols = {"prompt": table["messages"], "answer": table["answer"], **diff, "sample_weight": table["sample_weight"]}
    elif fmt == "openrlhf":
        cols = {"input": table["messages"], "prompt": table["prompt"], "label": table["answer"], **diff,
                "sample_weight": table["sample_weight"]}
    else:
        n = table.num_rows
        rows = table.select(DIFFICULTY_FIELDS + ["sample_weight", "problem"]).to_pylist()
        cols = {
            "data_source": pa.array([f"gradus/{s}" for s in table["source"].to_pylist()], pa.string()),
            "prompt": table["messages"], "ability": pa.array(["math"] * n, pa.string()),
            "reward_model": pa.array([{"style": "rule", "ground_truth": a} for a in table["answer"].to_pylist()],
                                     TRAINER_SCHEMAS["verl"].field("reward_model").type),
            "extra_info": pa.array([{"index": i, **r} for i, r in enumerate(rows)], VERL_EXTRA),
            "sample_weight": table["sample_weight"],
        }
    schema = TRAINER_SCHEMAS[fmt]
    return pa.Table.from_arrays([cols[f.name].cast(f.type) if cols[f.name].type != f.type else cols[f.name]
                                 for f in schema], schema=schema)


def _write(table: pa.Table, folder: Path, cfg: ExportConfig) -> list[dict]:
    """Write one table in the chosen format under ``folder/data``; returns the files with rows and sha256."""
    data = folder / "data"
    data.mkdir(parents=True, exist_ok=True)
    if cfg.format in TRAINER_FORMATS:
        table = trainer_table(table, cfg.format)
    if cfg.format in ("parquet", "trl", "verl"):
        w = ShardWriter(data, table.schema, cfg.rows_per_shard, prefix="part")
        w.write(table)
        return [{"path": f"data/{s['path']}", "rows": s["rows"], "sha256": s["sha256"]} for s in w.close()]
    if cfg.format in ("jsonl", "openrlhf"):
        files = []
        for i, start in enumerate(range(0, max(1, table.num_rows), cfg.rows_per_shard)):
            part = table.slice(start, cfg.rows_per_shard)
            path = data / f"part_{i:05d}.jsonl"
            with open(path, "w", encoding="utf-8") as f:
                for row in part.to_pylist():
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
            files.append({"path": f"data/{path.name}", "rows": part.num_rows, "sha256": file_sha256(path)})
        return files
    import datasets

    ds = datasets.Dataset(table)
    ds.save_to_disk(str(data), max_shard_size="500MB")
    return [{"path": f"data/{p.name}", "sha256": file_sha256(p)} for p in sorted(data.iterdir()) if p.is_file()]


def export(inputs: list[Path], out: Path, cfg: ExportConfig, force: bool = False) -> Manifest:
    """Select, render and write; returns the manifest (``skipped`` when the same export is already there).

    The folder is built under a temporary name beside ``out`` and swapped into place whole; the runner first
    checks that ``out`` is not an input and holds nothing but a previous export.
    """
    out = Path(out)
    folders = [Path(p) for p in inputs]
    runner = Runner("export", out, input_entries(folders), asdict(cfg), force, input_folders=folders)
    done = runner.previous()
    if done is not None:
        return done
    created = not out.exists()
    with runner.hold():  # checked, then held from the first read to the swap: a second writer of --out refuses
        try:
            _clear_stale(out.resolve())
            return _build(runner, folders, out, cfg)
        except BaseException:
            if created:  # a first export that failed: its claim (the folder and its lock) goes
                runner.undo_claim()
            raise


def _clear_stale(final: Path) -> None:
    """The temporary and old folders a killed export of ``final`` left beside it (gradus's own names, ``.NAME.tmp-PID``
    and ``.NAME.old-PID``). Called holding ``final``'s lock, so no export of it is running: every one is stale."""
    for d in (*final.parent.glob(f".{final.name}.tmp-*"), *final.parent.glob(f".{final.name}.old-*")):
        if d.is_dir() and not d.is_symlink() and d.name.rpartition("-")[2].isdigit():
            shutil.rmtree(d, ignore_errors=True)


def _build(runner: Runner, folders: list[Path], out: Path, cfg: ExportConfig) -> Manifest:
    table = load_scored(folders)
    if cfg.template is None:  # render the prompts as they were scored
        cfg = replace(cfg, template=scored_template(table))
    spec = BucketSpec.parse(cfg.buckets)
    target = Target.parse(cfg.target, spec)
    suspect = pc.fill_null(table["suspect_gold"], False)
    n_suspect = int(pc.sum(suspect).as_py() or 0) if cfg.drop_suspect_gold else 0
    sel: Selection = select(table.filter(pc.invert(suspect)) if n_suspect else table, cfg.total, target, spec,
                            seed=cfg.seed, shortfall=cfg.shortfall, include_ends=ends_included(cfg),
                            weight_floor=cfg.weight_floor)
    if n_suspect:  # left out before the selection, and said so with the other exclusions
        sel.report["excluded"] = {"suspect_gold": n_suspect, **sel.report["excluded"]}
    if sel.table.num_rows == 0:
        raise SelectionError(f"the export would hold 0 rows (of {table.num_rows} scored: left out "
                             f"{sel.report['excluded']})", ("target", "buckets", "include_ends"))
    final = out.resolve()
    tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        parts, files = [], []
        if cfg.curriculum:
            for i, (name, t) in enumerate(curriculum_stages(sel, spec), start=1):
                folder = tmp / f"stage_{i}_{name}"
                fs = _write(_render(t, cfg, [i] * t.num_rows), folder, cfg)
                part = {"stage": i, "bucket": name, "rows": t.num_rows, "files": fs,
                        "pass_rate_mean": _mean(t["pass_rate"]), "format": cfg.format}
                write_json_atomic(folder / PART_FILE, part)
                parts.append({"folder": folder.name, **{k: part[k] for k in ("stage", "bucket", "rows", "pass_rate_mean")}})
                files += [{**f, "file": f"{folder.name}/{f['path']}"} for f in fs]
        else:
            fs = _write(_render(sel.table, cfg, [None] * sel.table.num_rows), tmp, cfg)
            parts.append({"folder": ".", "rows": sel.table.num_rows, "files": fs})
            files += [{**f, "file": f["path"]} for f in fs]
        write_json_atomic(tmp / "selection_report.json", sel.report)
        reasons = dict(sel.report["excluded"])
        if sel.report["not_selected"]:
            reasons["not_selected"] = sel.report["not_selected"]
        by_source: dict[str, dict[str, int]] = {}
        for src, n in Counter(table["source"].to_pylist()).items():
            by_source.setdefault(str(src), {})["in"] = n
        for src, n in Counter(sel.table["source"].to_pylist()).items():
            by_source[str(src)]["kept"] = n
        stats = {"format": cfg.format, "template": cfg.template, "parts": parts, "selection": sel.report,
                 "schema": [f"{f.name}: {f.type}" for f in schema_of(cfg.format)]}
        m = runner.finish(table.num_rows, files, [], reasons, by_source, stats, rows_kept=sel.table.num_rows, folder=tmp)
        old_dir = final.parent / f".{final.name}.old-{os.getpid()}"
        if final.exists():
            os.replace(final, old_dir)
        os.replace(tmp, final)
        shutil.rmtree(old_dir, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return m


def _mean(col) -> float | None:
    import pyarrow.compute as pc

    v = pc.mean(col).as_py()
    return None if v is None else round(v, 4)


def read_export(out: Path) -> pa.Table:
    """All rows of an export folder, in stage order then file order, for any of the three formats."""
    m = Manifest.load(out)
    if m.stage != "export":
        raise ManifestError(f"{out}: a {m.stage} output, not an export")
    if m.stats["format"] in TRAINER_FORMATS:
        raise ManifestError(f"{out}: a {m.stats['format']} export is shaped for that trainer's loader; read it with "
                            "datasets.load_dataset (see its README.md)")
    tables = []
    for part in m.stats["parts"]:
        data = Path(out) / part["folder"] / "data"
        if m.stats["format"] == "parquet":
            tables += [pq.read_table(p) for p in shard_paths(data)]
        elif m.stats["format"] == "jsonl":
            for p in sorted(data.glob("*.jsonl")):
                rows = [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line]
                tables.append(pa.Table.from_pylist(rows, schema=EXPORT_SCHEMA))
        else:
            import datasets

            tables.append(datasets.load_from_disk(str(data)).data.table.cast(EXPORT_SCHEMA))
    return pa.concat_tables(tables) if tables else EXPORT_SCHEMA.empty_table()
