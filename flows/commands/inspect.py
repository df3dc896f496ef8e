"""Reading what gradus wrote: ``gradus show`` (a stage output or a run folder), ``gradus card`` (data cards) and
``gradus list`` (the names flags and configs accept)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flows.commands.scoring import _print_estimate, _print_export
from flows.commands.stages import _print_manifest


def cmd_show(a: argparse.Namespace) -> None:
    from curate.core.manifest import MANIFEST, Manifest, stage_outputs

    d = Path(a.dir)
    if not d.is_dir():
        raise FileNotFoundError(f"{d}: no such folder")
    if not (d / MANIFEST).exists():
        if (d / "metrics.jsonl").exists() and (d / "config.json").exists():  # a training run
            from rl_stage.online import summary_lines

            print("\n".join(summary_lines(d)))
            return
        _show_run(d, stage_outputs(d))
        return
    m = Manifest.load(d)
    if a.samples:
        _show_samples(d, m, a.samples, a.n)
        return
    print(f"{d}: {m.stage} ({m.kind.description})")
    print(f"  created {m.created} by gradus {m.code_version} in {m.seconds}s; config {m.config_hash}, inputs {m.input_hash}")
    if m.stage == "estimate":
        _print_estimate(m, d)
    elif m.stage == "export":
        _print_export(m, d)
    else:
        _print_manifest(m, d)
    for key in ("adapter", "read_path", "repaired_latex_escapes", "benchmark_items", "contaminated_by_benchmark", "dedup"):
        if key in m.stats:
            print(f"  {key.replace('_', ' ')}: {m.stats[key]}")
    if m.stats.get("signals"):
        print(f"  signals fired: {m.stats['signals']}")
    for src, counts in m.by_source.items():
        print(f"  source {src}: {counts}")
    if m.rejected_by_reason and m.stage not in ("export",):
        print(f"  examples of a reason: gradus show {d} --samples {next(iter(m.rejected_by_reason))}")



def _show_run(d: Path, stages: list) -> None:
    """A run folder: every stage in pipeline order, with the rows flowing from one to the next."""
    print(f"{d}: a run of {len(stages)} stage outputs")
    print(f"  {'stage':<9} {'in':>9} {'kept':>9} {'rejected':>9}  folder")
    kept_by_path = {str(p.resolve()): m.rows_kept for p, m in stages}
    for p, m in stages:
        flow = ""
        ups = [kept_by_path.get(str(Path(e["path"]).resolve())) for e in m.inputs if "path" in e]
        known = [u for u in ups if u is not None]
        if ups and len(known) == len(ups) and m.stage != "estimate":
            flow = "" if sum(known) == m.rows_in else f"  (inputs kept {sum(known)}: MISMATCH)"
        print(f"  {m.stage:<9} {m.rows_in:>9} {m.rows_kept:>9} {m.rows_rejected:>9}  {p.relative_to(d)}{flow}")
        top = ", ".join(f"{r} {n}" for r, n in list(m.rejected_by_reason.items())[:4])
        if top:
            print(f"  {'':<9} rejected: {top}{' ...' if len(m.rejected_by_reason) > 4 else ''}")
    print(f"  details: gradus show {d}/<folder>")



def _show_samples(d: Path, m, reason: str, n: int) -> None:
    """A few rejected rows of one reason: the problem's start, the gold and why."""
    import pyarrow.compute as pc

    from curate.core.shards import iter_batches

    if reason not in m.rejected_by_reason:
        raise ValueError(f"no rows rejected as {reason!r} here; reasons: {', '.join(m.rejected_by_reason) or 'none'}")
    shown = 0
    for t in iter_batches(d / "rejected", columns=["id", "source", "problem", "answer", "reject_reason", "reject_detail"]):
        t = t.filter(pc.equal(t["reject_reason"], reason))
        for row in t.to_pylist():
            text = " ".join(str(row["problem"]).split())
            print(f"[{row['source']} {row['id']}] {text[:300]}{' ...' if len(text) > 300 else ''}")
            print(f"    gold: {row['answer']!r}  detail: {row['reject_detail']}")
            shown += 1
            if shown >= n:
                return



def cmd_card(a: argparse.Namespace) -> None:
    from data_cards.render import load_card, write_card
    from data_cards.view import diff_cards, diff_text, show_text

    if a.action == "build":
        for d in a.dirs:
            print(f"card: {write_card(Path(d), Path(a.out) if a.out else None)}")
    elif a.action == "show":
        for d in a.dirs:
            print(show_text(load_card(Path(d))))
    else:
        if len(a.dirs) != 2:
            raise ValueError("card diff takes two folders: OLD NEW")
        d = diff_cards(Path(a.dirs[0]), Path(a.dirs[1]))
        print(json.dumps(d, indent=2) if a.json else diff_text(d))



LISTS = ("adapters", "benchmarks", "filters", "presets", "templates", "stages")



def cmd_list(a: argparse.Namespace) -> None:
    """The names a flag or config field accepts, with a line on each."""
    if a.what == "adapters":
        from curate.sources.adapters import ADAPTERS

        for name, ad in ADAPTERS.items():
            print(f"{name:<12} recognised by columns: {', '.join(sorted(ad.detect))}")
    elif a.what == "benchmarks":
        from curate.clean.decontam import KNOWN_BENCHMARKS, resolve_benchmark

        for name in KNOWN_BENCHMARKS:
            where = resolve_benchmark(name)[1]
            print(f"{name:<8} {where}{'' if Path(where).is_file() else '  (hub id: needs network or the HF cache)'}")
        print("any other: NAME=PATH to a jsonl/json/csv/parquet file with a problem column")
    elif a.what == "filters":
        from curate.clean.filters import STEPS, FilterConfig

        flag_only = FilterConfig().flag_only
        for step in STEPS:
            note = "  [flag only by default: sets its signal, rejects nothing]" if step.name in flag_only else ""
            print(f"{step.name:<26} {step.doc}{note}")
        print(f"{'answer_unparseable':<26} the gold gate: math-verify cannot parse the gold answer")
    elif a.what == "presets":
        from rl_stage.algorithms import PRESETS

        for name, pr in PRESETS.items():
            print(f"{name:<8} {pr.cite}")
    elif a.what == "templates":
        from curate.difficulty.templates import TEMPLATES

        print("\n".join(TEMPLATES))
    else:
        from curate.core.manifest import STAGE_KINDS

        for k in sorted(STAGE_KINDS.values(), key=lambda k: k.order):
            print(f"{k.name:<9} {k.description}")

