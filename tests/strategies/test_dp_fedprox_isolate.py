"""DP-FedProx sets the proximal term; Isolate keeps and evaluates one model per client."""

from __future__ import annotations

import pytest
import torch

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.records import ClientUpdate, LocalOverrides, RoundContext
from fl_lightning.strategies.dp_fedprox import DPFedProx
from fl_lightning.strategies.isolate import Isolate
from fl_lightning.testing import round_context


def _ctx(x: torch.Tensor, cohort: list[int]) -> RoundContext:
    return round_context(x, cohort, num_clients=2, sample_rate=1.0, expected_cohort_size=2.0)


def test_fedprox_sets_mu_for_the_local_loop() -> None:
    s = DPFedProx(mu=0.1)
    plan = s.configure_round(_ctx(torch.zeros(2), [0, 1]))
    assert plan.cohort == (0, 1) and plan.local == LocalOverrides(prox_mu=0.1)
    assert LocalTrainingConfig().with_overrides(plan.local.as_dict()).prox_mu == 0.1
    with pytest.raises(ValueError, match="strategy.mu"):
        DPFedProx(mu=-1.0)


def test_fedprox_with_central_dp_releases_the_clipped_noisy_mean() -> None:
    """Central DP is a component any summing strategy takes: DP-FedProx given one clips each
    upload, sums and adds σC noise over qN, and spends a client-level event; without one it is
    the DP-SGD clients' record-level DP only."""
    from fl_lightning.privacy.accounting.events import CohortSampling
    from fl_lightning.strategies.central_dp import CentralGaussian

    s = DPFedProx(mu=0.1, central_dp=CentralGaussian(clip_norm=0.5, noise_multiplier=0.0))
    ctx = _ctx(torch.zeros(2), [0, 1])
    ctx.sampling = CohortSampling("poisson", 1.0, 2)
    ups = [
        s.process_update(
            ClientUpdate(client_id=c, delta=torch.tensor([3.0, 4.0]), num_examples=5, loss=0.0),
            ctx,
            generator=torch.Generator(),
        )
        for c in (0, 1)
    ]
    agg, _ = s.aggregate(ups, ctx, generator=torch.Generator())
    assert torch.allclose(agg, torch.tensor([0.3, 0.4]))  # each clipped to 0.5, sum / qN = 2
    assert s.traits.private and s.traits.amplified_by_sampling
    assert len(s.round_privacy(ctx).client_level) == 1
    plain = DPFedProx(mu=0.1)
    assert not plain.traits.private and not plain.round_privacy(ctx).client_level


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
