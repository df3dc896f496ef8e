"""How fast buffered writes of each size put new data into the page cache (why dedup's scratch files are written
64 KB at a time, ``curate.clean.dedup_disk.files.write``).

    python dev/write_sizes.py [--folder /tmp] [--mb 26] [--rounds 6]

Writes ``--mb`` MB files into ``--folder``, keeping every file until the end (a dedup run keeps its scratch files
too), the sizes interleaved round by round, and prints MB/s per write size with the median. On this project's
2-core machines (Linux 6.18, ext4) writes of 128 KB and more ran at about 370 MB/s and writes of 64 KB at about
3.3 GB/s; elsewhere the sizes may not differ at all.

    python dev/write_sizes.py --volume-gb 12 [--folder /tmp]

writes ``--volume-gb`` GB instead, a GB a file, in 64 KB writes (dedup's ``files.write``), keeping every file until the
end, and prints each GB's seconds and the system CPU seconds it took: what a run's scratch volume costs as it grows.
On these machines (a KVM guest) the first 2-3 GB went in at about 3 GB/s and every further GB took 2.6-3.6 s, all of
it in the kernel's copy into new page-cache pages (memory the guest had not touched lately), about as long as the
Parquet floor of a million rows; dedup at 10M rows without copies writes 12 GB of scratch (1.2 KB a row).
"""

from __future__ import annotations

import argparse
import os
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
    ap.add_argument("--volume-gb", type=int, default=0, help="write this many GB in 64 KB writes, GB by GB")
    a = ap.parse_args()
    if a.volume_gb:
        volume(a.folder, a.volume_gb)
        return
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


def volume(where: Path, gb: int) -> None:
    """``gb`` files of 1 GB, written by dedup's own ``write`` (64 KB a write), all kept until the end: each GB's
    wall and system CPU seconds."""
    from curate.clean.dedup_disk.files import write

    data = np.random.default_rng(0).integers(0, 2**63, size=(64 << 20) // 8, dtype=np.uint64)
    folder = Path(tempfile.mkdtemp(prefix="gradus-volume-", dir=where))
    try:
        for i in range(gb):
            t0, c0 = time.perf_counter(), os.times()
            with open(folder / f"{i}.bin", "wb") as f:
                for _ in range(16):  # 16 x 64 MB
                    write(f, data)
            secs, c1 = time.perf_counter() - t0, os.times()
            print(f"GB {i + 1:3d}: {secs:5.2f} s ({1024 / secs:5.0f} MB/s), system CPU {c1.system - c0.system:5.2f} s",
                  flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
