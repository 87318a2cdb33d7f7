#!/usr/bin/env bash
# Sets everything up, then runs lint, the type check and the fast test suite (offline, CPU,
# W&B offline). The fast suite leaves out tests marked `slow` (full-size paper models such as
# ResNet-50) and `heavy` (contract tests of a minute or more, which .ci/run runs after this;
# see pyproject.toml). Run everything with `scripts/test.sh --all`; any other
# arguments go to pytest (e.g. `scripts/test.sh -m ddp`, `scripts/test.sh tests/configs`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export WANDB_MODE=offline
.venv/bin/ruff check fl_lightning tests benchmarks scripts
# mypy fl_lightning, failing on errors outside the shrinking allow-list in pyproject.toml.
.venv/bin/python scripts/typecheck.py
select=(-m "not slow and not heavy")
if [ "${1:-}" = "--all" ]; then
  select=()
  shift
fi
# Two workers: the suite is dominated by short CLI runs that parallelise well on 2 cores.
.venv/bin/python -m pytest -n "${FL_TEST_WORKERS:-2}" "${select[@]}" "$@"
