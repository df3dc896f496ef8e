#!/usr/bin/env bash
# A run's page in the Prefect UI, as a user sees it: a real `prefect server start`, one `gradus flow run` of a small
# config, and headless Chromium (Debian's package) taking a screenshot of the run page into docs/.
#   bash dev/ui_screenshot.sh [PORT]      # writes docs/prefect_run.png
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${1:-4317}
WORK=$(mktemp -d)
export PREFECT_HOME=$WORK/prefect PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_UI_API_URL=http://127.0.0.1:$PORT/api
.venv/bin/prefect server start --host 127.0.0.1 --port "$PORT" > "$WORK/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 60); do curl -sf "http://127.0.0.1:$PORT/api/health" > /dev/null && break; sleep 2; done
printf 'sources = [{spec = "synthetic:n=2000,seed=0,mix=ladder", name = "synthetic"}]\n[decontam]\nbenchmarks = []\n' \
  > "$WORK/flow.toml"
PREFECT_API_URL=http://127.0.0.1:$PORT/api .venv/bin/gradus flow run "$WORK/flow.toml" --out "$WORK/out" --no-progress
RUN=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['flow_run_id'])" "$WORK/out/latest/summary.json")
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$WORK/chrome" --window-size=1500,1100 \
  --virtual-time-budget=20000 --screenshot=docs/prefect_run.png "http://127.0.0.1:$PORT/runs/flow-run/$RUN"
echo "docs/prefect_run.png: flow run $RUN"
