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


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_ckpt_path_last_resumes_the_newest_checkpoint_under_the_root(tmp_path, capsys):
    """``--ckpt_path last`` in the same ``trainer.default_root_dir``: Lightning alone would look
    in the new run's empty checkpoint folder and silently train from round 0; it resumes the
    root's newest last.ckpt (K → 2K: a fresh 2K run's ε), and config.yaml records the file."""
    from fl_lightning.cli import main

    assert main(_args(QUICKSTART, tmp_path / "fresh", 4)) == 0
    root = tmp_path / "run"
    assert main(_args(QUICKSTART, root, 2)) == 0
    ckpt = root / "checkpoints" / "last.ckpt"
    capsys.readouterr()
    assert main(_args(QUICKSTART, root, 4, "--ckpt_path", "last",
                      "--trainer.logger", "true")) == 0  # fmt: skip
    assert f"Resuming from {ckpt}" in capsys.readouterr().out
    (config,) = (root / "fl").rglob("config.yaml")
    assert f"ckpt_path: {ckpt}" in config.read_text()
    (summary,) = (root / "fl").rglob("summary.json")
    resumed = json.loads(summary.read_text())
    assert resumed["rounds"] == 4
    assert resumed["privacy/epsilon"] == _epsilon(tmp_path / "fresh")


def test_ckpt_path_last_refusals_write_nothing(tmp_path, capsys):
    """No checkpoint under the root, or DP-FTRL's horizon: one line, exit 2, no file added."""
    from fl_lightning.cli import main

    empty = tmp_path / "empty"
    rc = main(_args(QUICKSTART, empty, 4, "--ckpt_path", "last"))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: ckpt_path: last, but no last.ckpt under {empty}"), err
    assert not empty.exists() or not _files(empty)

    root = tmp_path / "ftrl"
    assert main(_args(FTRL, root, 2)) == 0
    before = _files(root)
    capsys.readouterr()
    rc = main(_args(FTRL, root, 4, "--ckpt_path", "last", "--trainer.logger", "true"))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: trainer.max_steps: "), err
    assert "planned and accounted for 2 rounds" in err
    assert _files(root) == before


def test_distributed_sigma_calibrated_to_a_target_refuses_a_resume_past_its_rounds(
    tmp_path, capsys
):
    """Distributed DP with σ calibrated so that the planned rounds spend the target (issue 55,
    item 4): bound to its horizon as DP-FedAvg's calibrated σ is; a 2 → 4 resume is refused
    (the ledger's horizon names the reason) before anything is written."""
    from fl_lightning.cli import main

    ddg = REPO / "configs" / "experiment" / "distributed_dp" / "ddg.yaml"
    calibrated = ("--strategy.noise_multiplier", "null", "--privacy.target_epsilon", "10")
    assert main(_args(ddg, tmp_path / "first", 2, *calibrated)) == 0
    ckpt = tmp_path / "first" / "checkpoints" / "last.ckpt"
    capsys.readouterr()
    rc = main(_args(ddg, tmp_path / "longer", 4, *calibrated, "--ckpt_path", str(ckpt)))
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.startswith(
        f"error: trainer.max_steps: {ckpt} was planned and accounted for 2 rounds (distributed σ "
        "calibrated so that 2 rounds spend ε = 10"
    ), err
    assert not (tmp_path / "longer").exists() or not any((tmp_path / "longer").rglob("*"))


def test_every_ckpt_path_alias_is_resolved_before_anything_is_written(tmp_path, capsys):
    """``hpc``, ``best`` and ``registry`` (issue 55 item 5): Lightning resolved them inside
    ``Trainer.fit``, after config.yaml, hparams.yaml and a W&B run were written. ``hpc`` finds
    the root's newest hpc_ckpt_<n>.ckpt and meets DP-FTRL's horizon refusal in one line; the
    others, which a new run cannot resolve, are one line each; no file is added."""
    import shutil

    from fl_lightning.cli import main

    root = tmp_path / "ftrl"
    assert main(_args(FTRL, root, 2)) == 0
    shutil.copy(root / "checkpoints" / "last.ckpt", root / "hpc_ckpt_1.ckpt")
    before = _files(root)
    capsys.readouterr()
    cases = {
        "hpc": f"error: trainer.max_steps: {root / 'hpc_ckpt_1.ckpt'} was planned and",
        "best": "error: ckpt_path: best names the best checkpoint of the run being started",
        "registry": "error: ckpt_path: registry (Lightning's model registry) is not supported",
    }
    for alias, start in cases.items():
        rc = main(_args(FTRL, root, 4, "--ckpt_path", alias, "--trainer.logger", "true"))
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1, err
        assert err.startswith(start), err
        assert _files(root) == before, alias
    rc = main(_args(FTRL, tmp_path / "empty", 2, "--ckpt_path", "hpc"))
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("error: ckpt_path: hpc, but no hpc_ckpt_<n>.ckpt in"), err
