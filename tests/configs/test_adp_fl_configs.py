"""ADP-FL configs (paper 004): every private upload stays within its per-client ε, and the
accountant's local ε is the strategy's basic composition. All configs/experiment/adp_fl/*.yaml
run in test_experiments.py; these run one per mechanism with a ten-client federation."""

import pytest

from tests.conftest import REPO

CONFIGS = REPO / "configs" / "experiment" / "adp_fl"


@pytest.mark.parametrize(
    "name",
    ["mnist_offline_adp_fl", "table4_mnist_laplace_adp_fl", "table2_mnist_nonprivate"],
)
def test_per_client_budget_holds(name, run_experiment):
    run = run_experiment(
        CONFIGS / f"{name}.yaml",
        "--data.num_clients", "10",
        "--model.clients_per_round", "3",
        "--strategy.init_args.rounds", "50",  # keep the per-upload budgets of a long run
    )  # fmt: skip
    model = run.model
    assert model.rounds_completed == 2
    report = model.accountant.report()
    private = model.strategy.traits.private
    assert private == ("nonprivate" not in name)
    assert (report["privacy/epsilon"] < float("inf")) == private
    if private:
        m = model.strategy_metrics  # the last round's strategy/<key> metrics
        assert m["eps_basic_max"] <= model.strategy.uploads.epsilon * (1 + 1e-9)
        # The per-client headline: basic composition, or the optimal one where tighter.
        assert report["privacy/epsilon"] == report["privacy/epsilon_local_per_client"]
        assert report["privacy/epsilon"] <= m["eps_basic_max"] * (1 + 1e-9)
