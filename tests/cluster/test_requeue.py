"""fl_lightning/runs/slurm.py in one process: a one-task SLURM job step (the variables srun
sets, in this process) whose requeue fails keeps training, saying so in one line.

The signal comes from a callback at the end of round 1 (as SLURM's ``--signal`` would, at any
instant); ``scontrol`` is not on PATH, as on a machine without SLURM. The checkpoint of the
round boundary is written anyway, and the run finishes all its rounds.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from lightning.pytorch.callbacks import Callback

from tests.conftest import QUICKSTART, REPO, TINY
from tests.reliability.runs import accountant_state, load


class SignalAt(Callback):
    """Sends this process SIGUSR1 at the end of round ``round`` (test double of SLURM)."""

    def __init__(self, round: int = 1) -> None:
        self.round = round

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == self.round:
            os.kill(os.getpid(), signal.SIGUSR1)


def test_a_failed_requeue_saves_the_round_and_keeps_training(tmp_path, monkeypatch, capsys):
    from fl_lightning.cli import main

    job = {"SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "1",
           "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
           "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "fl-test", "SLURM_NODELIST": "127.0.0.1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999", "PATH": str(tmp_path)}  # fmt: skip
    for key, value in job.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
    monkeypatch.chdir(REPO)
    # Were the handler not installed, SIGUSR1's default action would end this test process.
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    root = tmp_path / "run"
    callbacks = json.dumps([{"class_path": "tests.cluster.test_requeue.SignalAt"}])
    try:
        rc = main(["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", "3",
                   "--trainer.accelerator", "cpu", "--trainer.devices", "1",
                   f"--trainer.callbacks={callbacks}",
                   "--trainer.default_root_dir", str(root)])  # fmt: skip
        handler = signal.getsignal(signal.SIGUSR1)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert handler is not None and getattr(handler, "__self__", None) is None  # restored
    hpc = root / "hpc_ckpt_1.ckpt"
    (line,) = [ln for ln in out.splitlines() if ln.startswith("warning: SLURM job 4242")]
    assert line.startswith(f"warning: SLURM job 4242 saved round 1 of 3 to {hpc} but could not")
    assert "scontrol requeue 4242: " in line and line.endswith(f"--ckpt_path {hpc}")
    saved = load(hpc)
    assert saved["global_step"] == 1 == accountant_state(saved)["rounds"]
    assert json.loads((root / "summary.json").read_text())["rounds"] == 3
    assert "requeued:" not in out
