"""DP-FedASGP strategy (Zhang et al. 2024): client processing, Eq. 16 weights, accounting."""

import math

import pytest
import torch

from fl_lightning.privacy.accountant import PrivacyAccountant
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.dp_fedasgp import DPFedASGP, asgp_weights
from fl_lightning.utils.rng import generator_for


def ctx(round_idx=0, total=100, d=10, cohort=(0, 1)):
    return RoundContext(
        round_idx=round_idx,
        total_rounds=total,
        seed=0,
        num_clients=10,
        cohort=list(cohort),
        expected_cohort_size=len(cohort),
        sample_rate=0.2,
        global_params=torch.zeros(d),
        client_config={},
    )


def test_gamma_sums_to_one_and_reduces_to_fedavg():
    n = [10.0, 30.0, 60.0]
    g = asgp_weights(n, [0.3, 0.9, 2.0])
    assert sum(g) == pytest.approx(1.0)
    assert g == pytest.approx(
        [0.5 * 0.1 + 0.5 * 0.3 / 3.2, 0.5 * 0.3 + 0.5 * 0.9 / 3.2, 0.5 * 0.6 + 0.5 * 2.0 / 3.2]
    )
    # Eq. 16 with mean losses: equal losses give ½ n_i/n + 1/(2k), not n_i/n.
    assert asgp_weights(n, [0.7, 0.7, 0.7]) == pytest.approx(
        [0.05 + 1 / 6, 0.15 + 1 / 6, 0.3 + 1 / 6]
    )


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_strategy_gamma_with_equal_losses(reduction):
    s = DPFedASGP(lr=1.0, loss_reduction=reduction)
    ups = [
        ClientUpdate(i, torch.full((3,), float(i + 1)), n, 0.7) for i, n in enumerate([10, 30, 60])
    ]
    agg = s.aggregate(ups, ctx(d=3), generator=generator_for(0, "s"))
    # sum: L_i = n_i × mean loss, so γ_i = n_i/n exactly; mean: ½ n_i/n + 1/(2k).
    mean_gam = [0.05 + 1 / 6, 0.15 + 1 / 6, 0.3 + 1 / 6]
    gam = [0.1, 0.3, 0.6] if reduction == "sum" else mean_gam
    expected = -sum(g * (i + 1) for i, g in enumerate(gam))
    assert torch.allclose(agg, torch.full((3,), expected))
    assert s.round_metrics["gamma_max"] == pytest.approx(max(gam))


def test_process_update_recovers_gradient_and_clips():
    s = DPFedASGP(epsilon=1e9, lr=0.1, clip_norm=1.0)  # negligible noise
    g_true = torch.tensor([3.0, -4.0] + [0.0] * 8)  # norm 5 -> clipped to 1
    up = ClientUpdate(client_id=0, delta=-0.1 * g_true.clone(), num_examples=5, loss=1.0)
    out = s.process_update(up, ctx(d=10), generator=generator_for(0, "c"))
    assert torch.allclose(out.delta, g_true / 5, atol=1e-5)
    assert out.metrics["clipped"] == 1.0


def test_selection_rate_follows_published_schedule():
    d, T = 100_000, 100
    s = DPFedASGP(epsilon=1e6, perturb_share=0.5, lr=1.0, clip_norm=1e9, sensitivity=1.0)
    base = torch.randn(d, generator=generator_for(1, "g"))
    rates = {}
    for t in (0, 49, 99):
        up = ClientUpdate(client_id=0, delta=-base.clone(), num_examples=1, loss=1.0)
        out = s.process_update(up, ctx(round_idx=t, total=T, d=d), generator=generator_for(t, "c"))
        rates[t] = out.metrics["selected_fraction"]
    assert rates[0] == pytest.approx(1 - 1 / T, abs=0.01)
    assert rates[49] == pytest.approx(0.5, abs=0.01)
    assert rates[99] == pytest.approx(0.1, abs=0.01)
    s_rev = DPFedASGP(epsilon=1e6, perturb_share=0.5, lr=1.0, threshold_schedule="reversed")
    up = ClientUpdate(client_id=0, delta=-base.clone(), num_examples=1, loss=1.0)
    out = s_rev.process_update(up, ctx(round_idx=0, total=T, d=d), generator=generator_for(9, "c"))
    assert out.metrics["selected_fraction"] == pytest.approx(0.1, abs=0.01)


def test_aggregate_is_minus_lr_weighted_sum():
    s = DPFedASGP(lr=0.5, loss_reduction="mean")
    g1, g2 = torch.ones(4), 2 * torch.ones(4)
    ups = [ClientUpdate(0, g1, 10, 1.0), ClientUpdate(1, g2, 30, 3.0)]
    agg = s.aggregate(ups, ctx(d=4), generator=generator_for(0, "s"))
    gam = asgp_weights([10, 30], [1.0, 3.0])
    assert torch.allclose(agg, -0.5 * (gam[0] * g1 + gam[1] * g2))


def test_published_reports_no_guarantee_and_sound_variant_reports_epsilon():
    acc = PrivacyAccountant()
    s = DPFedASGP()
    acc.record(s.round_privacy(ctx()))
    rep = acc.report()
    assert math.isinf(rep["privacy/epsilon"])
    assert rep["privacy/guarantee"].startswith("none: coordinates below the threshold are uploaded")
    sound = DPFedASGP(epsilon=0.5, noise_unselected=True, loss_weighting=False)
    sound.setup_strategy(num_clients=10, num_parameters=10_000, seed=0)
    acc2 = PrivacyAccountant()
    for _ in range(3):
        acc2.record(sound.round_privacy(ctx()))
    per_round = 2 * math.sqrt(10_000) / sound.mechanism.perturb_scale
    assert acc2.report()["privacy/epsilon"] == pytest.approx(3 * per_round)
    assert sound.mechanism.paper_epsilon() == pytest.approx(0.5)


def test_bad_options_raise():
    with pytest.raises(ValueError, match="strategy.threshold_schedule"):
        DPFedASGP(threshold_schedule="down")
    with pytest.raises(ValueError, match="strategy.significance"):
        DPFedASGP(significance="abs")
    with pytest.raises(ValueError, match="strategy.epsilon"):
        DPFedASGP(epsilon=0)
