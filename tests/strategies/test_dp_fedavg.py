"""DP-FedAvg (McMahan et al. 2018): clipping and the central Gaussian noise's statistics."""

from __future__ import annotations

import pytest
import torch

from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.dp_fedavg import DPFedAvg
from fl_lightning.testing import round_context


def _ctx(d: int, m: int, mode: str = "poisson") -> RoundContext:
    return round_context(d, range(m), num_clients=100, sampling=mode)


def test_clipping_bounds_each_update():
    s = DPFedAvg(clip_norm=0.5, noise_multiplier=0.0)
    u = ClientUpdate(client_id=0, delta=torch.full((100,), 1.0), num_examples=5, loss=0.0)
    out = s.process_update(u, _ctx(100, 1), generator=torch.Generator())
    assert float(out.delta.norm()) == pytest.approx(0.5, rel=1e-6)
    small = ClientUpdate(client_id=1, delta=torch.full((100,), 0.01), num_examples=5, loss=0.0)
    assert torch.equal(
        s.process_update(small, _ctx(100, 1), generator=None).delta, torch.full((100,), 0.01)
    )


def test_zero_updates_give_noise_of_predicted_variance():
    d, m, sigma, clip = 200_000, 8, 1.3, 0.7
    s = DPFedAvg(clip_norm=clip, noise_multiplier=sigma)
    updates = [
        ClientUpdate(client_id=i, delta=torch.zeros(d), num_examples=1, loss=0.0) for i in range(m)
    ]
    agg, metrics = s.aggregate(updates, _ctx(d, m), generator=torch.Generator().manual_seed(1))
    predicted = (sigma * clip / m) ** 2
    assert float(agg.mean()) == pytest.approx(0.0, abs=5 * (predicted / d) ** 0.5)
    # var estimate has relative sd sqrt(2/d) ≈ 0.3%; 2% is > 6 sd.
    assert float(agg.var()) == pytest.approx(predicted, rel=0.02)


def test_aggregate_divides_by_expected_cohort_size_not_actual():
    d = 10
    s = DPFedAvg(clip_norm=10.0, noise_multiplier=0.0)
    ctx = _ctx(d, 4)
    ctx.expected_cohort_size = 5.0
    updates = [
        ClientUpdate(client_id=i, delta=torch.ones(d), num_examples=1, loss=0.0) for i in range(4)
    ]
    agg, metrics = s.aggregate(updates, ctx, generator=torch.Generator())
    assert torch.allclose(agg, torch.full((d,), 4 / 5))


def test_round_privacy_is_one_sampled_gaussian_at_the_cohort_rate():
    s = DPFedAvg(clip_norm=1.0, noise_multiplier=1.1)
    spent = s.round_privacy(_ctx(10, 10))
    assert len(spent.client_level) == 1
    event = spent.client_level[0]
    assert (event.noise_multiplier, event.sample_rate, event.steps) == (1.1, 0.1, 1)
    assert event.population == 0  # Poisson cohorts: add/remove one client


def test_fixed_cohorts_give_a_without_replacement_event():
    s = DPFedAvg(clip_norm=1.0, noise_multiplier=1.1)
    event = s.round_privacy(_ctx(10, 10, mode="fixed")).client_level[0]
    assert (event.sample_rate, event.population, event.adjacency) == (0.1, 100, "replace-one")


def test_round_privacy_refuses_an_unknown_sampling():
    s = DPFedAvg(clip_norm=1.0, noise_multiplier=1.1)
    ctx = _ctx(10, 10)
    ctx.sampling = None
    with pytest.raises(ValueError, match="RoundContext.sampling"):
        s.round_privacy(ctx)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"clip_norm": 0}, "strategy.clip_norm"),
        ({"noise_multiplier": -1}, "strategy.noise_multiplier"),
    ],
)
def test_bad_settings_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        DPFedAvg(**kwargs)


def _fit(strategy):
    """3 rounds of 3 of 12 clients (plain SGD, no DP-SGD) with an RDP accountant
    (``tiny_run``): the final global weights, the accountant's report and the sampling."""
    from fl_lightning.utils.flat import trainable_parameters
    from tests.strategies.dpfl_agn_helpers import tiny_run

    module, _ = tiny_run(
        strategy, dp=False, optimizer="sgd", lr=0.1, local_steps=2, num_clients=12,
        num_examples=240, clients_per_round=3,
    )  # fmt: skip
    flat = torch.cat([p.detach().flatten() for p in trainable_parameters(module.global_net)])
    return flat, module.accountant.report(), module.sampler.mode


def test_fedavg_holding_central_dp_is_dp_fedavg():
    """Central DP is a component: FedAvg given a CentralGaussian trains the same model, spends
    the same ε and draws the same (Poisson) cohorts as DPFedAvg; FedAvg without it is another
    run, not private."""
    from fl_lightning.strategies.central_dp import CentralGaussian
    from fl_lightning.strategies.fedavg import FedAvg

    dp_w, dp_report, dp_mode = _fit(DPFedAvg(clip_norm=0.3, noise_multiplier=0.8))
    fa_w, fa_report, fa_mode = _fit(
        FedAvg(central_dp=CentralGaussian(clip_norm=0.3, noise_multiplier=0.8))
    )
    assert torch.equal(dp_w, fa_w)
    assert dp_mode == fa_mode == "poisson"
    assert dp_report["privacy/epsilon"] == fa_report["privacy/epsilon"] < float("inf")
    plain_w, plain_report, plain_mode = _fit(FedAvg())
    assert plain_mode == "fixed" and not torch.equal(plain_w, dp_w)
    assert plain_report["privacy/epsilon"] == float("inf")


def test_checkpoint_keeps_the_calibrated_sigma_in_both_layouts():
    """σ fixed at set-up resumes from a checkpoint, and from one written before central DP
    was a component (``{"noise_multiplier": σ}``)."""
    s = DPFedAvg(noise_multiplier=1.7)
    for state in (s.state_dict(), {"noise_multiplier": 1.7}):
        resumed = DPFedAvg(noise_multiplier=None)
        resumed.load_state_dict(state)
        assert resumed.noise_multiplier == 1.7 and resumed.state_dict() == s.state_dict()
