#!/usr/bin/env bash
# Sets everything up, then runs the quickstart experiment (DP-FedAvg on offline digits).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export WANDB_MODE="${WANDB_MODE:-offline}"
exec .venv/bin/fl-lightning fit --config configs/experiment/quickstart.yaml "$@"
