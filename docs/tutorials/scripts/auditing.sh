#!/usr/bin/env bash
# Tutorial: auditing a run (docs/tutorials/auditing.md).
# From the repository root, with .venv active: bash docs/tutorials/scripts/auditing.sh
# Writes under runs/tutorials/auditing/ (emptied first). About a minute on 2 CPU cores.
set -euo pipefail
# One thread: DLG's L-BFGS amplifies the last bits of multi-threaded sums, so its numbers repeat
# (on this page, on your machine) only when every sum is taken in the same order.
export OMP_NUM_THREADS=1
out=runs/tutorials/auditing
rm -rf "$out"
quiet=(--trainer.enable_progress_bar false)

echo "## 1. Membership inference and gradient inversion against the quickstart"
fl-lightning audit --config configs/experiment/quickstart.yaml --attack threshold --attack dlg \
    "${quiet[@]}" --trainer.default_root_dir "$out/mia_dlg"

echo "## 2. What audit.json holds"
python - "$out/mia_dlg/fl/version_0/audit.json" <<'PY'
import json
import sys

audit = json.load(open(sys.argv[1]))
print(f"members {audit['num_members']}, non-members {audit['num_nonmembers']}, "
      f"shadow pool {audit['shadow_pool']}; accountant ε {audit['accountant_epsilon']:.3f}")
keys = {"threshold": ("auc", "tpr_at_1pct_fpr", "epsilon_lower_bound"),
        "dlg": ("ssim_median", "psnr_median", "recovered_fraction", "label_accuracy")}
for attack, names in keys.items():
    result = audit["attacks"][attack]
    print(attack, ", ".join(f"{k} {result[k]:.4f}" for k in names))
PY

echo "## 3. One-run empirical ε from canary clients"
fl-lightning audit --config configs/experiment/quickstart.yaml --attack canaries \
    --observer all_models --num-canaries 500 "${quiet[@]}" --trainer.default_root_dir "$out/canaries"
