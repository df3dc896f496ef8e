"""The bundled sample through every stage: each hand-written item ends with its expected outcome."""

from __future__ import annotations

import json

from curate.core.manifest import Manifest
from curate.core.shards import read_table
from curate.demo import DEMO_BENCHMARK
from curate.pipeline import CurateConfig, curate_all
from curate.sources.synthetic import HANDWRITTEN
from flows.cli import main


def test_demo_every_handwritten_item_gets_its_reason(tmp_path):
    cfg = {"sources": [{"spec": "synthetic:n=300,seed=1", "name": "synthetic"}],
           "decontam": {"benchmarks": [f"demo={DEMO_BENCHMARK}"]}}
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


def test_the_ladder_builds_each_level_from_its_rungs():
    """``mix=ladder``: the level is drawn first; every problem is one of its rung's forms with the right answer."""
    import re

    import pytest

    from curate.core.errors import SourceError
    from curate.sources.synthetic import generate, parse_spec

    rows = list(generate(400, seed=3, mix="ladder"))
    assert rows == list(generate(400, seed=3, mix="ladder"))  # deterministic for a seed
    assert {r["level"] for r in rows} == {"1", "2", "3", "4", "5"}
    for r in rows:
        p, a, lv = r["problem"], r["answer"], int(r["level"])
        m = re.fullmatch(r"What is \$(\d+) ([-+]|\\times) (\d+)(?: \+ (\d+))?\$\?", p)
        if m:
            x, op, y = int(m[1]), m[2], int(m[3])
            want = x + y + int(m[4] or 0) if op == "+" else x - y if op == "-" else x * y
            assert a == str(want), p
            if lv == 1:
                assert x < 10 and (y < 10 if op == "+" else y == 10), p
            elif lv == 2:
                assert op != "+" and 2 <= y <= x <= 9, p
            continue
        m = re.fullmatch(r"Solve for \$x\$: \$x \+ (\d+) = (\d+)\$\.", p)
        if m:
            assert lv == 3 and int(m[2]) - int(m[1]) == int(a) and 1 <= int(a) <= 9, p
            continue
        m = re.fullmatch(r"Solve for \$x\$: \$2x = (\d+)\$\.", p)
        if m:
            assert lv == 4 and int(m[1]) == 2 * int(a), p
            continue
        assert lv == 5, p  # remainders of powers, gcds, sums of fractions, a*x + b = c
    with pytest.raises(SourceError, match="unknown mix 'stairs'"):
        parse_spec("synthetic:mix=stairs")
