"""DP-FedASGP configs (paper 000): the published algorithm has no guarantee (ε = ∞, with the
reason), and every method of Table IV (configs/strategy/dp_fedasgp/*.yaml) runs on the MNIST
experiment; the sound variants report a finite ε. All experiment configs run in
test_experiments.py."""

import math

import pytest

from tests.conftest import REPO

EXPERIMENT = REPO / "configs" / "experiment" / "dp_fedasgp" / "mnist_cnn.yaml"
STRATEGIES = sorted((REPO / "configs" / "strategy" / "dp_fedasgp").glob("*.yaml"))
SOUND = ("dp_fedasgp_sound", "dp_fedavg_local", "cpsgd")


def test_published_dp_fedasgp_has_no_guarantee(run_experiment):
    report = run_experiment(EXPERIMENT).model.accountant.report()
    assert math.isinf(report["privacy/epsilon"])
    assert report["privacy/guarantee"].startswith("none: coordinates below the threshold")


@pytest.mark.parametrize("path", STRATEGIES, ids=lambda p: p.stem)
def test_strategy_group_runs_two_rounds(path, run_experiment):
    run = run_experiment(EXPERIMENT, "--strategy", str(path))
    report = run.model.accountant.report()
    assert run.model.rounds_completed == 2
    assert "privacy/guarantee" in report
    if path.stem in SOUND:
        assert 0 < report["privacy/epsilon"] < math.inf
