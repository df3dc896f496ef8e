#!/usr/bin/env bash
# The screening A/B of docs/benchmarks.md ("Screened groups"), resumable: run it again after a stop. Each finished run
# is copied to benchmarks/results/learn_ab2/BUDGET/FAMILY/ARM_SEED as it lands (commit those) and is not run again,
# on this machine or a new one; an unfinished one resumes from its last checkpoint in $AB_DATA. Seeds go round both
# families so that a stop leaves both with data.
#   bash dev/ab_screen.sh            # all phases: 384 completions (uniform, signal 5 seeds; signal_screen 3), then 1024
# The code under test stays fixed while the tree changes: git worktree add /work/ab/tree COMMIT, then in it
#   PYTHONPATH=$PWD PYTHON=/path/to/.venv/bin/python AB_KEEP=/path/to/checkout/benchmarks/results/learn_ab2 \
#   bash dev/ab_screen.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${AB_DATA:-/work/ab}
KEEP=${AB_KEEP:-benchmarks/results/learn_ab2}  # run from a worktree of a fixed commit: AB_KEEP=/path/to/checkout/...
PY=${PYTHON:-.venv/bin/python}
run() {  # BUDGET FAMILY SEED ARMS EVALS
  local d="$DATA/$2-$1"
  if [ ! -e "$d/sets.json" ] && [ -e "$DATA/$2-384/sets.json" ]; then  # one prepared pool for every budget
    mkdir -p "$d" && cp -r "$DATA/$2-384/"{sets.json,src,held_in,train_in,scored,kimi} "$d/"
  fi
  "$PY" -P benchmarks/learn.py --family "$2" --data "$d" --budget "$1" --seeds "$3" --arms "$4" --evals "$5" \
    --keep "$KEEP/$1" --jobs 1 > /dev/null
}
for seed in 0 1 2; do for fam in rg ladder; do run 384 $fam $seed uniform,signal,signal_screen 2; done; done
for seed in 3 4; do for fam in rg ladder; do run 384 $fam $seed uniform,signal 2; done; done
for seed in 0 1 2; do for fam in rg ladder; do run 1024 $fam $seed uniform,signal 4; done; done
