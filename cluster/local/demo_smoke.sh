#!/usr/bin/env bash
# The foundation demo: prepare the bundled models, start the local head, run the smoke job through
# `ray job submit` (Ray Data converts a shared dataset into training examples under runs/smoke/), stop the head.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH" RAY_AUTH_MODE=token RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1
RUN_DIR="${RUN_DIR:-$PWD/runs/smoke}"
embedforge models prepare
cluster/local/up.sh
trap cluster/local/down.sh EXIT
ray job submit --address "http://127.0.0.1:${EMBEDFORGE_DASHBOARD_PORT:-8265}" --working-dir . -- \
  python jobs/smoke.py --run-dir "$RUN_DIR"
echo "smoke output: $RUN_DIR/smoke (manifest: $RUN_DIR/smoke/manifest.json)"
