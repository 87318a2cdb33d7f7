"""Tiny real runs for the fault tests: 6 rounds of DP-FedAvg on digits with a checkpoint after
every round, and the comparisons a resumed run must pass against an uninterrupted one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from tests.conftest import QUICKSTART, REPO, TINY

ROUNDS = 6
EVERY_ROUND = json.dumps(
    [
        {
            "class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
            "init_args": {"save_last": True, "every_n_train_steps": 1, "save_top_k": 0},
        }
    ]
)


def fit_args(root: Path, rounds: int = ROUNDS, *extra: str) -> list[str]:
    return ["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", str(rounds),
            "--trainer.default_root_dir", str(root), f"--trainer.callbacks={EVERY_ROUND}",
            "--model.server_momentum", "0.5", "--client.momentum", "0.9",
            "--trainer.accelerator", "cpu", "--trainer.devices", "1", *extra]  # fmt: skip


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}


def run(args: list[str], *, fault: tuple[str, int] | None = None, timeout: float = 300):
    """The CLI as a subprocess (with ``fault`` = (kind, nth) injected); the CompletedProcess."""
    if fault:
        cmd = [sys.executable, "-m", "tests.reliability.faults", fault[0], str(fault[1]), "--"]
    else:
        cmd = [sys.executable, "-m", "fl_lightning.cli"]
    cmd += args
    return subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=timeout)


def load(ckpt: Path) -> dict:
    return torch.load(ckpt, map_location="cpu", weights_only=True)


def accountant_state(ckpt: dict) -> dict:
    states = [s for k, s in ckpt["callbacks"].items() if "PrivacyAccountant" in k]
    assert len(states) == 1, list(ckpt["callbacks"])
    return states[0]


def global_weights(ckpt: dict) -> dict[str, torch.Tensor]:
    return {k: v for k, v in ckpt["state_dict"].items() if k.startswith("global_net.")}


def assert_same_result(
    reference: Path, resumed: Path, rounds: int = ROUNDS, atol: float = 1e-6
) -> None:
    """Weights within ``atol`` (1e-6; 1e-5 across world sizes, as the DDP equivalence test),
    ε equal, every round counted exactly once."""
    a, b = (
        load(reference / "checkpoints" / "last.ckpt"),
        load(resumed / "checkpoints" / "last.ckpt"),
    )
    wa, wb = global_weights(a), global_weights(b)
    assert wa.keys() == wb.keys() and wa
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=atol, rtol=0)
    sa = json.loads((reference / "summary.json").read_text())
    sb = json.loads((resumed / "summary.json").read_text())
    assert sb["rounds"] == sa["rounds"] == rounds
    assert sb["privacy/epsilon"] == sa["privacy/epsilon"]
    acc_a, acc_b = accountant_state(a), accountant_state(b)
    assert acc_b["rounds"] == acc_a["rounds"] == rounds  # no round counted twice (or skipped)
    assert acc_b["client_level"] == acc_a["client_level"]
    assert b["global_step"] == rounds
