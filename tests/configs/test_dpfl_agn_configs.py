"""The DPFL-AGN ablation sweep invokes `fl-lightning fit` on an existing config (the configs
themselves are run by tests/test_configs.py)."""

from __future__ import annotations

from pathlib import Path

import yaml


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
