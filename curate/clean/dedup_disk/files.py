"""The scratch files of the disk engine: written whole under a temporary name (``curate.core.shards.atomic_path``) in
writes of 64 KB, sorted entry files with the starts of their key ranges, and splitmix64's finalizer that spreads keys
over those ranges."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from curate.core.shards import atomic_path

RANGE_BITS = 12


RANGES = 1 << RANGE_BITS  # the key ranges a sorted file's cuts are written for (top 12 bits); a run reads groups of them


def save(path: Path, arr: np.ndarray) -> None:
    with atomic_path(path, sync=False) as tmp, open(tmp, "wb") as f:
        np.save(f, arr)


WRITE_CHUNK = 1 << 16  # bytes per write(2) of the scratch files (``write``)


def write(f, data) -> None:
    """``data`` (an array, C order, or any buffer) into the open binary file ``f`` in writes of ``WRITE_CHUNK``
    bytes: the bytes ``ndarray.tofile`` writes. On Linux 6.18's ext4 (this project's 2-core machines) a buffered
    write of 128 KB or more into new pages of the page cache runs at about 370 MB/s and one of 64 KB at about
    3.3 GB/s (``dev/write_sizes.py``); the scratch files are about 1 KB per row with a signature, so a large
    write would spend more time in the kernel than the signatures cost to compute."""
    if isinstance(data, np.ndarray):
        view = np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
    else:
        view = memoryview(data).cast("B")
    for at in range(0, len(view), WRITE_CHUNK):
        f.write(view[at : at + WRITE_CHUNK])


def save_sorted(work: Path, name: str, arr: np.ndarray, keys: np.ndarray) -> None:
    """A sorted entry file as raw bytes (``name.bin``, read back by ranges with plain reads: no mapping, whose pages
    would count against the reader's memory) and, per row of ``keys``, where each of the ``RANGES`` key ranges
    starts (``name.cuts.npy``)."""
    cuts = np.stack([key_ranges(np.ascontiguousarray(k), RANGES) for k in keys])
    save(work / f"{name}.cuts.npy", cuts)
    with atomic_path(work / f"{name}.bin", sync=False) as tmp, open(tmp, "wb") as f:
        write(f, arr)


def key_ranges(keys: np.ndarray, parts: int) -> np.ndarray:
    """Start of each key range in sorted ``keys`` (uint64, split on their top bits), and the end."""
    if parts == 1:
        return np.array([0, len(keys)], np.int64)
    shift = np.uint64(64 - int(parts).bit_length() + 1)
    starts = np.searchsorted(keys, np.arange(parts, dtype=np.uint64) << shift, "left")
    return np.r_[starts, len(keys)].astype(np.int64)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a bijection of uint64 that spreads its input over the whole range."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def concat_rows(xs: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(xs).astype(np.int64) if xs else np.zeros(0, np.int64)
