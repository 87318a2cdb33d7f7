"""``fl_lightning.testing``: ``simulate`` runs the rounds ``fit`` runs (the same
``FederatedRound.run_round``), without Lightning; ``round_context`` builds a hook's context."""

from __future__ import annotations

import pytest
import torch

from fl_lightning.client.module import ClientModule
from fl_lightning.data.datamodule import FederatedDataModule
from fl_lightning.models.mlp import MLP
from fl_lightning.privacy.accounting.budget import BudgetError
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.strategies.dp_fedavg import DPFedAvg
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.testing import Simulation, registered_strategies, round_context, simulate
from fl_lightning.utils.flat import flatten_into, trainable_parameters
from tests.strategies.dpfl_agn_helpers import tiny_run


def tiny_client() -> ClientModule:
    torch.manual_seed(0)  # what tiny_run's seed_everything(0) gives the network
    return ClientModule(MLP(input_dim=8, hidden=(16,), num_classes=3), num_classes=3,
                        optimizer="sgd", lr=0.1, local_steps=1, batch_size=8)  # fmt: skip


def tiny_data() -> FederatedDataModule:
    return FederatedDataModule(
        dataset="synthetic", num_clients=4, partitioner="iid", val_fraction=0.1,
        dataset_options={"num_examples": 400, "num_features": 8, "num_classes": 3},
    )  # fmt: skip


def test_simulate_gives_the_weights_and_epsilon_of_a_lightning_fit():
    module, _ = tiny_run(DPFedAvg(noise_multiplier=1.0), rounds=2, dp=False, optimizer="sgd",
                         lr=0.1)  # fmt: skip
    results = simulate(DPFedAvg(noise_multiplier=1.0), tiny_data(), 2, client=tiny_client(),
                       privacy=PrivacyAccountant("rdp", 1e-5), clients_per_round=4)  # fmt: skip
    params = trainable_parameters(module.global_net)
    fitted = flatten_into(params, torch.empty(sum(p.numel() for p in params)))
    assert torch.equal(results[-1].weights, fitted)
    assert results[-1].epsilon == pytest.approx(module.accountant.epsilon, rel=1e-12)
    assert [r.round_idx for r in results] == [0, 1]
    assert results[0].metrics["round/cohort_size"] == len(results[0].cohort)
    assert {"train/loss", "privacy/epsilon"} <= set(results[0].metrics)


def test_the_budget_stops_a_simulation_before_the_round_that_would_exceed_it():
    sim = Simulation(DPFedAvg(noise_multiplier=1.0), tiny_data(), client=tiny_client(),
                     rounds=20, privacy=PrivacyAccountant("rdp", 1e-5, target_epsilon=6.0),
                     clients_per_round=4)  # fmt: skip
    results = sim.run()
    assert results[-1].stopped and results[-1].stopped.startswith("Stopping before round")
    assert all(r.epsilon <= 6.0 for r in results) and len(results) < 20
    with pytest.raises(RuntimeError, match="simulation: stopped before round"):
        sim.step()
    tight = PrivacyAccountant("rdp", 1e-5, target_epsilon=0.01)
    with pytest.raises(BudgetError, match="cannot pay for the first round") as raised:
        simulate(DPFedAvg(noise_multiplier=1.0), tiny_data(), 3, client=tiny_client(),
                 privacy=tight, clients_per_round=4)  # fmt: skip
    assert raised.value.__notes__ == ["round 0 failed"]


def test_simulation_refuses_what_it_cannot_run():
    data = tiny_data()
    with pytest.raises(ValueError, match=r"^rounds: must be >= 1, got 0$"):
        Simulation(FedAvg(), data, client=tiny_client(), rounds=0)
    with pytest.raises(ValueError, match=r"^reduction: expected 'declared'"):
        Simulation(FedAvg(), data, client=tiny_client(), rounds=1, reduction="all")  # type: ignore[arg-type]
    sim = Simulation(FedAvg(), data, client=tiny_client(), rounds=1)
    assert sim.run(5)[0].round_idx == 0 and sim.run() == []
    with pytest.raises(RuntimeError, match="all 1 planned rounds ran"):
        sim.step()


def test_round_context_follows_the_cohort_and_sampling():
    ctx = round_context(5, [0, 3], num_clients=10, round_idx=2, total_rounds=4)
    assert torch.equal(ctx.global_params, torch.zeros(5)) and ctx.cohort == [0, 3]
    assert (ctx.sample_rate, ctx.expected_cohort_size) == (0.2, 2.0)
    assert ctx.cohort_sampling().mode == "fixed" and ctx.cohort_sampling().population == 10
    poisson = round_context(torch.ones(3), [1], sampling="poisson", sample_rate=0.5)
    assert poisson.num_clients == 2 and poisson.expected_cohort_size == 1.0
    with pytest.raises(ValueError, match="RoundContext.sampling: unset"):
        round_context(3, [0], sampling=None).cohort_sampling()


def test_every_strategy_class_is_registered():
    names = {c.__name__ for c in registered_strategies()}
    assert {"FedAvg", "DPFedAvg", "FedBuff", "AsyncStrategy", "Isolate", "Strategy"} <= names
    assert len(names) == len(registered_strategies())  # one class a name
