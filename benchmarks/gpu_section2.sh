#!/usr/bin/env bash
# The GPU path toward the hardware (issue 37, section 2), prepared on the CPU, not yet run:
#   1. benchmarks/gpu_conv_paths.py: the stacked clients' grouped convolution (MnistCNN's two
#      convs, 64 clients of batch 10) as the executor runs it, with cudnn.benchmark, in
#      channels_last and as unfold + bmm, interleaved, with FLOP/s ÷ an 8192² matmul;
#   2. one profiled DP-SGD round of the vectorised path (cohort 100): device kernels launched
#      and the GPU's busy share of the round (81,504 launches, 36 % busy in run V);
#   3. the sequential path's per-step no-sync change (a client's losses read once), unmeasured
#      on a GPU: bare, sequential and vectorised clients/s, with and without DP-SGD.
# About 5 minutes on one H200 by runs V–W's timings (each step has its own timeout).
# Usage: bash benchmarks/gpu_section2.sh OUT
#   GPU_SECTION2_TOY=1: the CPU dry run at toy size (tests/test_gpu_paper_scale.py).
set -uo pipefail
out=${1:?usage: bash benchmarks/gpu_section2.sh OUT}
mkdir -p "$out"
export WANDB_MODE=disabled PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
py=${PY:-python3}
if [ -n "${GPU_SECTION2_TOY:-}" ]; then
  dev=cpu; conv="--clients 2 --batch 2 --reps 1"; cohort=2; reps=1; examples=4
  : "${GPU_S2_CONV_S:=600}" "${GPU_S2_PROFILE_S:=600}" "${GPU_S2_BENCH_S:=600}"  # a loaded CPU
else
  dev=cuda; conv="--clients 64 --batch 10 --reps 20"; cohort=100; reps=3; examples=60
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt"
fi
rc=0
timeout "${GPU_S2_CONV_S:-120}" "$py" benchmarks/gpu_conv_paths.py --device $dev $conv \
  --json "$out/conv_paths.json" 2>&1 | tee "$out/conv_paths.log" || rc=1
timeout "${GPU_S2_PROFILE_S:-90}" "$py" benchmarks/cohort_speed.py --device $dev \
  --profile vectorized --models mnist_cnn --dp yes --cohorts $cohort --examples $examples \
  > "$out/profile_dp.txt" 2>&1 || rc=1
grep "^profile" "$out/profile_dp.txt"
timeout "${GPU_S2_BENCH_S:-180}" "$py" benchmarks/cohort_speed.py --device $dev \
  --models mnist_cnn --dp both --cohorts $cohort --examples $examples --reps $reps \
  --skip ceiling ceiling_cl ceiling10 ceiling10_cl --out "$out/cohort_speed_gpu.json" \
  2>&1 | tee "$out/bench.log" | grep -E "^\| mnist" || rc=1
exit $rc
