"""GCFL configs (paper 001): record-level DP-SGD guarantees, every method of Table II
(configs/strategy/{gcfl_published,fedavg,dp_fedprox,dp_scaffold,dp_fedexp,isolate}.yaml) within
ε = 2 on the offline MNIST experiment, and the Throughput callback's report. All experiment
configs run in test_experiments.py."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO

CONFIGS = REPO / "configs" / "experiment" / "gcfl"
METHODS = ["gcfl_published", "fedavg", "dp_fedprox", "dp_scaffold", "dp_fedexp", "isolate"]


def _csv_logger(tmp_path) -> str:
    logger = {
        "class_path": "lightning.pytorch.loggers.CSVLogger",
        "init_args": {"save_dir": str(tmp_path / "logs"), "name": "", "version": ""},
    }
    return json.dumps(logger)


def test_record_level_guarantee_and_throughput(run_experiment, tmp_path):
    run = run_experiment(CONFIGS / "table2_mnist.yaml", "--trainer.logger", _csv_logger(tmp_path))
    assert run.summary["rounds"] == 2
    assert "record-level" in run.summary["privacy/guarantee"]
    throughput = json.loads((tmp_path / "logs" / "throughput.json").read_text())
    assert throughput["throughput/test_samples_per_s"] > 0


@pytest.mark.parametrize("method", METHODS)
def test_each_method_stays_within_the_budget(method, run_experiment):
    """On the real MNIST test set (4,000 images a client) with the config's budget stop."""
    run = run_experiment(
        CONFIGS / "mnist_offline_eps2.yaml",
        f"--strategy=configs/strategy/{method}.yaml",
        "--client.batch_size=8",
        "--privacy.target_epsilon=2.0",
    )
    assert run.summary["rounds"] == 2
    assert run.summary["privacy/epsilon"] <= 2.0 + 1e-6
