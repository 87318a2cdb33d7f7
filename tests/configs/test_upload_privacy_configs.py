"""Privacy on uploads is one pluggable slot (``strategy.init_args.local_dp``, issue 18): FedAvg
given the mechanism a named strategy builds from its flat arguments trains the same model and
reports the same ε as that strategy, on the same config and seed (as FedAvg + CentralGaussian
is DPFedAvg, tests/strategies/test_dp_fedavg.py)."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml

from tests.conftest import REPO

EXPERIMENTS = REPO / "configs" / "experiment"
STRATEGIES = REPO / "configs" / "strategy"

# (experiment, the named strategy's config, FedAvg's weighting, the component's class path)
CASES = {
    "spm_fl_ldp_fedavg": (
        EXPERIMENTS / "spm_fl" / "table02_mnist_few_clients.yaml",
        STRATEGIES / "spm_fl" / "spm_eps0.3.yaml",
        "uniform",
        "fl_lightning.strategies.per_coordinate_ldp.PerCoordinateLDP",
    ),
    "dp_fedasgp_dp_fedavg_local": (
        EXPERIMENTS / "dp_fedasgp" / "mnist_cnn.yaml",
        STRATEGIES / "dp_fedasgp" / "dp_fedavg_local.yaml",
        "num_examples",
        "fl_lightning.strategies.clipped_upload_noise.ClippedUploadNoise",
    ),
    "dp_fedasgp_dp_fedsnlc": (
        EXPERIMENTS / "dp_fedasgp" / "mnist_cnn.yaml",
        STRATEGIES / "dp_fedasgp" / "dp_fedsnlc.yaml",
        "num_examples",
        "fl_lightning.strategies.high_impact_noise.HighImpactNoise",
    ),
}


@pytest.fixture
def fit(run_experiment):
    """``fit(config, *extra) -> FederatedModule``: the model of a ``run_experiment`` run."""
    return lambda config, *extra: run_experiment(config, *extra).model


def _weights(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.global_net.parameters()])


@pytest.mark.parametrize("case", sorted(CASES))
def test_fedavg_holding_the_upload_mechanism_is_the_named_strategy(case, fit):
    experiment, named, weighting, component = CASES[case]
    init_args = yaml.safe_load(named.read_text())["init_args"]
    composed = {
        "class_path": "fl_lightning.strategies.fedavg.FedAvg",
        "init_args": {
            "weighting": weighting,
            "local_dp": {"class_path": component, "init_args": init_args},
        },
    }
    strategy = fit(experiment, "--strategy", str(named))
    fedavg = fit(experiment, "--strategy", json.dumps(composed))
    assert (
        type(strategy.strategy).__name__
        == yaml.safe_load(named.read_text())["class_path"].rsplit(".", 1)[1]
    )
    assert type(fedavg.strategy).__name__ == "FedAvg"
    assert type(fedavg.strategy.local_dp).__name__ == component.rsplit(".", 1)[1]
    assert fedavg.rounds_completed == strategy.rounds_completed == 2
    assert torch.equal(_weights(strategy), _weights(fedavg))
    a, b = strategy.accountant.report(), fedavg.accountant.report()
    assert a["privacy/epsilon"] == b["privacy/epsilon"]
    assert a["privacy/guarantee"] == b["privacy/guarantee"]
    assert strategy.strategy_metrics == fedavg.strategy_metrics
    # the ε is the mechanism's: finite for DP-FedAvg's clipped Laplace, ∞ with the reason for
    # SPM (sign only) and the DP-FedSNLC approximation (unnoised coordinates)
    assert math.isfinite(a["privacy/epsilon"]) == (case == "dp_fedasgp_dp_fedavg_local")
    # and it is not FedAvg's: without the component the same config trains another model
    plain = fit(
        experiment, "--strategy", json.dumps({**composed, "init_args": {"weighting": weighting}})
    )
    assert not torch.equal(_weights(plain), _weights(strategy))


def test_the_upload_guarantee_is_logged_at_the_start_of_fit(fit, tmp_path, caplog) -> None:
    """The server prints what ``local_dp`` guarantees (``guarantee_note``) and logs it as the
    ``strategy/guarantee`` hyperparameter; a strategy without ``local_dp`` logs none."""
    import logging

    config = CASES["spm_fl_ldp_fedavg"][0]
    csv = ["--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
           "--trainer.logger.save_dir", str(tmp_path / "logs")]  # fmt: skip
    # the logger rank_zero_info writes to: a CLI run earlier in this process set it to WARNING
    # (cli.quiet_console), so the level is set on it, not only on the root logger
    with caplog.at_level(logging.INFO, logger="lightning.pytorch.utilities.rank_zero"):
        model = fit(config, *csv)
    note = model.strategy.local_dp.guarantee_note()
    assert note and f"local_dp privacy: {note}" in caplog.text
    (hparams,) = (tmp_path / "logs").rglob("hparams.yaml")
    assert yaml.safe_load(hparams.read_text())["strategy/guarantee"] == note
    caplog.clear()
    with caplog.at_level(logging.INFO):
        fit(EXPERIMENTS / "quickstart.yaml")
    assert "local_dp privacy" not in caplog.text
