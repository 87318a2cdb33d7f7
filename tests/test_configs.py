"""Every experiment config in configs/ runs one round with tiny overrides (DESIGN.md, tests).

Datasets that need the internet here are swapped for seeded synthetic images of the same shape
and class count (a few examples per client, so the smoke run stays seconds even for ResNet-50);
configs on offline data run on it. Everything else (model, strategy, privacy, sampling) runs
as configured.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fl_lightning.privacy.recompute import headline_epsilon
from tests.conftest import REPO, offline_mnist_args

EXPERIMENTS = sorted((REPO / "configs" / "experiment").rglob("*.yaml"))

SHAPES = {
    "mnist": ([1, 28, 28], 10),
    "fashion_mnist": ([1, 28, 28], 10),
    "cifar10": ([3, 32, 32], 10),
    "cifar100": ([3, 32, 32], 100),
    "emnist": ([1, 28, 28], 47),
    "covid_radiography": None,
    "shakespeare": None,
}


def _group(path: Path, name: str) -> dict:
    """One group of the experiment (following a relative include)."""
    cfg = yaml.safe_load(path.read_text()) or {}
    group = cfg.get(name, {}) or {}
    if isinstance(group, str):
        group = yaml.safe_load((path.parent / group).read_text()) or {}
    return group


def _resolve(path: Path) -> dict:
    return _group(path, "data")


def _cohort_overrides(path: Path) -> list[str]:
    """A cohort of about 2 clients: paper-scale cohorts of ResNet-50 clients take minutes."""
    model, data = _group(path, "model"), _resolve(path)
    clients = int(data.get("num_clients", 10))
    if model.get("sampling", "fixed") == "poisson":
        return ["--model.client_rate", str(min(1.0, 2.0 / clients))]
    if int(model.get("clients_per_round", 10)) > 2 and clients >= 2:
        return ["--model.clients_per_round", "2"]
    return []


def _data_overrides(path: Path) -> list[str]:
    data = _resolve(path)
    name = data.get("dataset", "digits")
    if name == "mnist_offline":
        return offline_mnist_args()
    if name in SHAPES:
        spec = SHAPES[name]
        if spec is None:
            pytest.skip(f"{name} has no offline stand-in; its loader has its own tests")
        shape, classes = spec
        if name == "emnist" and data.get("split") == "byclass":
            classes = 62  # EMNIST ByClass (ADP-FL, paper 004)
        clients = int(data.get("num_clients", 10))
        options = json.dumps(
            {"shape": shape, "num_classes": classes, "num_examples": max(1000, 20 * clients)}
        )
        return ["--data.dataset", "synthetic", "--data.dataset_options", options]
    return []


def test_there_are_experiment_configs():
    assert any(p.name == "quickstart.yaml" for p in EXPERIMENTS)


@pytest.mark.parametrize("config", EXPERIMENTS, ids=lambda p: str(p.relative_to(REPO / "configs")))
def test_experiment_config_runs_one_round(config, run_cli, tmp_path):
    args = [
        "fit", "--config", str(config), *_data_overrides(config), *_cohort_overrides(config),
        "--trainer.max_steps", "1",
        "--trainer.logger", "false",
        "--trainer.enable_checkpointing", "false",
        "--trainer.enable_progress_bar", "false",
        "--model.eval_every", "0",
        # One local step per client: the config's composition, model, strategy, mechanism and
        # accountant all run; paper-scale local work (e.g. 7 epochs of ResNet-18) does not.
        "--client.local_steps", "1",
        # Stand-in clients hold ~100 examples, not the paper's thousands: a small batch keeps
        # DP-SGD's sampling rate B/n (hence one round's ε) near the paper's, so a budget the
        # full config can afford is not refused for the shrunk one.
        "--client.batch_size", "2",
    ]  # fmt: skip
    assert run_cli(args) == 0, f"{config} failed"
    summary = json.loads(next(Path(tmp_path).rglob("summary.json")).read_text())
    assert summary["rounds"] == 1
    assert "privacy/guarantee" in summary
    # The printed ε is what dp-accounting alone computes from the events the run recorded.
    ledger = json.loads(next(Path(tmp_path).rglob("privacy_ledger.json")).read_text())
    independent = headline_epsilon(ledger, delta=ledger["delta"], accountant=ledger["accountant"])
    assert summary["privacy/epsilon"] == pytest.approx(independent, rel=0.01)
