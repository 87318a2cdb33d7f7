#!/usr/bin/env bash
# Tutorial: your own model, data and strategy (docs/tutorials/custom_strategy.md).
# From the repository root, with .venv active: bash docs/tutorials/scripts/custom_strategy.sh
# Writes under runs/tutorials/custom_strategy/ (emptied first). About half a minute.
set -euo pipefail
out=runs/tutorials/custom_strategy
rm -rf "$out"

echo "## 1. examples/custom/my_fl.py run by the CLI (a median of raw updates: no privacy)"
fl-lightning fit --import examples/custom/my_fl.py --config examples/custom/config.yaml \
    --trainer.enable_progress_bar false --trainer.default_root_dir "$out"

echo "## 2. The same strategy, and a private one, without Lightning: testing.simulate"
python docs/tutorials/scripts/simulate_strategies.py
