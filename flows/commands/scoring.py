"""Scoring and selection: ``gradus estimate`` (difficulty from a real engine) and ``gradus export`` (balanced and
curriculum prompt sets), and the summaries both print."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path


def cmd_estimate(a: argparse.Namespace) -> None:
    from curate.core.config import from_args
    from curate.difficulty.estimate import EstimateConfig, estimate

    cfg = from_args(EstimateConfig, a, **({"store": None} if a.no_store else {}))
    _warn_uncurated(a.inputs)
    if cfg.backend != "openai":  # a wrong engine argument or a GPU asked for and not there: before any work
        from curate.difficulty.devices import check_engine_args, engine_device

        if cfg.engine_args:
            check_engine_args(cfg.engine_args)
        engine_device(cfg.device, "gradus estimate", cfg.engine_args)
    if a.dry_run:
        print(json.dumps(cfg.as_dict(), indent=2))
        return
    m = estimate([Path(d) for d in a.inputs], Path(a.out), cfg, force=a.force, progress=not a.no_progress)
    _print_estimate(m, Path(a.out))



def _warn_uncurated(inputs: list[str]) -> None:
    from curate.core.manifest import Manifest

    for d in map(Path, inputs):
        if d.name == "rejected" or d.parent.name == "rejected":
            print(f"warning: {d} holds REJECTED rows", file=sys.stderr)
            continue
        m = Manifest.find(d) if d.is_dir() else None
        if m is not None and m.stage in ("ingest", "filter"):
            print(f"warning: {d} is a {m.stage} output: not yet decontaminated and deduplicated", file=sys.stderr)



def _print_estimate(m, out: Path) -> None:
    st = m.stats
    state = "already complete (skipped)" if m.skipped else f"done in {m.seconds}s"
    print(f"estimate: {state}: {m.rows_in} in, {m.rows_kept} scored, {m.rows_rejected} rejected")
    for reason, n in m.rejected_by_reason.items():
        print(f"  rejected {reason}: {n}")
    print(f"  model {st['model']} ({st['model_revision']}), k={st['k']}, store: {st.get('store')}")
    hist = dict(sorted(st["pass_count_histogram"].items(), key=lambda kv: int(kv[0])))  # JSON sorts the keys as text
    print(f"  pass-count histogram (n_correct: problems): {hist}")
    print(f"  sample outcomes: {st['sample_outcomes']}  truncation rate: {st['truncation_rate']}")
    run = st["this_run"]
    if m.skipped:
        print(f"  this run: unchanged, skipped (the figures above are those of the run that made it, {m.created})")
    elif run.get("tokens_per_s"):
        print(f"  this run: {run['samples']} samples, {run['tokens']} tokens, {run['tokens_per_s']} tokens/s, "
              f"{run['store_hits']} from the store, {run['chunks_already_done']} chunks already done")
    print(f"  scored shards: {out / 'kept'}  stats: {out / 'manifest.json'}")



def cmd_export(a: argparse.Namespace) -> None:
    from curate.core.config import from_args
    from curate.select.export import ExportConfig, export

    cfg = from_args(ExportConfig, a)
    if a.dry_run:
        print(json.dumps(dataclasses.asdict(cfg), indent=2))
        return
    m = export([Path(d) for d in a.inputs], Path(a.out), cfg, force=a.force)
    if cfg.card and (not m.skipped or not (Path(a.out) / "README.md").is_file()):
        from data_cards.render import write_card

        write_card(Path(a.out))  # the card to publish with the data: the whole story, upstream stages included
    _print_export(m, Path(a.out))



def _print_export(m, out: Path) -> None:
    r = m.stats["selection"]
    state = "already complete (skipped)" if m.skipped else "done"
    print(f"export {state}: {m.rows_kept} rows as {m.stats['format']} ({r['target']}), from {r['rows_in']} scored rows")
    print("  bucket      available  asked  taken  short")
    for b, v in r["by_bucket"].items():
        print(f"  {b:<11} {v['available']:>9}  {v['asked']:>5}  {v['taken']:>5}  {v['short']:>5}")
    if r["excluded"]:
        print(f"  left out: {r['excluded']}" + (f"; eligible but not selected: {r['not_selected']}" if r["not_selected"] else ""))
    if r["unfilled"]:
        print(f"  asked for {r['rows_asked']} rows, {r['unfilled']} could not be filled (too few eligible rows)")
    print(f"  achieved distribution: {r['achieved_distribution']}")
    for p in m.stats["parts"]:
        if p["folder"] != ".":
            print(f"  stage {p['stage']} ({p['bucket']}): {p['rows']} rows, "
                  f"mean pass rate {p['pass_rate_mean']} -> {out / p['folder']}")
    print(f"  export: {out}  report: {out / 'selection_report.json'}")

