"""``gradus``: the one console script. Subcommands import their heavy packages inside, so --help is fast.

    gradus ingest SOURCE --out DIR [--format F] [--adapter A] [--map problem=COL,answer=COL] [--name N]
    gradus filter DIR [DIR ...] --out DIR
    gradus decontam DIR --against aime24 --against mine=evals.jsonl --out DIR [--ngram 8]
    gradus dedup DIR [DIR ...] --out DIR [--no-near]
    gradus curate CONFIG --out DIR          (all of the above, in order, from a JSON/TOML config)
    gradus estimate DIR --out DIR [--backend vllm|hf|openai] [--model M] [--k 10] [--temperature 1.0] ...
    gradus export DIR --out DIR [--format parquet|jsonl|hf] [--total N] [--target uniform] [--curriculum]
    gradus train CONFIG [--resume]          (GRPO-family training on exported Parquet prompt sets)
    gradus model convert|path               (the bundled SmolLM2, converted once to safetensors)
    gradus demo [--out DIR]                 (the bundled sample through every stage, as a Prefect flow)
    gradus show DIR                         (a stage output's counts and reasons)
    gradus flow run|serve|plan CONFIG --out DIR [--cron "0 3 * * *"]   (the pipeline as a Prefect flow)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from curate.core.errors import GradusError
from flows.commands.inspect import LISTS, cmd_card, cmd_list, cmd_show
from flows.commands.scoring import cmd_estimate, cmd_export
from flows.commands.stages import cmd_curate, cmd_decontam, cmd_dedup, cmd_demo, cmd_filter, cmd_flow, cmd_ingest
from flows.commands.training import cmd_model, cmd_train


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gradus")
    except PackageNotFoundError:
        return "unknown (not installed)"


COMMANDS = ("ingest", "filter", "decontam", "dedup", "curate", "estimate", "export", "train", "model", "demo", "list", "show",
            "card", "flow")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; options derived from config classes are built for ``only`` (the command given) alone, so
    ``gradus --help`` imports nothing heavy. ``only=None`` builds every command's options."""

    def add_options(parser, cls_path: str, **kw) -> None:
        name = parser.prog.split()[-1] if isinstance(parser, argparse.ArgumentParser) else kw.pop("cmd")
        if only is not None and name != only:
            return
        import importlib

        from curate.core.config import add_options as add

        mod, _, cls = cls_path.rpartition(".")
        add(parser, getattr(importlib.import_module(mod), cls), **kw)

    p = argparse.ArgumentParser(prog="gradus", description="Difficulty-scored math RL curricula: curate, estimate, "
                                "export, train.")
    p.add_argument("-v", "--verbose", action="store_true", help="engine logs and INFO messages")
    p.add_argument("--version", action="version", version=f"gradus {_version()}")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("ingest", help="read a source into record shards")
    s.add_argument("source", help="a file (jsonl/json/csv/parquet), a folder of shards, a quoted glob, a datasets "
                   "save_to_disk folder, a hub id (owner/name[:config][@split]) or synthetic[:n=..]")
    s.add_argument("--out", required=True)
    s.add_argument("--format", choices=["jsonl", "json", "csv", "parquet", "arrow", "hf", "synthetic", "reasoning_gym"])
    s.add_argument("--revision", help="hub sources: the commit, branch or tag to read (default: main's commit now)")
    s.add_argument("--adapter", help="force a source adapter (default: detected from the columns)")
    s.add_argument("--mapping", "--map", help="column mapping, e.g. problem=question,answer=final or answer=boxed(solution)")
    s.add_argument("--name", help="source name stored in the 'source' column")
    s.add_argument("--force", action="store_true", help="re-run even if a complete output exists")
    s.set_defaults(fn=cmd_ingest)

    for name, fn, config, text, aliases in (
        ("filter", cmd_filter, "curate.clean.filters.FilterConfig",
         "drop unverifiable items (MCQ, proofs, yes/no, ...) and ungradable golds", {}),
        ("decontam", cmd_decontam, "curate.clean.decontam.DecontamConfig", "drop rows that match evaluation benchmarks",
         {"benchmarks": ["--against"]}),
        ("dedup", cmd_dedup, "curate.clean.dedup.DedupConfig", "exact and near-duplicate removal", {}),
    ):
        s = sub.add_parser(name, help=text)
        s.add_argument("inputs", nargs="+")
        s.add_argument("--out", required=True)
        add_options(s, config, aliases=aliases)
        s.add_argument("--force", action="store_true")
        s.set_defaults(fn=fn)

    s = sub.add_parser("curate", help="run every stage from a JSON/TOML config")
    s.add_argument("config")
    s.add_argument("--out", required=True)
    s.add_argument("--force", action="store_true")
    s.add_argument("--dry-run", action="store_true", help="check the config, sources and benchmarks; print the plan")
    s.set_defaults(fn=cmd_curate)

    s = sub.add_parser("estimate", help="difficulty: k samples per problem from a real engine, graded by math-verify")
    s.add_argument("inputs", nargs="+", help="stage outputs (e.g. runs/demo/4_dedup) or shard folders")
    s.add_argument("--out", required=True)
    add_options(s, "curate.difficulty.estimate.EstimateConfig",
                aliases={"model_revision": ["--revision"], "grader_timeout_s": ["--grader-timeout"]})
    s.add_argument("--no-store", action="store_true", help="neither read nor write the difficulty store")
    s.add_argument("--no-progress", action="store_true")
    s.add_argument("--dry-run", action="store_true", help="check the settings and print them")
    s.add_argument("--force", action="store_true", help="start again even if the folder holds a (partial) run")
    s.set_defaults(fn=cmd_estimate)

    s = sub.add_parser("export", help="balanced / curriculum prompt sets from scored rows: parquet, jsonl or hf")
    s.add_argument("inputs", nargs="+", help="estimate outputs (scored shards)")
    s.add_argument("--out", required=True)
    add_options(s, "curate.select.export.ExportConfig")
    s.add_argument("--dry-run", action="store_true", help="check the settings and print them")
    s.add_argument("--force", action="store_true")
    s.set_defaults(fn=cmd_export)

    s = sub.add_parser("train", help="GRPO / Dr. GRPO / DAPO / RLOO on exported prompt sets (rl_stage)")
    s.add_argument("config", nargs="?", help="JSON or TOML with rl_stage.trainer.TrainConfig fields (data, preset, "
                   "steps, ...); or give them all as options (--data EXPORT --out RUN ...)")
    s.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    s.add_argument("--quiet", action="store_true")
    s.add_argument("--dry-run", action="store_true", help="check the config, resolve the preset and print it")
    s.add_argument("--nproc-per-node", type=int, default=1, metavar="N",
                   help="data parallel on N ranks of this machine (torchrun, FSDP2: one GPU each, or gloo on CPU)")
    add_options(s.add_argument_group("overrides of config fields"), "rl_stage.trainer.TrainConfig", cmd="train")
    s.set_defaults(fn=cmd_train)

    s = sub.add_parser("model", help="the bundled default model: convert it once, or print its folder")
    s.add_argument("action", choices=["convert", "path"])
    s.add_argument("--force", action="store_true")
    s.set_defaults(fn=cmd_model)

    s = sub.add_parser("flow", help="the whole pipeline as a Prefect flow from one config (run once, or serve on a schedule)")
    s.add_argument("action", choices=["run", "serve", "plan"])
    s.add_argument("config", help="TOML or JSON: sources, filters, decontam, dedup, difficulty, export, card, runner")
    s.add_argument("--out", default="runs/flow", help="stage data under OUT/stages, one record per run under OUT/runs")
    s.add_argument("--cron", default="0 3 * * *", help="serve: the schedule (cron syntax, UTC)")
    s.add_argument("--name", default="gradus-nightly", help="serve: the deployment's name")
    s.add_argument("--dry-run", action="store_true", help="check the config and print the plan")
    s.add_argument("--no-progress", action="store_true", help="run: no estimation progress bar")
    s.set_defaults(fn=cmd_flow)

    s = sub.add_parser("demo", help="the bundled sample through every stage, as the Prefect flow of flows/demo.toml")
    s.add_argument("--out", default="runs/demo")
    s.add_argument("--estimate-rows", type=int, default=None,
                   help="rows to score with the bundled model (default: the config's 60; 0: no estimation or export)")
    s.add_argument("--no-progress", action="store_true")
    s.set_defaults(fn=cmd_demo)

    s = sub.add_parser("card", help="data cards: build (README.md + card.json + plots), show in the terminal, diff two runs")
    s.add_argument("action", choices=["build", "show", "diff"])
    s.add_argument("dirs", nargs="+", help="run folders, stage outputs or exports (diff: OLD NEW)")
    s.add_argument("--out", help="build: write the card here instead of into the folder")
    s.add_argument("--json", action="store_true", help="diff: the figures as JSON")
    s.set_defaults(fn=cmd_card)

    s = sub.add_parser("list", help="names accepted by flags and configs: " + ", ".join(LISTS))
    s.add_argument("what", choices=LISTS)
    s.set_defaults(fn=cmd_list)

    s = sub.add_parser("show", help="a stage output's counts, reasons and stats; or every stage of a run folder")
    s.add_argument("dir")
    s.add_argument("--samples", metavar="REASON", help="print rejected rows of this reason")
    s.add_argument("-n", type=int, default=5, help="how many rows --samples prints")
    s.set_defaults(fn=cmd_show)
    return p


def _quiet_engines() -> None:
    """Engine chatter off unless --verbose: vLLM's INFO/WARNING lines, torch's C++ and Python warnings,
    transformers' advisories and hub progress bars. Our own warnings (logging) and progress bars stay."""
    import warnings

    for k, v in (("VLLM_LOGGING_LEVEL", "ERROR"), ("TORCH_CPP_LOG_LEVEL", "ERROR"), ("TORCH_LOGS", "-all"),
                 ("TRANSFORMERS_VERBOSITY", "error"),
                 ("HF_HUB_DISABLE_PROGRESS_BARS", "1"), ("TOKENIZERS_PARALLELISM", "false")):
        os.environ.setdefault(k, v)
    for cat in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=cat)


def _stop_threads_on_interrupt() -> None:
    """Ctrl-C reaches the main thread only: tell the worker threads too (``curate.core.stop``), then interrupt."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum, frame):
        from curate.core.stop import STOP

        STOP.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupt)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(next((x for x in argv if x in COMMANDS), "")).parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if not args.verbose:
        _quiet_engines()
    _stop_threads_on_interrupt()
    try:
        args.fn(args)
    except BrokenPipeError:  # piped into head: the reader has what it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (OSError, ValueError, GradusError) as e:  # bad input, an unusable model/engine, a file system refusal
        print(f"gradus {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: what was written is whole (shards and manifests land by rename); it resumes
        print(f"gradus {args.cmd}: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
