"""Issue 51, item 1: the documented torchrun script (examples/slurm/torchrun_multinode.sh) as
two "nodes" on this machine.

Each node is the script run as shown in its header (``NODE_RANK=0|1 MASTER_ADDR=127.0.0.1``,
``ACCEL=cpu NPROC=1``: one gloo process a node), in a working directory of its own, as two
machines without a shared filesystem would be, with ``RUN_DIR=run`` (relative: each node's
own). Checked: the two nodes end with the global weights (within the DDP tolerance, 1e-5), ε
and test metrics of the same run in one process; node 1 (rank 1) writes nothing, node 0 exactly
the files of the one-process run; and a node that dies (its torchrun and its worker
SIGKILLed) ends the other with one ``error: distributed:`` line naming the lost rank and a
checkpoint that resumes to the one-process result.

What this does not prove: two machines on a real network (the rendezvous and gloo here go
over loopback) or NCCL (benchmarks/gpu_check.sh runs that where a GPU is lent).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.emulate import SLURM, alive, clean_env, free_port, kill_tree, stop
from tests.conftest import QUICKSTART, REPO
from tests.reliability.runs import EVERY_ROUND, assert_same_result
from tests.server.conftest import COMMON
from tests.server.test_ddp_equivalence import assert_same_run

pytestmark = [pytest.mark.ddp, pytest.mark.heavy]

SCRIPT = SLURM / "torchrun_multinode.sh"
# The CSV logger too (relative to the node's directory), to see that rank 1 logs nothing.
CSV = ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger", "--trainer.logger.save_dir",
       "run"]  # fmt: skip


def start_nodes(tmp: Path, *args: str) -> list[tuple[subprocess.Popen, Path]]:
    port = str(free_port())
    nodes = []
    for rank in (0, 1):
        cwd = tmp / f"node{rank}"
        cwd.mkdir()
        env = clean_env(NNODES="2", NPROC="1", ACCEL="cpu", NODE_RANK=str(rank),
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=port, CONFIG=str(QUICKSTART),
                        RUN_DIR="run")  # fmt: skip
        with open(tmp / f"node{rank}.log", "w") as log:
            proc = subprocess.Popen(["bash", str(SCRIPT), *args], cwd=cwd, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        nodes.append((proc, cwd))
    return nodes


def one_process(root: Path, *args: str) -> Path:
    """The same run in this process (the test worker has imported everything already)."""
    from fl_lightning.cli import main

    cli = ["fit", "--config", str(QUICKSTART), *args, "--trainer.accelerator", "cpu",
           "--trainer.devices", "1", "--trainer.default_root_dir", str(root)]  # fmt: skip
    assert main(cli) == 0
    return root


def files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_two_nodes_equal_one_process_and_only_rank_0_writes(tmp_path, monkeypatch):
    args = [*COMMON, "--trainer.max_steps", "3", *CSV]
    nodes = start_nodes(tmp_path, *args)
    try:
        monkeypatch.chdir(REPO)
        one = one_process(tmp_path / "one", *COMMON, "--trainer.max_steps", "3", *CSV[:2],
                          "--trainer.logger.save_dir", str(tmp_path / "one"))  # fmt: skip
        codes = [proc.wait(timeout=300) for proc, _ in nodes]
    finally:
        for proc, _ in nodes:
            stop(proc)
    logs = [(tmp_path / f"node{r}.log").read_text() for r in (0, 1)]
    assert codes == [0, 0], logs[codes.index(max(codes, key=abs))][-3000:]
    node0, node1 = (cwd for _, cwd in nodes)
    assert files(node1) == []  # rank 1 wrote nothing at all
    run = node0 / "run" / "lightning_logs" / "version_0"
    assert files(run) == files(one / "lightning_logs" / "version_0")
    assert_same_run(one / "lightning_logs" / "version_0", run)
    assert "Finished 3 rounds" in logs[0] and "Finished" not in logs[1]


@pytest.mark.fault
def test_a_dead_node_ends_the_other_with_one_line_and_a_resumable_checkpoint(tmp_path, monkeypatch):
    rounds = 30
    args = [*COMMON, "--trainer.max_steps", str(rounds), f"--trainer.callbacks={EVERY_ROUND}",
            "--distributed_timeout", "60"]  # fmt: skip
    nodes = start_nodes(tmp_path, *args)
    (node0, cwd0), (node1, _) = nodes
    last = cwd0 / "run" / "checkpoints" / "last.ckpt"
    tree: list[int] = []
    try:
        deadline = time.monotonic() + 240
        while not last.exists() and time.monotonic() < deadline:
            assert node0.poll() is None, (tmp_path / "node0.log").read_text()[-3000:]
            time.sleep(0.02)
        assert last.exists(), "node 0 wrote no checkpoint"
        tree = kill_tree(node1.pid)  # the node dies: its torchrun and its worker
        # A bound, not a timing claim: node 0 must end by itself, well before its timeout.
        code = node0.wait(timeout=120)
    finally:
        for proc, _ in nodes:
            stop(proc)
    out = (tmp_path / "node0.log").read_text()
    assert code != 0
    ours = [ln for ln in out.splitlines() if ln.startswith("error: distributed:")]
    assert len(ours) == 1, out[-3000:]
    assert ours[0].startswith("error: distributed: rank 0 of 2 lost rank 1 in round ")
    assert "--ckpt_path run/checkpoints/last.ckpt" in ours[0]
    assert not [p for p in tree if alive(p)]  # nothing of the dead node is left running
    # The checkpoint resumes: on one process, to the one-process result.
    monkeypatch.chdir(REPO)
    reference = one_process(tmp_path / "reference", *args[:-2])
    resumed = one_process(tmp_path / "resumed", *args[:-2], "--ckpt_path", str(last))
    assert_same_result(reference, resumed, rounds=rounds, atol=5e-5)
