"""Every configs/experiment/adp_fl/*.yaml runs two rounds (datasets that need the internet are
swapped for offline ones of the same shape, local training is cut to one step)."""

import os
from pathlib import Path

import pytest

from fl_lightning.cli import build_cli_class
from tests.conftest import offline_mnist_args

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs/experiment/adp_fl").glob("*.yaml"))
# One config per distinct (dataset, strategy, mechanism) in the fast suite; the rest differ only
# in values (and the shared test runs every config). FL_ALL_CONFIGS=1 runs them all here too.
FAST = {
    "mnist_offline_adp_fl",
    "mnist_offline_even_budget",
    "mnist_offline_fedbuff",
    "mnist_offline_fedasync",
    "table2_cifar10_adp_fl",
    "table2_emnist_even_budget",
    "table2_mnist_nonprivate",
    "table4_mnist_laplace_adp_fl",
    "table2_mnist_adp_fl_dirichlet",
}
SWAP = {
    "dataset: mnist\n": ["--data.dataset", "mnist_offline"],
    "dataset: cifar10\n": [
        "--data.dataset",
        "synthetic",
        "--data.dataset_options",
        '{"shape": [3, 32, 32], "num_classes": 10, "num_examples": 600}',
    ],
    "dataset: emnist\n": [
        "--data.dataset",
        "synthetic",
        "--data.dataset_options",
        '{"shape": [1, 28, 28], "num_classes": 62, "num_examples": 1200}',
    ],
}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_config_runs_two_rounds(config, tmp_path, monkeypatch):
    if config.stem not in FAST and not os.environ.get("FL_ALL_CONFIGS"):
        pytest.skip("same code path as a fast config; FL_ALL_CONFIGS=1 runs it")
    monkeypatch.chdir(ROOT)
    text = config.read_text()
    args = ["fit", "--config", str(config)]
    for key, swap in SWAP.items():
        if key in text:
            args += [*swap, "--data.download", "false"]
    if "dataset: mnist\n" in text or "dataset: mnist_offline\n" in text:
        args += offline_mnist_args()
    args += [
        "--trainer.max_steps",
        "2",
        "--trainer.logger",
        "false",
        "--trainer.default_root_dir",
        str(tmp_path),
        "--client.local_steps",
        "1",
        "--data.num_clients",
        "10",
        "--model.clients_per_round",
        "3",
        "--strategy.init_args.rounds",
        "50",  # keep the per-upload budgets of a long run
    ]
    cli = build_cli_class()(args)
    model = cli.model
    assert model.rounds_completed == 2
    report = model.accountant.report()
    private = model.strategy.upload.private
    assert (report["privacy/epsilon"] < float("inf")) == private
    if private:
        m = model.strategy.round_metrics
        assert m["eps_basic_max"] <= model.strategy.epsilon * (1 + 1e-9)
        assert report["privacy/epsilon_local"] == pytest.approx(m["eps_basic_max"])
