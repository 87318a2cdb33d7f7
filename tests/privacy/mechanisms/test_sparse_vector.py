"""Sparse-vector perturbation of DP-FedASGP (Zhang et al. 2024, Eq. 1, 13, 14)."""

import math

import pytest
import torch

from fl_lightning.privacy.mechanisms.sparse_vector import (
    BudgetSplit,
    SparseVectorPerturbation,
    defensible_epsilon,
    quantile_threshold,
    split_budget,
    threshold_quantile,
)
from fl_lightning.utils.rng import generator_for


def test_split_budget_ratio_and_total():
    s = split_budget(epsilon=1.0, q=8.0, perturb_share=0.9)
    assert s.total == pytest.approx(1.0)
    assert s.epsilon3 == pytest.approx(0.9)
    assert s.epsilon1 / s.epsilon2 == pytest.approx(8.0 ** (2 / 3))
    q1 = split_budget(epsilon=0.5, q=1.0, perturb_share=0.8)
    assert q1.epsilon1 == pytest.approx(q1.epsilon2)


def test_threshold_schedules():
    assert threshold_quantile(round_number=1, total_rounds=100, schedule="published") == 0.01
    assert threshold_quantile(round_number=95, total_rounds=100, schedule="published") == 0.9
    assert threshold_quantile(round_number=1, total_rounds=100, schedule="reversed") == 0.9
    assert threshold_quantile(round_number=100, total_rounds=100, schedule="reversed") == 0.01
    with pytest.raises(ValueError):
        threshold_quantile(round_number=1, total_rounds=10, schedule="up")


def test_quantile_threshold_matches_sorted_index():
    x = torch.randn(1001, generator=generator_for(0, "q"))
    for level in (0.0, 0.1, 0.5, 0.9, 1.0):
        k = min(max(math.ceil(level * 1001), 1), 1001)
        assert quantile_threshold(x, level) == float(torch.sort(x).values[k - 1])


def _tiny_selection_noise(**kw):
    # ε1, ε2 huge so α, β ≈ 0; ε3 moderate for the perturbation noise.
    return SparseVectorPerturbation(split=BudgetSplit(1e7, 1e7, 1.0), **kw)


def test_laplace_noise_only_on_selected_coordinates():
    d = 200_000
    g = torch.randn(d, generator=generator_for(1, "g")) * 0.01
    mech = _tiny_selection_noise(sensitivity=1.0)
    thr = quantile_threshold(g, 0.5)
    out, mask = mech.privatize_with_threshold(g, thr, generator=generator_for(2, "n"))
    noise = out - g
    assert torch.equal(noise[~mask], torch.zeros_like(noise[~mask]))  # unselected: exact
    sel = noise[mask]
    assert sel.numel() == pytest.approx(d / 2, rel=0.01)
    b = mech.perturb_scale  # Lap(b): mean 0, var 2b², E|x| = b
    assert float(sel.mean()) == pytest.approx(0.0, abs=0.02)
    assert float(sel.var()) == pytest.approx(2 * b * b, rel=0.03)
    assert float(sel.abs().mean()) == pytest.approx(b, rel=0.02)


@pytest.mark.parametrize("level", [0.01, 0.3, 0.9])
def test_selection_rate_follows_threshold(level):
    g = torch.randn(100_000, generator=generator_for(3, "g"))
    mech = _tiny_selection_noise()
    thr = quantile_threshold(g, level)
    _, mask = mech.privatize_with_threshold(g, thr, generator=generator_for(4, "n"))
    assert float(mask.float().mean()) == pytest.approx(1 - level, abs=0.01)


def test_magnitude_selects_both_signs_and_noise_unselected_noises_all():
    g = torch.randn(50_000, generator=generator_for(5, "g"))
    mech = _tiny_selection_noise(significance="magnitude", noise_unselected=True)
    thr = quantile_threshold(g.abs(), 0.9)
    out, mask = mech.privatize_with_threshold(g, thr, generator=generator_for(6, "n"))
    assert bool((g[mask] < 0).any()) and bool((g[mask] > 0).any())
    assert bool(((out - g)[~mask] != 0).all())


def test_selection_noise_blurs_the_test():
    g = torch.zeros(100_000)
    mech = SparseVectorPerturbation(split=BudgetSplit(0.05, 0.05, 1.0))
    _, mask = mech.privatize_with_threshold(g, 0.0, generator=generator_for(7, "n"))
    # α has scale 20: about half of the zero scores pass whatever β is (|β| << scale rarely).
    assert 0.05 < float(mask.float().mean()) < 0.95


def test_defensible_epsilon():
    assert defensible_epsilon(laplace_scale=2.0, clip_norm=1.0, dimension=100) == 10.0
