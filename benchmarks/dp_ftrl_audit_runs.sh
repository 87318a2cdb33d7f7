#!/usr/bin/env bash
# The runs behind docs/audit.md's "accountant ε vs one-run estimate vs lower bound" table:
# `fl-lightning audit --attack canaries` (200 canary clients, 95% confidence) on the quickstart
# (DP-FedAvg, Poisson cohorts) and on its DP-FTRL variant (banded square root, cyclic cohorts),
# then the offline-MNIST DP-FTRL config at ε = 8 and DP-FedAvg (Poisson cohorts) on the same
# setting at ε ∈ {1, 4, 16}. Each run's audit.json is copied to
# OUT_DIR/<name>.audit.json.   Usage: bash benchmarks/dp_ftrl_audit_runs.sh OUT_DIR
set -euo pipefail
out_dir=${1:?OUT_DIR}
mkdir -p "$out_dir"
export WANDB_MODE=${WANDB_MODE:-disabled}
run() {
  name=$1; shift
  [ -f "$out_dir/$name.audit.json" ] && { echo "skip $name (stored)"; return; }
  tmp=$(mktemp -d)
  echo "load before $name: $(cut -d' ' -f1-3 /proc/loadavg)"
  python -m fl_lightning.cli audit --attack canaries --num-canaries 200 --out "$tmp" "$@" \
    --trainer.default_root_dir "$tmp" --trainer.enable_progress_bar false > "$tmp/log" 2>&1 \
    || { tail -20 "$tmp/log"; exit 1; }
  cp "$tmp/audit.json" "$out_dir/$name.audit.json"
  echo "load after $name: $(cut -d' ' -f1-3 /proc/loadavg)"
  grep "^audit:" "$tmp/log"
}
run quickstart --config configs/experiment/quickstart.yaml
run quickstart_ftrl --config configs/experiment/quickstart_ftrl.yaml
run mnist_ftrl_bsr_eps8 --config configs/experiment/dp_ftrl/mnist_offline.yaml
for eps in 1 4 16; do
  run "mnist_dp_fedavg_eps$eps" --config configs/experiment/dp_ftrl/mnist_offline.yaml \
    --strategy fl_lightning.strategies.dp_fedavg.DPFedAvg --strategy.init_args.clip_norm 1.0 \
    --strategy.init_args.noise_multiplier null --model.sampling poisson \
    --privacy.target_epsilon "$eps"
done
