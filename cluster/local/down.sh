#!/usr/bin/env bash
# Stop the local Ray head started by up.sh: only its own processes, never other Ray clusters on this machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PWD/.venv/bin:$PATH"
exec embedforge cluster down
