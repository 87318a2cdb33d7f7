"""The server's-view contract over every registered strategy and the extra cases
(``fl_lightning/testing/server_view.py``, issue 55): what reaches the server side of a round is
no more than ``Strategy.server_view`` declares. Under SecAgg that is masked vectors of the
survivors only: no per-client loss, example count or metric, nothing of a client that dropped,
no ``train/loss``. The contract fails on the delivery before issue 55 (every dispatched
client's upload, loss and metrics in ``RoundUpdates``) and on strategies that declare more
protection than they give."""

from __future__ import annotations

import logging

import pytest
import torch

from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.privacy.guarantee.server_view import ServerView
from fl_lightning.strategies.adaptive_clipping import AdaptiveClipping
from fl_lightning.strategies.base import Strategy
from fl_lightning.strategies.ddp_fedavg import DDPFedAvg
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.testing import Simulation
from fl_lightning.testing.server_view import (
    ServerSide,
    logged_per_client,
    recorded_server_side,
    server_view_problems,
)
from tests.testing.cases import case, case_names, client, simulation

# Beside the registry's defaults, every client of the six in each round: SecAgg with clients
# that drop (pairwise masking with everyone, and SecAgg+ with two neighbours, whose split
# survivors' graphs abort rounds), and a clip that moves every round (Andrew et al. 2021).
EXTRA = {
    "DDPFedAvg+dropout": lambda: DDPFedAvg(dropout_rate=0.3, min_survivors=1),
    "DDPFedAvg+SecAgg+": lambda: DDPFedAvg(dropout_rate=0.3, neighbours=2, min_survivors=1),
    "FedAvg+AdaptiveClipping": lambda: FedAvg(
        weighting="uniform",
        central_dp=AdaptiveClipping(clip_norm=0.05, noise_multiplier=1.0, count_noise_std=1.0),
    ),
}


def recorded(name: str, data, rounds: int = 2) -> tuple[Strategy, list[ServerSide], list]:
    if name in EXTRA:
        logging.disable(logging.WARNING)
        try:
            sim = Simulation(EXTRA[name](), data, client=client(False), rounds=rounds,
                             privacy=PrivacyAccountant("rdp", 1e-5), seed=3)  # fmt: skip
        finally:
            logging.disable(logging.NOTSET)
    else:
        sim = simulation(name, data, rounds=rounds)
    with recorded_server_side() as sides:
        results = sim.run()
    return sim.strategy, sides, results


@pytest.mark.parametrize("name", [*case_names(), *EXTRA])
def test_the_server_side_receives_only_the_declared_view(name, data):
    strategy, sides, results = recorded(name, data)
    assert sides and all(side.trained for side in sides)  # the boundary was crossed
    assert server_view_problems(strategy, sides) == []
    assert [logged_per_client(strategy, r.metrics) for r in results] == [[]] * len(results)


def test_a_private_strategy_declares_what_protects_its_uploads():
    for name in case_names():
        strategy = case(name).build()
        if strategy.traits.private:
            assert strategy.server_view.uploads != "updates", name
    assert DDPFedAvg().server_view == ServerView("secure sums", per_client_values=False, bits=16)


def test_under_secagg_nothing_of_a_dropped_client_or_an_aborted_round_arrives(data):
    strategy, sides, _ = recorded("DDPFedAvg+SecAgg+", data, rounds=4)
    dp = strategy.dp
    dropped = aborted = 0
    for side in sides:
        arrived, _ = dp.arrivals(side.ctx)
        dropped += len(side.ctx.cohort) - len(arrived)
        aborted += not dp.survivors(side.ctx)
        assert {u.client_id for u in side.arrived} == set(dp.survivors(side.ctx))
    assert dropped > 0 and aborted > 0  # the recording has both to show


def test_the_contract_fails_on_the_delivery_before_issue_55(data, monkeypatch):
    """Before, every processed upload reached RoundUpdates: the loss and metrics of every
    dispatched client, those that dropped included, and ``train/loss`` averaged them."""
    monkeypatch.setattr(Strategy, "deliver", lambda self, update, ctx: update)
    strategy, sides, results = recorded("DDPFedAvg+dropout", data)
    problems = "\n".join(server_view_problems(strategy, sides))
    assert "training loss" in problems and "example count" in problems
    assert "a client that dropped" in problems
    assert "train/loss" in logged_per_client(strategy, results[0].metrics)


class _Unclipped(FedAvg):
    """Declares clipped updates and clips nothing."""

    @property
    def server_view(self) -> ServerView:
        return ServerView("clipped updates", clip_norm=1e-3)


class _Unnoised(FedAvg):
    """Declares noised uploads and uploads the updates as trained."""

    @property
    def server_view(self) -> ServerView:
        return ServerView("noised uploads")


@pytest.mark.parametrize("cls", [_Unclipped, _Unnoised])
def test_the_contract_fails_on_a_strategy_that_declares_more_than_it_gives(cls, data):
    sim = Simulation(cls(), data, client=client(False), rounds=1, clients_per_round=3)
    with recorded_server_side() as sides:
        sim.run()
    assert len(server_view_problems(sim.strategy, sides)) == 3  # every upload of the round
    assert all(torch.count_nonzero(u.delta) for side in sides for u in side.arrived)
