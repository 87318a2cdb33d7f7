"""DP-FedProx sets the proximal term; Isolate keeps and evaluates one model per client."""

from __future__ import annotations

import pytest
import torch

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.dp_fedprox import DPFedProx
from fl_lightning.strategies.isolate import Isolate


def _ctx(x: torch.Tensor, cohort: list[int]) -> RoundContext:
    return RoundContext(0, 1, 0, 2, cohort, 2.0, 1.0, x)


def test_fedprox_sets_mu_for_the_local_loop() -> None:
    s = DPFedProx(mu=0.1)
    overrides = s.configure_round(_ctx(torch.zeros(2), [0, 1]))
    assert LocalTrainingConfig().with_overrides(overrides).prox_mu == 0.1
    with pytest.raises(ValueError, match="strategy.mu"):
        DPFedProx(mu=-1.0)


def test_isolate_clients_continue_from_their_own_models() -> None:
    s = Isolate()
    x0 = torch.tensor([1.0, 1.0])
    ctx = _ctx(x0.clone(), [0, 1])
    assert s.evaluation_models() is None
    torch.testing.assert_close(s.configure_client(0, ctx).start_params, x0)
    ups = [
        ClientUpdate(0, torch.tensor([1.0, 0.0]), 5, 0.0),
        ClientUpdate(1, torch.tensor([0.0, -1.0]), 5, 0.0),
    ]
    agg, metrics = s.aggregate(ups, ctx, generator=torch.Generator())
    assert torch.equal(agg, torch.zeros(2))  # the global model is not trained
    ctx2 = _ctx(x0.clone(), [1])
    torch.testing.assert_close(s.configure_client(1, ctx2).start_params, torch.tensor([1.0, 0.0]))
    s.aggregate(
        [ClientUpdate(1, torch.tensor([0.5, 0.5]), 5, 0.0)], ctx2, generator=torch.Generator()
    )
    models = s.evaluation_models()
    torch.testing.assert_close(models[0], torch.tensor([2.0, 1.0]))
    torch.testing.assert_close(models[1], torch.tensor([1.5, 0.5]))
    t = Isolate()
    t.load_state_dict(s.state_dict())
    torch.testing.assert_close(t.evaluation_models()[1], models[1])
