"""The round's plan (``records.py: RoundPlan``, ``server/round.py: plan_round``): typed local
overrides that reach each client as values, a context built anew at each step, and executors
that never see the strategy."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fl_lightning.client.module import ClientModule
from fl_lightning.data.datamodule import FederatedDataModule
from fl_lightning.models.mlp import MLP
from fl_lightning.records import LocalOverrides, RoundPlan
from fl_lightning.server.round import as_round_plan, plan_round
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.testing import Simulation, round_context
from tests.test_import_layers import import_graph


class LongerForSome(FedAvg):
    """FedAvg whose round gives every client 2 local steps and client 1 five (a per-client
    override), and a smaller lr to all."""

    def configure_round(self, ctx):  # noqa: ANN001, ANN201
        plan = super().configure_round(ctx).with_local(local_steps=2, lr=0.05)
        own = {1: LocalOverrides(local_steps=5)} if 1 in plan.cohort else {}
        return dataclasses.replace(plan, per_client=own)


def simulation(executor: str) -> Simulation:
    data = FederatedDataModule("synthetic", num_clients=4,
                               dataset_options={"num_examples": 120, "num_features": 6,
                                                "num_classes": 3})  # fmt: skip
    torch.manual_seed(0)
    client = ClientModule(MLP(input_dim=6, hidden=(8,), num_classes=3), num_classes=3,
                          local_steps=1, batch_size=8)  # fmt: skip
    return Simulation(LongerForSome(), data, client=client, rounds=1, executor=executor)


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_per_client_overrides_reach_each_client_as_values(executor):
    sim = simulation(executor)
    (result,) = sim.run()
    steps = {r.client_id: r.metrics["local_steps"] for r in result.updates}
    assert steps == {0: 2.0, 1: 5.0, 2: 2.0, 3: 2.0}
    assert sim.client.training_config.local_steps == 1  # the client's own config is untouched
    if executor == "vectorized":  # a client with its own overrides is not stacked
        assert "own local-training overrides" in str(sim.round.executor.last_fallback_reason)


def test_plan_round_builds_new_contexts_and_reads_the_plan():
    sampled = round_context(3, [0, 1, 2], num_clients=5)
    ctx, plan = plan_round(LongerForSome(), sampled)
    assert sampled.client_config == {} and sampled.cohort == [0, 1, 2]  # not mutated
    assert ctx is not sampled and ctx.cohort == [0, 1, 2]
    assert ctx.client_config == {"lr": 0.05, "local_steps": 2}
    assert plan.overrides_for(1) == LocalOverrides(lr=0.05, local_steps=5)
    assert plan.overrides_for(0) == LocalOverrides(lr=0.05, local_steps=2)


def test_a_mapping_is_the_short_form_and_bad_plans_are_refused():
    ctx = round_context(3, [0, 2])
    assert as_round_plan({"prox_mu": 0.1}, ctx) == RoundPlan((0, 2), LocalOverrides(prox_mu=0.1))
    with pytest.raises(ValueError, match=r"^strategy: unknown local-training overrides \['mu'\]"):
        as_round_plan({"mu": 0.1}, ctx)
    with pytest.raises(TypeError, match="^strategy: configure_round returned list"):
        as_round_plan([0, 2], ctx)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^strategy: per-client overrides for clients \[7\]"):
        RoundPlan((0, 2), per_client={7: LocalOverrides(lr=0.1)})
    plan = RoundPlan([2, 0])  # type: ignore[arg-type]
    assert plan.cohort == (2, 0) and plan.per_client == {}
    with pytest.raises(TypeError):
        plan.per_client[0] = LocalOverrides()  # type: ignore[index]


def test_the_executors_and_the_local_loop_never_import_a_strategy():
    graph = import_graph()
    for module in ("server.executor", "server.vectorized_executor", "client.local_loop"):
        assert not any(dst.startswith("strategies") for dst in graph[module]), module
