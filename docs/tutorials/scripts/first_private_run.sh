#!/usr/bin/env bash
# Tutorial: your first private run and how to read its ε (docs/tutorials/first_private_run.md).
# From the repository root, with .venv active: bash docs/tutorials/scripts/first_private_run.sh
# Writes under runs/tutorials/first_private_run/ (emptied first: a run never writes into a
# folder that holds an earlier run's files). About a minute and a half on 2 CPU cores.
set -euo pipefail
out=runs/tutorials/first_private_run
rm -rf "$out"
quiet=(--trainer.enable_progress_bar false)

echo "## 1. The quickstart: client-level DP-FedAvg, 40 rounds"
fl-lightning fit --config configs/experiment/quickstart.yaml "${quiet[@]}" \
    --trainer.default_root_dir "$out/pld"
run="$out/pld/fl/version_0"

echo "## 2. What the ε is about (privacy_statement.md)"
sed -n '/^## What the ε is about/,/^- δ/p' "$run/privacy_statement.md"

echo "## 3. The events behind it (privacy_ledger.json), recomputed by dp-accounting alone"
python - "$run/privacy_ledger.json" <<'PY'
import json
import sys

from fl_lightning.privacy.accounting.recompute import headline_epsilon

ledger = json.load(open(sys.argv[1]))
sigma, q, steps, _ = ledger["client_level"][0]
print(f"{len(ledger['client_level'])} client-level events: Gaussian σ = {sigma}, Poisson q = {q}")
for accountant in ("pld", "rdp"):
    eps = headline_epsilon(ledger, delta=ledger["delta"], accountant=accountant)
    print(f"ε at δ = {ledger['delta']:g} by {accountant}: {eps:.3f}")
PY

echo "## 4. The same run with fixed-size cohorts of 20 (sampling without replacement)"
fl-lightning fit --config configs/experiment/quickstart.yaml "${quiet[@]}" \
    --trainer.default_root_dir "$out/fixed" --model.sampling fixed

echo "## 5. Half the noise: a stronger model, a much larger ε"
fl-lightning fit --config configs/experiment/quickstart.yaml "${quiet[@]}" \
    --trainer.default_root_dir "$out/sigma_0.75" --strategy.init_args.noise_multiplier 0.75
