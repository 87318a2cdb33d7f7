#!/usr/bin/env bash
# Sets everything up, then runs lint and the whole test suite (offline, CPU, W&B offline).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export WANDB_MODE=offline
.venv/bin/ruff check fl_lightning tests benchmarks
# Two workers: the suite is dominated by short CLI runs that parallelise well on 2 cores.
.venv/bin/python -m pytest -n "${FL_TEST_WORKERS:-2}" "$@"
