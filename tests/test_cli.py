"""The command line: runs, bad input (one line naming the field, non-zero exit), W&B offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import QUICKSTART, TINY

BAD_INPUTS = [
    (["--privacy.target_epsilon", "0"], "privacy.target_epsilon"),
    (["--privacy.target_epsilon", "-1"], "privacy.target_epsilon"),
    (["--privacy.delta", "0"], "privacy.delta"),
    (["--privacy.delta", "1.5"], "privacy.delta"),
    (["--model.clients_per_round", "11"], "model.clients_per_round"),
    (["--client.lr", "-0.1"], "client.lr"),
    (["--client.precision", "fp8"], "client.precision"),
    (
        ["--client.precision", "bf16-mixed", "--client.dp_sgd.noise_multiplier", "1.0"],
        "client.precision",
    ),
    (["--trainer.precision", "bf16-mixed"], "trainer.precision"),
    (["--data.dataset", "imagenet22k"], "data.dataset"),
    (["--data.partitioner", "zipf"], "data.partitioner"),
    (["--strategy.noise_multiplier", "lots"], "strategy.noise_multiplier"),
]


@pytest.mark.parametrize(("override", "field"), BAD_INPUTS)
def test_bad_input_is_one_line_naming_the_field(run_cli, capsys, tmp_path, override, field):
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, *override])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1].startswith(f"error: {field}"), err[-1]
    assert not list(Path(tmp_path).rglob("*.ckpt")), "nothing may be trained on bad input"


def test_missing_data_files_with_download_off(run_cli, capsys, tmp_path):
    rc = run_cli(
        [
            "fit",
            "--config",
            str(QUICKSTART),
            "--data.dataset",
            "mnist_offline",
            "--data.root",
            str(tmp_path / "none"),
            "--trainer.logger",
            "false",
        ]
    )
    assert rc == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: data.root")


def test_torchvision_dataset_without_files_and_download_off(run_cli, capsys, tmp_path):
    rc = run_cli(
        [
            "fit",
            "--config",
            str(QUICKSTART),
            "--data.dataset",
            "cifar10",
            "--data.root",
            str(tmp_path / "none"),
            "--trainer.logger",
            "false",
        ]
    )
    assert rc == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("error: data.root")


def test_batchnorm_model_is_refused_under_dp_sgd(run_cli, capsys):
    rc = run_cli(
        [
            "fit",
            "--config",
            str(QUICKSTART),
            *TINY,
            "--client.net",
            "torch.nn.BatchNorm1d",
            "--client.net.num_features",
            "64",
            "--client.dp_sgd.noise_multiplier",
            "1.0",
        ]
    )
    assert rc == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: client.net") and "GroupNorm" in line


def test_fit_prints_accuracy_and_epsilon_and_writes_summary(run_cli, capsys, tmp_path):
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", "3"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "test accuracy" in out and "ε =" in out
    summary = json.loads(next(Path(tmp_path).rglob("summary.json")).read_text())
    assert summary["rounds"] == 3
    assert 0.0 <= summary["test/accuracy"] <= 1.0
    assert summary["privacy/epsilon"] > 0 and summary["privacy/guarantee"].startswith("client")


def test_fit_with_bf16_mixed_clients(run_cli, tmp_path, monkeypatch):
    from fl_lightning.client import dp_sgd

    seen: list[str] = []
    original = dp_sgd.forward_precision
    monkeypatch.setattr(
        dp_sgd, "forward_precision", lambda p, d: (seen.append(p), original(p, d))[1]
    )
    rc = run_cli(
        ["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", "2",
         "--client.precision", "bf16-mixed"]
    )  # fmt: skip
    assert rc == 0
    summary = json.loads(next(Path(tmp_path).rglob("summary.json")).read_text())
    assert summary["rounds"] == 2 and summary["test/loss"] == summary["test/loss"]  # not NaN
    assert seen and set(seen) == {"bf16-mixed"}  # every local forward ran under autocast


def test_target_epsilon_stops_before_exceeding(run_cli, tmp_path):
    rc = run_cli(
        [
            "fit",
            "--config",
            str(QUICKSTART),
            *TINY,
            "--trainer.max_steps",
            "50",
            "--privacy.target_epsilon",
            "8.0",
        ]
    )
    assert rc == 0
    summary = json.loads(next(Path(tmp_path).rglob("summary.json")).read_text())
    assert summary["stopped_by_budget"] is True
    assert 7.0 < summary["privacy/epsilon"] <= 8.0
    assert 0 < summary["rounds"] < 50


def test_noise_calibrated_from_target_when_unset(run_cli, tmp_path):
    rc = run_cli(
        [
            "fit",
            "--config",
            str(QUICKSTART),
            *TINY,
            "--trainer.max_steps",
            "4",
            "--strategy.noise_multiplier",
            "null",
            "--privacy.target_epsilon",
            "2.0",
        ]
    )
    assert rc == 0
    summary = json.loads(next(Path(tmp_path).rglob("summary.json")).read_text())
    assert summary["rounds"] == 4
    assert 1.9 < summary["privacy/epsilon"] <= 2.0


def test_dp_sgd_clients_report_record_level_epsilon(run_cli, tmp_path):
    rc = run_cli(
        [
            "fit",
            "--config",
            str(QUICKSTART),
            *TINY,
            "--trainer.max_steps",
            "2",
            "--strategy",
            "fl_lightning.strategies.fedavg.FedAvg",
            "--client.dp_sgd.noise_multiplier",
            "1.0",
            "--client.dp_sgd.max_grad_norm",
            "1.0",
        ]
    )
    assert rc == 0
    summary = json.loads(next(Path(tmp_path).rglob("summary.json")).read_text())
    assert summary["privacy/guarantee"].startswith("record-level")
    assert 0 < summary["privacy/epsilon_record"] < 50


COMPONENTS = {
    "central": (
        "fl_lightning.strategies.fedavg.FedAvg",
        {"central_dp": {"class_path": "fl_lightning.strategies.central_dp.CentralGaussian",
                        "init_args": {"clip_norm": 1.0, "noise_multiplier": 1.5}}},
        "client-level",
    ),
    "local": (
        "fl_lightning.strategies.fedbuff.FedBuff",
        {"buffer_size": 3,
         "local_dp": {"class_path": "fl_lightning.strategies.budgeted_uploads.BudgetedUploads",
                      "init_args": {"epsilon": 20.0, "mechanism": "laplace", "rounds": 10}}},
        "local",
    ),
}  # fmt: skip


@pytest.mark.parametrize("placement", sorted(COMPONENTS))
def test_privacy_components_compose_from_the_config(run_cli, tmp_path, placement):
    """DP placed on the aggregate (FedAvg + CentralGaussian) or on uploads (FedBuff +
    BudgetedUploads) is configuration: the nested component is built by the CLI and the run
    prints the guarantee of that placement."""
    cls, init_args, unit = COMPONENTS[placement]
    strategy = json.dumps({"class_path": cls, "init_args": init_args})
    rc = run_cli(
        ["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", "2",
         "--strategy", strategy]
    )  # fmt: skip
    assert rc == 0
    summary = json.loads(next(Path(tmp_path).rglob("summary.json")).read_text())
    assert summary["privacy/guarantee"].startswith(unit), summary["privacy/guarantee"]
    assert 0 < summary["privacy/epsilon"] < float("inf")


def test_wandb_offline_logging_writes_a_run(run_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    rc = run_cli(
        [
            "fit",
            "--config",
            str(QUICKSTART),
            *TINY,
            "--trainer.max_steps",
            "2",
            "--trainer.logger",
            "lightning.pytorch.loggers.WandbLogger",
            "--trainer.logger.save_dir",
            str(tmp_path),
            "--trainer.logger.offline",
            "true",
            "--trainer.logger.project",
            "fl-lightning-test",
        ]
    )
    assert rc == 0
    runs = list(Path(tmp_path).rglob("offline-run-*"))
    assert runs, "an offline W&B run directory must exist"
    records = b"".join(p.read_bytes() for p in runs[0].rglob("*.wandb"))
    # The resolved config (sweeps rely on it) and the per-round metrics are in the run.
    assert b"strategy.init_args.noise_multiplier" in records
    assert b"privacy/epsilon" in records


@pytest.mark.parametrize("subcommand", ["fit", "validate", "test"])
def test_only_the_named_subcommands_parser_is_built(subcommand):
    from fl_lightning.runs.cli_class import build_cli_class

    cli = build_cli_class()([subcommand, "--config", str(QUICKSTART)], parse_only=True)
    assert set(cli.subcommands()) == {subcommand}
    assert cli.config.subcommand == subcommand
