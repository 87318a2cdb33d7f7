"""Every DP-FedASGP experiment config and every strategy group file runs two rounds.

Datasets that need the internet are swapped for ``synthetic`` data of the same shape, the
Shakespeare config reads the tiny LEAF fixture, and models/cohorts are shrunk so the whole file
stays fast; what is exercised is the config composition, the strategies and the accounting.
"""

import math
from pathlib import Path

import pytest

from fl_lightning.cli import build_cli_class
from tests.conftest import offline_mnist_args

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = sorted((ROOT / "configs/experiment/dp_fedasgp").glob("*.yaml"))
STRATEGIES = sorted((ROOT / "configs/strategy/dp_fedasgp").glob("*.yaml"))
FIXTURE = str(ROOT / "tests/fixtures/leaf_shakespeare")

TINY = [
    "--trainer.max_steps",
    "2",
    "--trainer.logger",
    "false",
    "--model.eval_every",
    "2",
]


def data_overrides(name: str) -> list[str]:
    if name.startswith("shakespeare"):
        return ["--data.root", FIXTURE, "--model.clients_per_round", "2"]
    shape = "[1, 28, 28]" if name.startswith("mnist") else "[3, 32, 32]"
    classes = "100" if name.startswith("cifar100") else "10"
    out = ["--data.num_clients", "4", "--model.clients_per_round", "2", "--client.batch_size", "16"]
    if name.startswith("mnist_offline"):
        return out + offline_mnist_args()
    return out + [
        "--data.dataset",
        "synthetic",
        "--data.download",
        "false",
        "--data.dataset_options",
        f"{{shape: {shape}, num_classes: {classes}, num_examples: 64}}",
    ]


def model_overrides(name: str) -> list[str]:
    if "resnet50" in name:
        return [
            "--client.net.init_args.width",
            "4",
            "--client.net.init_args.groups",
            "2",
            "--client.net.init_args.blocks",
            "[1, 1, 1, 1]",
        ]
    if name == "mnist_cnn.yaml" or name.startswith("mnist_offline"):
        return ["--client.net.init_args.channels", "[4, 8]", "--client.net.init_args.hidden", "16"]
    if name.startswith("shakespeare"):
        return ["--client.net.init_args.hidden_size", "16"]
    return []


def fit(args: list[str]) -> dict:
    cli = build_cli_class()(args, run=False)
    cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.model.rounds_completed == 2
    return cli.model.accountant.report()


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.stem)
def test_experiment_config_runs_two_rounds(path, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    report = fit(
        [
            "--config",
            str(path),
            *TINY,
            *data_overrides(path.name),
            *model_overrides(path.name),
            "--trainer.default_root_dir",
            str(tmp_path),
        ]
    )
    assert math.isinf(report["privacy/epsilon"])  # DP-FedASGP as published: no guarantee
    assert report["privacy/guarantee"].startswith("none: coordinates below the threshold")


@pytest.mark.parametrize("path", STRATEGIES, ids=lambda p: p.stem)
def test_strategy_group_runs_two_rounds(path, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    name = "mnist_cnn.yaml"  # swapped to synthetic 1×28×28 data: fast
    report = fit(
        [
            "--config",
            str(ROOT / "configs/experiment/dp_fedasgp" / name),
            "--strategy",
            str(path),
            *TINY,
            *data_overrides(name),
            *model_overrides(name),
            "--trainer.default_root_dir",
            str(tmp_path),
        ]
    )
    assert "privacy/guarantee" in report
    if path.stem in ("dp_fedasgp_sound", "dp_fedavg_local", "cpsgd"):
        assert 0 < report["privacy/epsilon"] < math.inf
