"""DP-FedASGP strategy (Zhang et al. 2024): client processing, Eq. 16 weights, accounting."""

import math

import pytest
import torch

from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.records import ClientUpdate
from fl_lightning.strategies.dp_fedasgp import DPFedASGP, asgp_weights
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.testing import round_context
from fl_lightning.utils.rng import generator_for


def ctx(round_idx=0, total=100, d=10, cohort=(0, 1)):
    return round_context(
        d,
        cohort,
        num_clients=10,
        round_idx=round_idx,
        total_rounds=total,
        sample_rate=0.2,
        expected_cohort_size=len(cohort),
        sampling=None,
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
    agg, metrics = s.aggregate(ups, ctx(d=3), generator=generator_for(0, "s"))
    # sum: L_i = n_i × mean loss, so γ_i = n_i/n exactly; mean: ½ n_i/n + 1/(2k).
    mean_gam = [0.05 + 1 / 6, 0.15 + 1 / 6, 0.3 + 1 / 6]
    gam = [0.1, 0.3, 0.6] if reduction == "sum" else mean_gam
    expected = -sum(g * (i + 1) for i, g in enumerate(gam))
    assert torch.allclose(agg, torch.full((3,), expected))
    assert metrics["gamma_max"] == pytest.approx(max(gam))


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
    agg, metrics = s.aggregate(ups, ctx(d=4), generator=generator_for(0, "s"))
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
    sound.setup_federation(FederationSpec(num_clients=10, num_parameters=10_000, seed=0))
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


def _selected_fraction(s: DPFedASGP, base: torch.Tensor, t: int, total: int, seed: int) -> float:
    up = ClientUpdate(client_id=0, delta=-base.clone(), num_examples=1, loss=1.0)
    out = s.process_update(
        up, ctx(round_idx=t, total=total, d=base.numel()), generator=generator_for(seed, "c")
    )
    return out.metrics["selected_fraction"], out.metrics["selection_recall"]


def test_selection_epsilon_makes_the_test_follow_the_quantile():
    """Eq. 1/13/14: with selection noise far below the coordinates' spread (a large selection
    budget), the selected fraction is 1 − r_t and every coordinate above λ_t is selected; with
    the published split (ε1 = ε2 = 5 % of ε) at Δ S = C the test is a coin flip."""
    d, T = 20_000, 10
    base = torch.randn(d, generator=generator_for(3, "g"))
    base /= base.norm()  # a clipped gradient: coordinates about 1/sqrt(d) = 0.007
    tracking = DPFedASGP(epsilon=1.0, selection_epsilon=1e6, lr=1.0)
    published = DPFedASGP(epsilon=4.0, lr=1.0)  # ε1 = 0.2: α's scale 5 against 0.007
    for t in (1, 4, 8):
        level = min((t + 1) / T, 0.9)
        frac, recall = _selected_fraction(tracking, base, t, T, seed=t)
        assert frac == pytest.approx(1 - level, abs=0.01) and recall > 0.98
        frac, recall = _selected_fraction(published, base, t, T, seed=t)
        # random: the recall of the coordinates above λ_t is the selected fraction itself
        assert recall == pytest.approx(frac, abs=0.03)


def test_selection_epsilon_accounting():
    s = DPFedASGP(epsilon=0.5, selection_epsilon=8.0, q=8.0)
    split = s.mechanism.split
    assert split.epsilon3 == pytest.approx(0.5)  # ε is ε3 alone
    assert split.epsilon1 + split.epsilon2 == pytest.approx(8.0)
    assert split.epsilon1 / split.epsilon2 == pytest.approx(8.0 ** (2 / 3))  # ε1 : ε2 = q^{2/3} : 1
    assert s.mechanism.paper_epsilon() == pytest.approx(8.5)  # the paper's per-round figure
    assert s.mechanism.query_scale == pytest.approx(8.0 / split.epsilon1)  # α ~ Lap(qΔS/ε1)
    # as published the upload has no guarantee, whatever the selection budget
    acc = PrivacyAccountant()
    acc.record(s.round_privacy(ctx()))
    assert math.isinf(acc.report()["privacy/epsilon"])
    # the sound variant noises every coordinate with Lap(ΔS/ε3): ε = 2C·sqrt(d)/(ΔS/ε3) a round,
    # set by ε3 alone (the selection is not in the output)
    for sel, eps3 in ((None, 0.25), (8.0, 0.5), (64.0, 0.5)):
        v = DPFedASGP(
            epsilon=0.5,
            perturb_share=0.5,
            selection_epsilon=sel,
            noise_unselected=True,
            loss_weighting=False,
        )
        v.setup_federation(FederationSpec(num_clients=10, num_parameters=10_000, seed=0))
        assert v.defensible_round_epsilon() == pytest.approx(2 * 100 * eps3)
    with pytest.raises(ValueError, match="strategy.selection_epsilon"):
        DPFedASGP(selection_epsilon=0.0)
