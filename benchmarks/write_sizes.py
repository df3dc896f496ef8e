"""How fast buffered writes of each size put new data into the page cache (why dedup's scratch files are written
64 KB at a time, ``curate.clean.dedup_disk._write``).

    python benchmarks/write_sizes.py [--folder /tmp] [--mb 26] [--rounds 6]

Writes ``--mb`` MB files into ``--folder``, keeping every file until the end (a dedup run keeps its scratch files
too), the sizes interleaved round by round, and prints MB/s per write size with the median. On this project's
2-core machines (Linux 6.18, ext4) writes of 128 KB and more ran at about 370 MB/s and writes of 64 KB at about
3.3 GB/s; elsewhere the sizes may not differ at all.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from statistics import median

import numpy as np

SIZES = (1 << 14, 1 << 16, 1 << 17, 1 << 20, 0)  # 0: one ``ndarray.tofile`` of the whole array


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--mb", type=int, default=26)
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    data = np.random.default_rng(0).integers(0, 2**63, size=a.mb * (1 << 20) // 8, dtype=np.uint64)
    view = memoryview(data).cast("B")
    folder = Path(tempfile.mkdtemp(prefix="gradus-writes-", dir=a.folder))
    speeds: dict[int, list[float]] = {s: [] for s in SIZES}
    try:
        for r in range(a.rounds):
            for size in SIZES:
                path = folder / f"{r}_{size}.bin"
                t0 = time.perf_counter()
                if size == 0:
                    data.tofile(path)
                else:
                    with open(path, "wb") as f:
                        for at in range(0, len(view), size):
                            f.write(view[at : at + size])
                speeds[size].append(data.nbytes / (time.perf_counter() - t0) / 1e6)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for size, xs in speeds.items():
        name = "one tofile" if size == 0 else f"{size // 1024} KB writes"
        print(f"{name:>14}: median {median(xs):6.0f} MB/s  ({', '.join(f'{x:.0f}' for x in xs)})")


if __name__ == "__main__":
    main()
