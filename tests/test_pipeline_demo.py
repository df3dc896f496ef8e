"""The bundled sample through every stage: each hand-written item ends with its expected outcome."""

from __future__ import annotations

import json

from curate.core.manifest import Manifest
from curate.core.shards import read_table
from curate.demo import demo_config
from curate.pipeline import CurateConfig, curate_all
from curate.sources.synthetic import HANDWRITTEN
from flows.cli import main


def test_demo_every_handwritten_item_gets_its_reason(tmp_path):
    cfg = {"sources": [{"spec": "synthetic:n=300,seed=1", "name": "synthetic"}],
           "decontam": {"benchmarks": [b for b in demo_config()["decontam"]["benchmarks"] if b.startswith("demo=")]}}
    s = curate_all(CurateConfig.from_dict(cfg), tmp_path)
    got = {}
    for stage in ("1_ingest/00_synthetic", "2_filter", "3_decontam", "4_dedup"):
        rej = tmp_path / stage / "rejected"
        if rej.exists() and any(rej.iterdir()):
            for r in read_table(rej).to_pylist():
                got[r["source_id"]] = r["reject_reason"]
    for hid, _, _, _, expect in HANDWRITTEN:
        reason = got.get(hid, "keep")
        assert reason.startswith(expect), (hid, expect, reason)
    # conservation through the chain: what one stage keeps is what the next reads
    ms = [Manifest.load(tmp_path / d) for d in ("1_ingest/00_synthetic", "2_filter", "3_decontam", "4_dedup")]
    for a, b in zip(ms, ms[1:], strict=False):
        assert a.rows_kept == b.rows_in
    assert ms[0].rows_in == 300 + len(HANDWRITTEN) == s["rows_in"]
    assert s["rows_final"] == ms[-1].rows_kept
    # the near duplicate points at the kept twin
    near = [r for r in read_table(tmp_path / "4_dedup" / "rejected").to_pylist() if r["source_id"] == "hw-near-2"][0]
    kept = {r["id"]: r["source_id"] for r in read_table(tmp_path / "4_dedup" / "kept").to_pylist()}
    assert kept[near["dedup_cluster"]] == "hw-near-1"


def test_curate_rerun_is_skipped_and_config_errors(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"sources": ["synthetic:n=50,seed=3,extras=0"], "decontam": {"benchmarks": []}}))
    assert main(["curate", str(cfg), "--out", str(tmp_path / "o")]) == 0
    s = json.loads((tmp_path / "o" / "curate_summary.json").read_text())
    assert s["rows_in"] == 50 and not s["skipped"]
    assert main(["curate", str(cfg), "--out", str(tmp_path / "o")]) == 0
    assert json.loads((tmp_path / "o" / "curate_summary.json").read_text())["skipped"]
    cfg.write_text(json.dumps({"sources": ["synthetic"], "filterz": {}}))
    assert main(["curate", str(cfg), "--out", str(tmp_path / "o2")]) == 2
