"""Checkpoint and resume: a resumed run ends where an uninterrupted one does (weights, ε)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.conftest import QUICKSTART, TINY

ROUNDS, SPLIT = 6, 3


def _global_weights(ckpt: Path) -> dict[str, torch.Tensor]:
    state = torch.load(ckpt, map_location="cpu", weights_only=False)["state_dict"]
    return {k: v for k, v in state.items() if k.startswith("global_net.")}


def _fit(run_cli, root: Path, *extra: str) -> None:
    from fl_lightning.cli import main

    args = ["fit", "--config", str(QUICKSTART), *TINY, "--trainer.default_root_dir", str(root),
            "--trainer.enable_checkpointing", "true", "--model.server_momentum", "0.5",
            "--client.momentum", "0.9", *extra]  # fmt: skip
    assert main(args) == 0


def test_resume_equals_uninterrupted(run_cli, tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    _fit(run_cli, full, "--trainer.max_steps", str(ROUNDS))
    _fit(run_cli, part, "--trainer.max_steps", str(SPLIT))
    mid = part / "checkpoints" / "last.ckpt"
    assert torch.load(mid, weights_only=False)["global_step"] == SPLIT
    resumed = tmp_path / "resumed"
    _fit(run_cli, resumed, "--trainer.max_steps", str(ROUNDS), "--ckpt_path", str(mid))

    a = _global_weights(full / "checkpoints" / "last.ckpt")
    b = _global_weights(resumed / "checkpoints" / "last.ckpt")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k
    sa = json.loads((full / "summary.json").read_text())
    sb = json.loads((resumed / "summary.json").read_text())
    assert sb["rounds"] == ROUNDS
    assert sa["privacy/epsilon"] == sb["privacy/epsilon"]
    assert sa["test/accuracy"] == sb["test/accuracy"]
