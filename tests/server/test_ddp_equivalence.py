"""Same answer at any scale: 1 process and 2 DDP processes (gloo, CPU) end identically.

Runs the real CLI as subprocesses (Lightning's DDP launcher re-executes the command), then
compares the checkpoints' global weights (within 1e-5) and summary.json's ε. One run pair uses
a sum-based strategy (one all-reduce per round, DP-FedAvg + DP-SGD: client noise keyed by
(seed, round, client), central noise by (seed, round)), the other a strategy that needs every
update (DP-FedASGP: all updates gathered to every rank). Also: resume of a DDP checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import QUICKSTART, REPO

pytestmark = pytest.mark.ddp  # every test here launches two processes

COMMON = [
    "--data", str(REPO / "configs" / "data" / "digits.yaml"),
    "--data.num_clients", "8",
    "--model.clients_per_round", "5",
    "--model.eval_every", "1",
    "--trainer.logger", "false",
    "--trainer.enable_progress_bar", "false",
    "--client.local_epochs", "1",
    "--client.batch_size", "16",
]  # fmt: skip
DDP = ["--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu"]


def fit(root: Path, *extra: str, rounds: int = 2, ddp: bool = False) -> Path:
    cmd = [sys.executable, "-m", "fl_lightning.cli", "fit", "--config", str(QUICKSTART),
           *COMMON, "--trainer.max_steps", str(rounds), "--trainer.default_root_dir", str(root),
           *(DDP if ddp else ["--trainer.devices", "1", "--trainer.accelerator", "cpu"]),
           *extra]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def global_weights(root: Path) -> dict[str, torch.Tensor]:
    ckpt = torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    return {k: v for k, v in ckpt["state_dict"].items() if k.startswith("global_net.")}


def assert_same_run(a: Path, b: Path) -> None:
    wa, wb = global_weights(a), global_weights(b)
    assert wa.keys() == wb.keys() and wa
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-5, rtol=0)
    sa = json.loads((a / "summary.json").read_text())
    sb = json.loads((b / "summary.json").read_text())
    assert sa["rounds"] == sb["rounds"]
    assert sa["privacy/epsilon"] == pytest.approx(sb["privacy/epsilon"], rel=1e-9)
    assert sa["test/accuracy"] == pytest.approx(sb["test/accuracy"], abs=1e-6)
    assert sa["test/loss"] == pytest.approx(sb["test/loss"], abs=1e-4)


SUM_BASED = ["--client.dp_sgd.noise_multiplier", "1.0", "--client.dp_sgd.max_grad_norm", "1.0"]


def test_two_processes_match_one_sum_based_with_dp_sgd_and_resume(tmp_path):
    one = fit(tmp_path / "one", *SUM_BASED)
    two = fit(tmp_path / "two", *SUM_BASED, ddp=True)
    assert_same_run(one, two)
    # Resume the 2-round DDP checkpoint for a 3rd round under DDP == 3 rounds in one process.
    three = fit(tmp_path / "three", *SUM_BASED, rounds=3)
    resumed = fit(tmp_path / "resumed", *SUM_BASED, "--ckpt_path",
                  str(two / "checkpoints" / "last.ckpt"), rounds=3, ddp=True)  # fmt: skip
    assert_same_run(three, resumed)
    # The weights moved between rounds 2 and 3 (the comparison is not of frozen weights).
    w2, w3 = global_weights(two), global_weights(three)
    assert any(not torch.allclose(w2[k], w3[k], atol=1e-4) for k in w2)


# DP-FedExP's server step size reads every update's norm (reduction "stream"): under DDP every
# update is gathered to every rank. Client-level DP-SGD keeps the run private.
ALL_UPDATES = [
    "--strategy", "fl_lightning.strategies.dp_fedexp.DPFedExP", *SUM_BASED,
]  # fmt: skip


def test_two_processes_match_one_when_the_strategy_needs_every_update(tmp_path):
    from fl_lightning.strategies.dp_fedexp import DPFedExP

    assert DPFedExP.reduction == "stream"
    one = fit(tmp_path / "one", *ALL_UPDATES)
    two = fit(tmp_path / "two", *ALL_UPDATES, ddp=True)
    assert_same_run(one, two)
