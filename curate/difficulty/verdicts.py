"""Gold-answer parse verdicts kept across runs (``GoldVerdicts``): the filter stage's gold gate asks the grading pool
(``curate.difficulty.grading``) only about golds it has not seen under the same grader."""

from __future__ import annotations

import time
from pathlib import Path

from curate.difficulty.grading import GRADER_VERSION, ParseResult


class GoldVerdicts:
    """Parse verdicts of gold strings kept across runs: ``ROOT/{key}/seg_*.parquet`` (``gold``, ``ok``, ``reason``),
    ``key`` a hash of ``GRADER_VERSION`` and the parse timeout. Whether math-verify parses a gold string within the
    timeout is a pure function of the string, the grader's versions and the timeout (up to machine speed near the
    timeout), so a verdict found once is good for every later run under the same grader; a new math-verify, sympy
    or rule version is a new folder. Only "ok" and "unparseable" are kept (a timeout, a crash or an error is
    decided again next time). Segments are written whole (temporary name, then rename)."""

    def __init__(self, root: Path | str, timeout_s: int):
        import hashlib

        # the timeout too: a gold parsed in 4 s is parseable at a 5 s timeout and a timeout at 1 s
        self.grader = f"{GRADER_VERSION};gold_timeout_s={timeout_s}"
        self.dir = Path(root) / hashlib.sha256(self.grader.encode()).hexdigest()[:16]

    def load(self) -> dict[str, ParseResult]:
        import pyarrow.parquet as pq

        out: dict[str, ParseResult] = {}
        for p in sorted(self.dir.glob("seg_*.parquet")):
            t = pq.read_table(p)
            for g, ok, reason in zip(t["gold"].to_pylist(), t["ok"].to_pylist(), t["reason"].to_pylist(), strict=True):
                out[g] = ParseResult(ok, reason)
        return out

    def append(self, verdicts: dict[str, ParseResult]) -> None:
        import uuid

        import pyarrow as pa
        import pyarrow.parquet as pq

        keep = {g: r for g, r in verdicts.items() if r.reason in ("ok", "unparseable")}  # definite verdicts only
        if not keep:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        from curate.core.shards import atomic_path, write_text_atomic

        write_text_atomic(self.dir / "grader.txt", self.grader + "\n")
        t = pa.table({"gold": pa.array(list(keep), pa.string()), "ok": pa.array([r.ok for r in keep.values()]),
                      "reason": pa.array([r.reason for r in keep.values()], pa.string())})
        with atomic_path(self.dir / f"seg_{time.time_ns()}_{uuid.uuid4().hex[:8]}.parquet") as tmp:
            pq.write_table(t, tmp, compression="zstd")
