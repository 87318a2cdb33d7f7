#!/usr/bin/env bash
# GPU checks of issue 22, in one go, for a machine with a CUDA device (CI has none); about 8
# minutes on one H200 (runs V and W of benchmarks/results/cohort_speed.md, 2026-11-26):
#   1. tests/server/test_gpu.py and tests/configs/test_gpu_runs.py (stacked cohorts equal the
#      sequential path on the GPU; a GPU run reports the CPU run's epsilon; bf16-mixed
#      clients) and every experiment config
#      trained on the GPU (tests/configs/test_experiments.py: the accelerator defaults to auto);
#   2. benchmarks/cohort_speed.py --device cuda: clients/s of the bare loop, the sequential and
#      the vectorised executors and the ceilings, with and without DP-SGD, our MnistCNN and a
#      user's CNN: cohorts 10 and 100 (60 examples a client), cohort 1000 (10 examples, one
#      step, with one bucket of all clients as a same-run A/B); the peak GPU memory per path at
#      cohort 100; bf16-mixed clients; one profiled round of each vectorised path;
#   3. the cluster scripts of issue 51 (docs/distributed.md, "Running on a cluster"):
#      examples/slurm/runs_per_gpu.sh (3 independent runs on each visible GPU, each pinned by
#      CUDA_VISIBLE_DEVICES) and, with 2 GPUs or more, examples/slurm/torchrun_multinode.sh as
#      two "nodes" on 127.0.0.1 with NCCL, one GPU each (NCCL refuses two ranks of one run on
#      one GPU: with one GPU that part is skipped, saying so).
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
timeout "${GPU_CHECK_TEST_S:-120}" python3 -m pytest -p no:cacheprovider -n "$workers" \
  -m "not slow" tests/server/test_gpu.py tests/configs/test_gpu_runs.py \
  tests/configs/test_experiments.py \
  tests/client/test_precision.py tests/test_random_devices.py -rfs \
  > "$out/tests.log" 2>&1; tail -4 "$out/tests.log"
bench="python3 benchmarks/cohort_speed.py --device cuda --out $out/cohort_speed_gpu.json"
no_ceiling="--skip ceiling ceiling_cl ceiling10 ceiling10_cl"
rows() { grep -v Warning | grep -E "^\| (mnist|user)"; }
timeout "${GPU_CHECK_BENCH_S:-240}" $bench --models mnist_cnn user_cnn --dp both \
  --cohorts 10 100 --reps 3 2>&1 | tee "$out/bench.log" | rows
timeout "${GPU_CHECK_BENCH_S:-240}" $bench --models mnist_cnn user_cnn --dp both \
  --cohorts 1000 --examples 10 --reps 3 --max-clients 1000 2>&1 | tee "$out/bench1000.log" | rows
timeout "${GPU_CHECK_MEMORY_S:-90}" $bench --models user_cnn --dp both --cohorts 100 --reps 1 \
  --memory $no_ceiling 2>&1 | tee "$out/memory.log" | rows
# client.precision bf16-mixed (bare, sequential; vectorized falls back): ratios are to a bf16 bare loop
timeout "${GPU_CHECK_BF16_S:-60}" $bench --precision bf16-mixed --models user_cnn --dp no \
  --cohorts 100 --reps 3 $no_ceiling 2>&1 | tee "$out/bf16.log" | rows
timeout "${GPU_CHECK_PROFILE_S:-60}" python3 benchmarks/cohort_speed.py --device cuda \
  --profile vectorized --models mnist_cnn --dp both --cohorts 100 > "$out/profile.txt" 2>&1
grep "^profile" "$out/profile.txt"
# 3. Cluster scripts (issue 51): several independent runs per GPU, then two torchrun "nodes"
#    with NCCL, one rank per GPU.
ngpu=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
cluster_args=(--trainer.max_steps 5 --trainer.logger false --trainer.enable_progress_bar false)
if PYTHON=python3 OUT="$out/per_gpu" RUNS_PER_GPU=3 timeout "${GPU_CHECK_CLUSTER_S:-180}" \
  bash examples/slurm/runs_per_gpu.sh "${cluster_args[@]}"; then
  echo "runs_per_gpu: $(ls "$out"/per_gpu/*/summary.json | wc -l) runs finished on $ngpu GPU(s)"
else
  echo "runs_per_gpu: FAILED (logs in $out/per_gpu)"
fi
if [ "$ngpu" -ge 2 ]; then
  port=$((20000 + RANDOM % 10000))
  for rank in 0 1; do
    CUDA_VISIBLE_DEVICES=$rank NODE_RANK=$rank MASTER_ADDR=127.0.0.1 MASTER_PORT=$port NPROC=1 \
      ACCEL=gpu RUN_DIR="$out/torchrun_node$rank" timeout "${GPU_CHECK_CLUSTER_S:-180}" \
      bash examples/slurm/torchrun_multinode.sh "${cluster_args[@]}" \
      > "$out/torchrun_node$rank.log" 2>&1 &
  done
  wait
  grep -h "^Finished\|^error" "$out"/torchrun_node*.log \
    || echo "torchrun (NCCL, 2 nodes x 1 GPU): no result (logs in $out)"
else
  echo "torchrun (NCCL, 2 nodes x 1 GPU): skipped, needs 2 GPUs (this machine has $ngpu)"
fi
