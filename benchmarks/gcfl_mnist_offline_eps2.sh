#!/usr/bin/env bash
# Short offline-MNIST run of the six methods of the GCFL paper at epsilon = 2 (record level,
# delta = 1e-5, sigma calibrated): writes benchmarks/results/gcfl_mnist_offline_eps2.md.
# Usage (from the repository root, venv active): bash benchmarks/gcfl_mnist_offline_eps2.sh
set -euo pipefail
load_before=$(cut -d' ' -f1 /proc/loadavg)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} WANDB_MODE=${WANDB_MODE:-disabled}
config=configs/experiment/gcfl/mnist_offline_eps2.yaml
out=benchmarks/results/gcfl_mnist_offline_eps2.md
rows=()
for method in gcfl gcfl_published fedavg dp_fedprox dp_scaffold dp_fedexp isolate; do
  name="gcfl_eps2_${method}"
  python -m fl_lightning.cli fit --config "$config" --strategy "configs/strategy/${method}.yaml" \
    > "/tmp/${name}.log" 2>&1 || { echo "failed: $method (see /tmp/${name}.log)"; exit 1; }
  dir=$(ls -td runs/fl/version_* | head -1)
  rows+=("$(python - "$method" "$dir" <<'PY'
import csv, json, math, sys
method, d = sys.argv[1], sys.argv[2]
s = json.load(open(f"{d}/summary.json"))
t = json.load(open(f"{d}/throughput.json"))
proj, cos = [], []
for row in csv.DictReader(open(f"{d}/metrics.csv")):
    if row.get("strategy/projected"):
        proj.append(float(row["strategy/projected"]))
    if row.get("strategy/mean_cosine") and not math.isnan(float(row["strategy/mean_cosine"])):
        cos.append(float(row["strategy/mean_cosine"]))
extra = f"{sum(proj):.0f}/{len(proj)} rounds, mean cos {sum(cos)/len(cos):+.3f}" if proj else ""
print(f"| {method} | {100*s['test/accuracy']:.2f} | {100*s['test/recall_macro']:.2f} | "
      f"{100*s['test/f1_macro']:.2f} | {s['privacy/epsilon']:.3f} | {s['rounds']} | "
      f"{t.get('throughput/train_samples_per_s_mean', float('nan')):.0f} | "
      f"{t['throughput/test_samples_per_s']:.0f} | {extra} |")
PY
)")
done
{
  echo "# GCFL and baselines on offline MNIST at epsilon = 2"
  echo
  echo "Machine: $(uname -m), $(OMP_NUM_THREADS= nproc) CPU cores, load average $load_before before the runs and $(cut -d' ' -f1 /proc/loadavg) after them (OMP_NUM_THREADS=$OMP_NUM_THREADS), torch $(python -c 'import torch;print(torch.__version__)'); date: $(date -u +%F)."
  echo "Config: \`$config\` (2 IID clients of 4,000 real MNIST test-set images, 2,000 held out;"
  echo "K = 20 DP-SGD steps a round, B = 32, C = 1.5, sigma calibrated for epsilon = 2 at delta = 1e-5 over 10 rounds; seed 0; one run each;"
  echo "DP-SGD engine: the default \`auto\`, which picks \`bk\` for this CNN)."
  echo
  echo "| method | acc % | macro recall % | macro F1 % | epsilon | rounds | train samples/s | test samples/s | GCFL: gradients projected, mean cosine |"
  echo "|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} > "$out"
cat "$out"
