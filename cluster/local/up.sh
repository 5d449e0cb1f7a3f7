#!/usr/bin/env bash
# Start the local Ray head (dashboard on http://127.0.0.1:8265), sized for this machine. Idempotent.
# Submit jobs with: RAY_AUTH_MODE=token .venv/bin/ray job submit --address http://127.0.0.1:8265 --working-dir . -- python jobs/smoke.py --run-dir "$PWD/runs/smoke"
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH" RAY_AUTH_MODE=token RAY_USAGE_STATS_ENABLED=0
exec embedforge cluster up "$@"
