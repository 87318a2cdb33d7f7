"""A resume past a planned horizon (issue 46), through the CLI: DP-FTRL, whose one event
priced the planned rounds at round 0, refuses a larger ``trainer.max_steps`` with one line
naming it and the planned horizon, exit 2, before anything is written (a resume to the planned
rounds: ``tests/testing/test_horizon_contract.py``); DP-FedAvg (priced round by round) resumed
K → 2K prints a fresh 2K run's ε."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import QUICKSTART, REPO, TINY

FTRL = REPO / "configs" / "experiment" / "quickstart_ftrl.yaml"


def _args(config: Path, root: Path, rounds: int, *extra: str) -> list[str]:
    return ["fit", "--config", str(config), *TINY, "--trainer.max_steps", str(rounds),
            "--model.clients_per_round", "5", "--trainer.default_root_dir", str(root),
            *extra]  # fmt: skip


def _epsilon(root: Path) -> float:
    (summary,) = root.rglob("summary.json")
    return float(json.loads(summary.read_text())["privacy/epsilon"])


def test_dp_ftrl_refuses_a_resume_past_its_planned_rounds(tmp_path, capsys):
    from fl_lightning.cli import main

    assert main(_args(FTRL, tmp_path / "first", 2)) == 0
    ckpt = tmp_path / "first" / "checkpoints" / "last.ckpt"
    capsys.readouterr()
    rc = main(_args(FTRL, tmp_path / "longer", 4, "--ckpt_path", str(ckpt)))
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: trainer.max_steps: {ckpt} was planned and accounted for 2 "
                          "rounds (DP-FTRL charges the whole planned run"), err  # fmt: skip
    assert "resume with trainer.max_steps <= 2" in err
    assert not (tmp_path / "longer").exists() or not any((tmp_path / "longer").rglob("*"))


def test_dp_fedavg_resumed_to_twice_the_rounds_prints_the_fresh_epsilon(tmp_path):
    from fl_lightning.cli import main

    assert main(_args(QUICKSTART, tmp_path / "fresh", 4)) == 0
    assert main(_args(QUICKSTART, tmp_path / "first", 2)) == 0
    ckpt = tmp_path / "first" / "checkpoints" / "last.ckpt"
    assert main(_args(QUICKSTART, tmp_path / "resumed", 4, "--ckpt_path", str(ckpt))) == 0
    assert _epsilon(tmp_path / "resumed") == _epsilon(tmp_path / "fresh")
