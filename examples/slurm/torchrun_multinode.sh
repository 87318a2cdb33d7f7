#!/bin/bash
# Multi-node DP-FL with torchrun (no SLURM): run this script on every node with
# NODE_RANK=0..NNODES-1 and MASTER_ADDR set to node 0's address. Lightning detects torchrun's
# environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT) and does not launch processes
# itself; --trainer.devices must equal --nproc_per_node and --trainer.num_nodes NNODES.
#   NODE_RANK=0 MASTER_ADDR=10.0.0.1 ./torchrun_multinode.sh   # on node 0
#   NODE_RANK=1 MASTER_ADDR=10.0.0.1 ./torchrun_multinode.sh   # on node 1
# Any further arguments go to `fl-lightning fit` (e.g. --trainer.max_steps 4).
# On CPU (gloo): ACCEL=cpu NPROC=1. CI runs this script as two "nodes" on 127.0.0.1
# (tests/cluster/test_torchrun_nodes.py): the same weights, ε and metrics as one process, nothing
# written by node 1, and a killed node ends the other with one line and a resumable checkpoint.
set -euo pipefail
if [ -z "${NODE_RANK:-}" ]; then echo "error: NODE_RANK: not set; give this node's rank, 0..NNODES-1 (node 0 also runs MASTER_ADDR)" >&2; exit 2; fi
if [ -z "${MASTER_ADDR:-}" ]; then echo "error: MASTER_ADDR: not set; give node 0's address, the same on every node" >&2; exit 2; fi
command -v torchrun >/dev/null || { echo "error: torchrun: not found; activate the venv (it comes with torch)" >&2; exit 2; }
NNODES=${NNODES:-2}
NPROC=${NPROC:-4}
ACCEL=${ACCEL:-gpu}           # cpu works too (gloo): ACCEL=cpu NPROC=1
CONFIG=${CONFIG:-configs/experiment/quickstart.yaml}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export WANDB_MODE=${WANDB_MODE:-offline}

# --max_restarts 0: a lost node ends the job (resume it from its last checkpoint, --ckpt_path).
exec torchrun \
  --nnodes "${NNODES}" --nproc_per_node "${NPROC}" --node_rank "${NODE_RANK}" \
  --master_addr "${MASTER_ADDR}" --master_port "${MASTER_PORT:-29500}" \
  --max_restarts 0 \
  -m fl_lightning.cli fit \
  --config "${CONFIG}" \
  --trainer.accelerator "${ACCEL}" --trainer.strategy ddp \
  --trainer.devices "${NPROC}" --trainer.num_nodes "${NNODES}" \
  --trainer.default_root_dir "${RUN_DIR:-runs/torchrun}" \
  "$@"
