"""What each task of the flow runs (``flows.flow``): plain calls into the libraries, folder paths and counts in and
out, never data frames. They run in this process's threads or on Ray workers; none imports Prefect."""

from __future__ import annotations

import json
from pathlib import Path

from curate.core.shards import write_text_atomic
from curate.difficulty.estimate import EstimateConfig
from curate.select.export import ExportConfig
from rl_stage.trainer import TrainConfig


def ingest(spec: dict, out: str) -> dict:
    from curate.pipeline import ingest

    m = ingest(spec["spec"], Path(out), spec.get("format"), spec.get("adapter"), spec.get("mapping"), spec.get("name"),
               revision=spec.get("revision"))
    return {"folder": out, "rows_in": m.rows_in, "rows_kept": m.rows_kept, "skipped": m.skipped,
            **({"revision": m.inputs[0]["revision"]} if m.inputs[0].get("revision") else {})}



def stage(kind: str, inputs: list[str], out: str, cfg) -> dict:
    from curate.pipeline import STAGES

    m = next(s for s in STAGES if s.name == kind).run([Path(x) for x in inputs], Path(out), cfg)
    return {"folder": out, "rows_in": m.rows_in, "rows_kept": m.rows_kept, "skipped": m.skipped,
            "removed": m.rejected_by_reason}



def dedup_jobs(inputs: list[str], out: str, cfg) -> list:
    """Claim the dedup folder and list its per-shard jobs (none when it is complete)."""
    from curate.pipeline import dedup_shard_jobs

    return dedup_shard_jobs([Path(x) for x in inputs], Path(out), cfg) or []



def dedup_ids(job) -> int:
    """One input shard's content ids, golds and text hashes, sorted (``curate.clean.dedup_disk.shard_ids``)."""
    from curate.clean.dedup_disk import shard_ids

    return shard_ids(job)



def dedup_groups(jobs: list) -> int:
    """The exact groups, and per shard the rows no signature is needed for (``curate.clean.dedup_disk.prepare``)."""
    from curate.clean.dedup_disk import prepare

    return int(prepare(jobs, Path(jobs[0].work), jobs[0].cfg).stands_in.sum())



def dedup_shard(job) -> int:
    """One input shard's signatures, features and band files (``curate.clean.dedup_disk.shard_work``)."""
    from curate.clean.dedup_disk import shard_work

    return shard_work(job)[0]



def difficulty_summary(m, out: str, **extra) -> dict:
    """What a difficulty task hands on: counts, and this run's samples (none when the stage was already complete)."""
    this_run = {} if m.skipped else (m.stats.get("this_run") or {})
    return {"folder": out, "rows_in": m.rows_in, "rows_kept": m.rows_kept, "skipped": m.skipped,
            "samples": this_run.get("samples", 0), "rows_from_store": this_run.get("store_hits", 0), **extra}



def difficulty(inputs: list[str], out: str, cfg: EstimateConfig, progress: bool = False) -> dict:
    from curate.difficulty.estimate import estimate

    return difficulty_summary(estimate([Path(x) for x in inputs], Path(out), cfg, progress=progress), out)



def difficulty_begin(inputs: list[str], out: str, cfg: EstimateConfig) -> dict | None:
    """Claim the folder of a shared estimation; the finished stage's summary if there is nothing to do."""
    from curate.difficulty.estimate import Estimator

    m = Estimator([Path(x) for x in inputs], Path(out), cfg, progress=False).begin()
    return None if m is None else difficulty_summary(m, out)



def difficulty_share(inputs: list[str], out: str, cfg: EstimateConfig, worker: int, workers: int) -> dict:
    from curate.difficulty.estimate import Estimator

    return Estimator([Path(x) for x in inputs], Path(out), cfg, progress=False).run_share(worker, workers)



def difficulty_finish(inputs: list[str], out: str, cfg: EstimateConfig, shares: list[dict]) -> dict:
    from curate.difficulty.estimate import Estimator

    m = Estimator([Path(x) for x in inputs], Path(out), cfg, progress=False).finish_shares(shares)
    return difficulty_summary(m, out, workers=len(shares))



def export(inputs: list[str], out: str, cfg: ExportConfig, card_name: str | None = None) -> dict:
    from curate.select.export import export

    m = export([Path(x) for x in inputs], Path(out), cfg)
    if cfg.card:  # the export's own card, the one to publish with its data (named from the config's card.name)
        from data_cards.render import write_card

        write_card(Path(out), name=card_name)
    return {"folder": out, "rows_in": m.rows_in, "rows_kept": m.rows_kept, "skipped": m.skipped}



def train(export: str, root: str, cfg: TrainConfig) -> dict:
    """``gradus train`` on the run's export, in ``root/<key>``: the key hashes the export's manifest and the training
    config, so an unchanged export with the same settings finds its finished run (skipped) or resumes an
    unfinished one from its last checkpoint, and a new export trains anew. Hands on the last step's metrics and
    the held-out figures before and after."""
    from dataclasses import replace

    from rl_stage.run_folder import run_key
    from rl_stage.trainer import Trainer

    out = Path(root) / run_key(Path(export), cfg)
    done = out / "checkpoints" / f"step_{cfg.steps:06d}" / "trainer_state.pt"
    skipped = done.exists()
    if not skipped:
        Trainer(replace(cfg, data=[export], out=str(out)), resume=(out / "metrics.jsonl").exists()).run(progress=False)
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.strip()]
    trained = [m for m in lines if m.get("step", 0) > 0]
    evals = [{k: v for k, v in m.items() if k == "step" or k.startswith("eval/")} for m in lines if "eval/prompts" in m]
    keep = ("step", "reward", "accuracy", "loss", "entropy", "boxed_rate", "response_length", "skipped")
    return {"folder": str(out), "skipped": skipped, "steps": len(trained),
            "steps_skipped": sum(1 for m in trained if m.get("skipped")),
            "last": {k: trained[-1].get(k) for k in keep} if trained else None,
            "eval_before": evals[0] if evals else None, "eval_after": evals[-1] if len(evals) > 1 else None,
            "checkpoint": str(done.parent)}



def train_artifact(run: Path, inline_limit: int = 400_000) -> str:
    """A training run's page in the Prefect UI: what ``gradus show`` prints for it, and its plot inline."""
    import base64

    from rl_stage.online import summary_lines

    text = "```\n" + "\n".join(summary_lines(run)) + "\n```\n"
    plot = Path(run) / "plots" / "training.png"
    if plot.is_file() and plot.stat().st_size <= inline_limit:
        text += f"\n![training](data:image/png;base64,{base64.b64encode(plot.read_bytes()).decode()})\n"
    return text



def card(stages: Path, run: Path, previous: Path | None, missing: list[dict], failed: dict[str, str],
          ran: list[str | Path], name: str | None = None) -> dict:
    """The run's card over the stage folders this run produced (``ran``), with what could not be read or made named
    first thing after its title, and the diff against the previous run's card."""
    from data_cards.render import write_card
    from data_cards.view import diff_cards, diff_text

    readme = write_card(stages, run / "card", only=ran, name=name)
    notes = []
    if missing:  # the card of a run with a source that failed to load says so
        shown = [Path(m["source"]).name if Path(m["source"]).is_absolute() else m["source"] for m in missing]
        notes.append("> **Missing sources.** This run could not read: " + "; ".join(
            f"`{s}` ({m['error'][:300]})" for s, m in zip(shown, missing, strict=True))
            + ". The rest of the card is without them.")
    for stage, msg in failed.items():
        notes.append(f"> **No {stage}.** The {stage} stage of this run failed: {msg[:500]}. The card describes the "
                     "stages before it.")
    if notes:
        card = json.loads((run / "card" / "card.json").read_text())
        card["missing_sources"], card["failed_stages"] = missing, failed
        write_text_atomic(run / "card" / "card.json", json.dumps(card, indent=2, default=str) + "\n")
        text = readme.read_text()
        note = "\n" + "\n\n".join(notes) + "\n"
        head, sep, body = text.partition("\n## ")
        write_text_atomic(readme, head + note + sep + body if sep else text + note)
    out = {"card": str(readme)}
    if previous is not None and (previous / "card" / "card.json").is_file():
        text = diff_text(diff_cards(previous / "card", run / "card"))
        write_text_atomic(run / "card_diff.txt", text + "\n")
        out["diff"] = text
    return out

