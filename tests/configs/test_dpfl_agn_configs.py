"""Every DPFL-AGN experiment config runs two rounds (offline: synthetic images of the same shape
and a narrow Abadi CNN stand in for MNIST / CIFAR-10 and the full-width network)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fl_lightning.cli import run_lightning

CONFIGS = sorted(Path("configs/experiment/dpfl_agn").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_runs_two_rounds(path: Path, tmp_path: Path) -> None:
    cfg = yaml.safe_load(path.read_text())
    shape = [cfg["client"]["net"]["init_args"]["in_channels"]] + [
        cfg["client"]["net"]["init_args"]["image_size"]
    ] * 2
    args = [
        "fit",
        "--config",
        str(path),
        "--data.dataset",
        "synthetic",
        "--data.download",
        "false",
        "--data.dataset_options",
        json.dumps({"shape": shape, "num_examples": 200}),
        "--client.net.init_args.channels",
        "[4, 4]",
        "--client.net.init_args.hidden",
        "[16, 16]",
        "--client.batch_size",
        "8",
        "--trainer.max_steps",
        "2",
        "--model.eval_every",
        "1",
        "--trainer.logger",
        "false",
        "--trainer.default_root_dir",
        str(tmp_path),
    ]
    assert run_lightning(args) == 0


def test_sweep_invokes_fit_with_a_config():
    sweep = yaml.safe_load(Path("sweeps/dpfl_agn_ablation.yaml").read_text())
    cmd = sweep["command"]
    assert cmd[1:4] == ["fl-lightning", "fit", "--config"] and cmd[-1] == "${args}"
    assert Path(cmd[4]).exists()
    assert set(sweep["parameters"]) == {
        "client.optimizer",
        "strategy.init_args.anr",
        "seed_everything",
    }
