"""The bundled demo's data: its eval set (what the sample is decontaminated against).

``gradus demo`` runs the whole pipeline on the bundled sample as the Prefect flow of ``flows/demo.toml``.
"""

from __future__ import annotations

from pathlib import Path

DEMO_BENCHMARK = Path(__file__).resolve().parent / "data" / "demo_benchmark.jsonl"
