#!/usr/bin/env bash
# Short offline-MNIST run of the six methods of the GCFL paper at epsilon = 2 (record level,
# delta = 1e-5, sigma calibrated). The machine (core count, torch threads, platform) and the
# load average before and after are measured; the run is appended to
# OUT_DIR/gcfl_mnist_offline_eps2.{md,json} (benchmarks/_record.py); nothing is rewritten.
# Usage (from the repository root, venv active):
#   bash benchmarks/gcfl_mnist_offline_eps2.sh [OUT_DIR]   (default benchmarks/results)
set -euo pipefail
out_dir=${1:-benchmarks/results}
[ -d "$out_dir" ] || { echo "OUT_DIR: $out_dir is not a directory (the run is appended there)"; exit 2; }
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} WANDB_MODE=${WANDB_MODE:-disabled}
config=configs/experiment/gcfl/mnist_offline_eps2.yaml
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
ROWS=$(printf '%s\n' "${rows[@]}") LOAD_BEFORE=$load_before \
  CONFIG=$config COMMAND="bash benchmarks/gcfl_mnist_offline_eps2.sh $*" \
  PYTHONPATH=benchmarks${PYTHONPATH:+:$PYTHONPATH} python - "$out_dir" <<'PY'
import os, sys
from _record import record_run
before = tuple(float(v) for v in os.environ["LOAD_BEFORE"].split())
rows = os.environ["ROWS"].splitlines()
threads = int(os.environ["OMP_NUM_THREADS"])  # the CLI runs' threads, not this process's
intro = ("# GCFL and baselines on offline MNIST at epsilon = 2\n\n"
         "`benchmarks/gcfl_mnist_offline_eps2.sh`; each run appended as measured.\n")
record_run(sys.argv[1], "gcfl_mnist_offline_eps2", title=f"OMP_NUM_THREADS={threads}",
           intro=intro, load_before=before, command=os.environ["COMMAND"], threads=threads,
           rows=rows, lines=[
    f"- command: `{os.environ['COMMAND']}`",
    f"- config: `{os.environ['CONFIG']}` (2 IID clients of 4,000 real MNIST test-set images, "
    "2,000 held out; K = 20 DP-SGD steps a round, B = 32, C = 1.5, sigma calibrated for "
    "epsilon = 2 at delta = 1e-5 over 10 rounds; seed 0; one run each; DP-SGD engine: the "
    "default `auto`).",
    "",
    "| method | acc % | macro recall % | macro F1 % | epsilon | rounds | train samples/s "
    "| test samples/s | GCFL: gradients projected, mean cosine |",
    "|---|---|---|---|---|---|---|---|---|",
    *rows,
])
PY
