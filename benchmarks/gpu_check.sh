#!/usr/bin/env bash
# GPU checks of issue 22, in one go, for a machine with a CUDA device (CI has none):
#   1. tests/server/test_gpu.py (stacked cohorts equal the sequential path on the GPU; a GPU
#      run reports the CPU run's epsilon) and every experiment config trained on the GPU
#      (tests/configs/test_experiments.py: the trainer's accelerator defaults to auto);
#   2. benchmarks/cohort_speed.py --device cuda: clients/s of the bare loop, the sequential and
#      the vectorised executors and the ceilings, cohorts 10/100/1000, with and without DP-SGD,
#      our MnistCNN and a user's CNN; then the peak GPU memory per path at cohort 100.
# Usage: bash benchmarks/gpu_check.sh OUT_DIR   (logs and the JSON rows go to OUT_DIR)
set -uo pipefail
out=${1:?usage: bash benchmarks/gpu_check.sh OUT_DIR}
mkdir -p "$out"
export WANDB_MODE=disabled PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,utilization.gpu --format=csv \
  | tee "$out/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" \
  | tee -a "$out/gpu.txt"
workers=$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))
timeout "${GPU_CHECK_TEST_S:-150}" python3 -m pytest -p no:cacheprovider -n "$workers" \
  -m "not slow" tests/server/test_gpu.py tests/configs/test_experiments.py -rfs \
  2>&1 | tee "$out/tests.log" | tail -25
timeout "${GPU_CHECK_BENCH_S:-240}" python3 benchmarks/cohort_speed.py --device cuda \
  --models mnist_cnn user_cnn --dp both --cohorts 10 100 1000 --reps 3 \
  --out "$out/cohort_speed_gpu.json" 2>&1 | tee "$out/bench.log" | grep -v Warning
timeout "${GPU_CHECK_MEMORY_S:-80}" python3 benchmarks/cohort_speed.py --device cuda \
  --models user_cnn --dp both --cohorts 100 --reps 1 --memory \
  --skip ceiling ceiling_cl ceiling10 ceiling10_cl \
  --out "$out/cohort_speed_gpu.json" 2>&1 | tee "$out/memory.log" | grep -v Warning
# client.precision bf16-mixed (bare, sequential; vectorized falls back): ratios are to a bf16 bare loop
timeout "${GPU_CHECK_BF16_S:-60}" python3 benchmarks/cohort_speed.py --device cuda \
  --precision bf16-mixed --models user_cnn --dp no --cohorts 100 --reps 3 \
  --skip ceiling ceiling_cl ceiling10 ceiling10_cl \
  --out "$out/cohort_speed_gpu.json" 2>&1 | tee "$out/bf16.log" | grep -v Warning
