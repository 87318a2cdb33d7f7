#!/bin/bash
# Several independent runs per GPU, for small models where one process leaves a GPU idle
# (docs/distributed.md, "Several processes per GPU", option c): RUNS_PER_GPU runs on each GPU,
# each run pinned to one GPU by CUDA_VISIBLE_DEVICES=<that GPU> (so it sees it as cuda:0), one
# seed each (SEED0, SEED0 + 1, ...). The GPUs are $GPUS ("0 1"), else those of
# CUDA_VISIBLE_DEVICES (what SLURM's --gres gives a job), else every GPU nvidia-smi lists.
# With NVIDIA MPS enabled their kernels run concurrently.
#   RUNS_PER_GPU=3 examples/slurm/runs_per_gpu.sh --trainer.max_steps 40
#   DRY_RUN=1 GPUS="2 3" RUNS_PER_GPU=2 examples/slurm/runs_per_gpu.sh   # print the placement
# Extra arguments go to every `fl-lightning fit` (run by $PYTHON, default python). Each run
# writes runs/per_gpu/gpu<i>-seed<s>/ and its console to runs/per_gpu/gpu<i>-seed<s>.log; the
# script exits non-zero if any failed.
# One DDP run cannot put two of its ranks on one GPU (NCCL refuses it): this is for separate
# runs (seeds, grid points). CI checks the placement (tests/cluster/test_scripts.py);
# benchmarks/gpu_check.sh runs it where a GPU is present.
set -euo pipefail
CONFIG=${CONFIG:-configs/experiment/quickstart.yaml}
RUNS_PER_GPU=${RUNS_PER_GPU:-2}
SEED0=${SEED0:-0}
OUT=${OUT:-runs/per_gpu}
if [ -n "${GPUS:-}" ]; then
  read -ra gpus <<< "${GPUS}"
elif [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  IFS=, read -ra gpus <<< "${CUDA_VISIBLE_DEVICES}"
else
  mapfile -t gpus < <(nvidia-smi --query-gpu=index --format=csv,noheader)
fi
if [ "${#gpus[@]}" -eq 0 ]; then
  echo "error: no GPU found; set GPUS (\"0 1\") or CUDA_VISIBLE_DEVICES" >&2
  exit 2
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export WANDB_MODE=${WANDB_MODE:-offline}
[ -n "${DRY_RUN:-}" ] || mkdir -p "${OUT}"
pids=()
seed=${SEED0}
for gpu in "${gpus[@]}"; do
  for ((k = 0; k < RUNS_PER_GPU; k++)); do
    name="gpu${gpu}-seed${seed}"
    cmd=("${PYTHON:-python}" -m fl_lightning.cli fit --config "${CONFIG}" --trainer.accelerator gpu
         --trainer.devices 1 --seed_everything "${seed}"
         --trainer.default_root_dir "${OUT}/${name}" "$@")
    if [ -n "${DRY_RUN:-}" ]; then
      echo "CUDA_VISIBLE_DEVICES=${gpu} ${cmd[*]}"
    else
      CUDA_VISIBLE_DEVICES=${gpu} "${cmd[@]}" > "${OUT}/${name}.log" 2>&1 &
      pids+=($!)
    fi
    seed=$((seed + 1))
  done
done
status=0
for pid in "${pids[@]}"; do
  wait "${pid}" || status=1
done
exit "${status}"
