#!/usr/bin/env bash
# The trainer's GPU check on a lent GPU machine (benchmarks/gpu_check.py says what it prints). Prepared here, once:
#     python -m benchmarks.gpu_check --prepare .gpu
# then run there from the repository root, with .gpu carried:
#     bash benchmarks/gpu_check.sh [gpu_check.py options]
# The grader's wheels go to a folder of their own on PYTHONPATH (the machine's torch stays as it is); no network.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d .gpu/tokenizer ] || { echo "no .gpu/tokenizer: run 'python -m benchmarks.gpu_check --prepare .gpu' first, and carry .gpu" >&2; exit 2; }
if ! python3 -c "import math_verify" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/gradus-site .gpu/whl/*.whl
  export PYTHONPATH="/tmp/gradus-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
out="${OUT:-/tmp}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
python3 -c "import vllm" 2>/dev/null || echo "vLLM: not installed on this machine: its CUDA path is NOT checked by this run (rollouts on transformers generate)"
python3 -m benchmarks.gpu_check --tokenizer .gpu/tokenizer --json "$out/gpu_check.json" "$@" 2>&1 | tee "$out/gpu_check.log"
