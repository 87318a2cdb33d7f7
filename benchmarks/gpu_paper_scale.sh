#!/usr/bin/env bash
# Paper-scale reproduction cells on a GPU (issue 37, section 1), in one command for a device
# session: check the environment, then work the queue of benchmarks/gpu_paper_scale.py down
# within a time budget (one cell per paper first, cheapest first; estimates in
# benchmarks/results/gpu_paper_scale_estimates.md). Finished runs become rows of
# docs/reproductions/store/<paper>-paper, which `fl-lightning repro P --profile paper
# --report-only` reads (bring the store back with the OUT folder: copy OUT/store).
#
# Usage: bash benchmarks/gpu_paper_scale.sh OUT [BUDGET_S]      (default budget 480 s)
#   PAPER_SCALE_TOY=1: the CPU dry run (tests/test_gpu_paper_scale.py): the first
#   cell at one seed, one round and one local step into OUT/toy-store, the others resolved
#   by `repro --dry-run`, then --report-only on the toy store.
# The device machine runs this in the repository root with shared/ inside the checkout
# (shared/data is found there: fl_lightning.reports.repro.points.find_shared_data).
set -uo pipefail
out=${1:?usage: bash benchmarks/gpu_paper_scale.sh OUT [BUDGET_S]}
budget=${2:-480}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export WANDB_MODE=disabled PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
py=${PY:-python3}
if [ -x .venv/bin/python ] && [ -z "${PY:-}" ]; then py=.venv/bin/python; fi
{ date -u; nproc; cat /proc/loadavg; } > "$out/machine.txt"
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> "$out/machine.txt"
fi
# The environment: the package's dependencies must import. The device machine has no network,
# so a missing dependency cannot be installed there; scripts/setup.sh with a constraints file
# that keeps the machine's CUDA torch (FL_CONSTRAINTS) is tried once and reported.
check='import torch, lightning, opacus, dp_accounting, fl_lightning; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
if ! "$py" -c "$check" >> "$out/machine.txt" 2>&1; then
  grep -v -E '^(torch|torchvision)==' constraints.txt > "$out/constraints-cuda.txt"
  FL_CONSTRAINTS="$out/constraints-cuda.txt" timeout 300 bash scripts/setup.sh \
    > "$out/setup.log" 2>&1 || echo "setup failed: $out/setup.log" | tee -a "$out/machine.txt"
  py=.venv/bin/python
  "$py" -c "$check" >> "$out/machine.txt" 2>&1 || { cat "$out/machine.txt"; exit 3; }
fi
cat "$out/machine.txt"
"$py" -c 'from fl_lightning.reports.repro.points import find_shared_data as f
d = f(); print("shared data:", d); raise SystemExit(d is None)' | tee -a "$out/machine.txt" \
  || { echo "shared/data (the MNIST test set) not found"; exit 4; }
"$py" benchmarks/gpu_paper_scale.py plan | tee "$out/plan.txt"
if [ -n "${PAPER_SCALE_TOY:-}" ]; then
  "$py" benchmarks/gpu_paper_scale.py run --toy --out "$out" --budget-s "$budget"
  rc=$?
  src=$out/toy-store
else
  "$py" benchmarks/gpu_paper_scale.py run --out "$out" --budget-s "$budget"
  rc=$?
  src=docs/reproductions/store
fi
# what finished, for the session's report: the store's rows, curves and images (the run
# folders under runs/ are not needed once a row is stored)
for d in "$src"/*-paper; do
  [ -d "$d" ] || continue
  mkdir -p "$out/store/${d##*/}"
  cp "$d"/*.jsonl "$out/store/${d##*/}/" 2>/dev/null
  if [ -d "$d/images" ]; then cp -r "$d/images" "$out/store/${d##*/}/"; fi
done
tail -n 20 "$out/queue.jsonl" 2>/dev/null
exit $rc
