"""Accountant golden numbers: our ε against Opacus and dp-accounting, computed independently."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from opacus.accountants import PRVAccountant, RDPAccountant
from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

from fl_lightning.privacy.accounting.analysis import (
    calibrate_noise_multiplier,
    epsilon,
    rdp_screen_epsilon,
    scaled,
)
from fl_lightning.privacy.accounting.events import SampledGaussian

DELTA = 1e-5


def test_rdp_matches_opacus_rdp_analysis():
    # Independent: the closed-form RDP of the sampled Gaussian, converted by Opacus' analysis.
    orders = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))
    rdp = compute_rdp(q=0.01, noise_multiplier=1.1, steps=1000, orders=orders)
    expected, _ = get_privacy_spent(orders=orders, rdp=rdp, delta=DELTA)
    ours = epsilon([SampledGaussian(1.1, 0.01, 1000)], DELTA, "rdp")
    assert ours == pytest.approx(expected, rel=1e-6)


def test_rdp_agrees_with_dp_accounting_rdp_on_the_abadi_mnist_setting():
    # Abadi et al. 2016 MNIST: batch 256 of 60,000, σ = 1.1, 60 epochs, δ = 1e-5. A second,
    # independent RDP implementation (dp-accounting's) must give the same ε up to its order grid.
    q, steps = 256 / 60_000, 60 * 235
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(1.1)), steps)
    ours = epsilon([SampledGaussian(1.1, q, steps)], DELTA, "rdp")
    assert ours == pytest.approx(acc.get_epsilon(DELTA), rel=0.05)
    assert 2.0 < ours < 3.5


def test_pld_matches_dp_accounting():
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(dp_accounting.PoissonSampledDpEvent(0.05, dp_accounting.GaussianDpEvent(0.9)), 300)
    ours = epsilon([SampledGaussian(0.9, 0.05, 300)], DELTA, "pld")
    assert ours == pytest.approx(acc.get_epsilon(DELTA), rel=1e-6)


def test_prv_matches_opacus_prv_and_is_below_rdp():
    acc = PRVAccountant()
    acc.history = [(1.0, 0.02, 500)]
    ours = epsilon([SampledGaussian(1.0, 0.02, 500)], DELTA, "prv")
    assert ours == pytest.approx(acc.get_epsilon(DELTA), rel=1e-3)
    assert ours <= epsilon([SampledGaussian(1.0, 0.02, 500)], DELTA, "rdp")


@pytest.mark.parametrize(
    ("history", "delta"),
    [
        (((1.0, 0.02, 500, 0),), DELTA),
        (((1.0, 0.1, 30, 0),), 1e-3),  # a short history: the eps_error floor of the width
        (((1.2, 0.05, 100, 0), (0.8, 0.3, 7, 0), (1.2, 0.05, 40, 0)), 1e-6),
    ],
)
def test_prv_is_opacus_prv_to_the_last_digit(history, delta):
    """The PRV accountant computes Opacus' discretisation domain from cached per-step RDP
    (``analysis._prv_domain``): the same domain, so the same ε, exactly, as Opacus' own."""
    from fl_lightning.privacy.accounting import analysis

    stock = PRVAccountant()
    stock.history = [(s, q, k) for s, q, k, _ in history]
    prvs_and_steps = (_prvs(stock.history), [k for _, _, k in stock.history])
    expected = stock._get_domain(*prvs_and_steps, eps_error=0.01, delta_error=delta / 1000)
    ours = analysis._prv_accountant_class()()._get_domain(
        *prvs_and_steps, eps_error=0.01, delta_error=delta / 1000
    )
    fields = ("t_min", "t_max", "size", "shifts")
    assert [getattr(ours, f) for f in fields] == [getattr(expected, f) for f in fields]
    assert epsilon(history, delta, "prv") == stock.get_epsilon(delta)


def _prvs(history: list[tuple[float, float, int]]) -> list:
    from opacus.accountants.analysis.prv import PoissonSubsampledGaussianPRV

    return [PoissonSubsampledGaussianPRV(q, s) for s, q, _ in history]


def test_three_accountants_agree_roughly():
    events = [SampledGaussian(1.0, 0.1, 200)]
    values = {name: epsilon(events, DELTA, name) for name in ("rdp", "prv", "pld")}
    assert max(values.values()) / min(values.values()) < 1.35, values


def test_mixed_history_equals_opacus_history():
    events = [SampledGaussian(1.2, 0.05, 100), SampledGaussian(0.8, 0.05, 50)]
    acc = RDPAccountant()
    acc.history = [(1.2, 0.05, 100), (0.8, 0.05, 50)]
    assert epsilon(events, DELTA, "rdp") == pytest.approx(acc.get_epsilon(DELTA), rel=1e-9)


def test_zero_noise_is_infinite_and_empty_is_zero():
    assert epsilon([SampledGaussian(0.0, 0.1, 1)], DELTA, "rdp") == math.inf
    assert epsilon([], DELTA, "rdp") == 0.0


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_calibration_meets_target_tightly(accountant):
    sigma = calibrate_noise_multiplier(
        [[SampledGaussian(1.0, 0.1, 100)]], target_epsilon=2.0, delta=DELTA, accountant=accountant
    )
    eps = epsilon([SampledGaussian(sigma, 0.1, 100)], DELTA, accountant)
    assert eps <= 2.0
    assert epsilon([SampledGaussian(sigma - 0.02, 0.1, 100)], DELTA, accountant) > 2.0 * 0.97


def test_calibration_over_many_histories_is_the_bisection_of_their_max():
    """Calibrating for several clients (each its own rate and steps) gives the σ of bisecting
    the max over them, with the same bracket and tolerance: the search only stops asking the
    other clients once one exceeds the target, it decides nothing differently."""
    histories = [[SampledGaussian(1.0, 8 / n, 3 * math.ceil(n / 8))] for n in (9, 20, 57, 140)]
    target = 3.0

    def worst(sigma: float) -> float:
        return max(epsilon(scaled(h, sigma), DELTA, "rdp") for h in histories)

    low, high = 0.05, 1.0
    while worst(high) > target:
        low, high = high, high * 2
    while high - low > 0.01:
        mid = (low + high) / 2
        low, high = (mid, high) if worst(mid) > target else (low, mid)
    ours = calibrate_noise_multiplier(
        histories, target_epsilon=target, delta=DELTA, accountant="rdp"
    )
    assert ours == high
    assert worst(ours) <= target < worst(ours - 0.01)


def test_unknown_accountant_is_refused():
    with pytest.raises(ValueError, match="privacy.accountant"):
        epsilon([SampledGaussian(1.0, 0.1, 1)], DELTA, "moments")


@pytest.mark.parametrize(
    ("loss", "delta"),
    [
        (("gaussian", 1.1), 1e-5),
        (("gaussian", 0.3), 1e-6),  # ε > 1: the bracket doubles past 1
        (("laplace", 0.5), 1e-3),
    ],
)
def test_single_release_epsilon_is_the_root_of_the_hockey_stick_divergence(loss, delta):
    from dp_accounting.pld import privacy_loss_mechanism as plm

    from fl_lightning.privacy.accounting.analysis import gaussian_epsilon, single_release_epsilon

    kind, scale = loss
    pl = (
        plm.GaussianPrivacyLoss(standard_deviation=scale, sensitivity=1.0)
        if kind == "gaussian"
        else plm.LaplacePrivacyLoss(parameter=scale, sensitivity=1.0)
    )
    eps = single_release_epsilon(pl, delta)
    assert eps > 0
    assert pl.get_delta_for_epsilon(eps) == pytest.approx(delta, rel=1e-6)
    assert pl.get_delta_for_epsilon(eps * 0.999) > delta  # the smallest such ε
    if kind == "gaussian":  # the accountant's exact single Gaussian is the same solver
        assert gaussian_epsilon(scale, delta) == eps
    assert single_release_epsilon(pl, 1.0) == 0.0  # δ(0) ≤ δ: nothing to pay


def test_gaussian_epsilon_is_cached():
    from fl_lightning.privacy.accounting.analysis import gaussian_epsilon

    gaussian_epsilon(0.9, 1e-5)
    hits = gaussian_epsilon.cache_info().hits
    gaussian_epsilon(0.9, 1e-5)
    assert gaussian_epsilon.cache_info().hits == hits + 1


@pytest.mark.parametrize(
    "history",
    [
        ((1.1, 0.01, 1000, 0),),
        ((0.7, 0.25, 40, 0), (2.0, 0.5, 10, 0)),
        ((1.2, 0.3, 5, 100),),  # fixed-size: its dominating pair's σ/2
        ((3.0, 1.0, 7, 0),),
    ],
)
def test_the_screening_bound_is_rdp_at_integer_orders_and_never_below_the_reported_epsilon(
    history,
):
    """``rdp_screen_epsilon`` may stand in for a client that cannot be the worst only if it
    bounds that client's ε from above on every accountant: RDP at Opacus' integer orders is
    Opacus' RDP at fewer orders, so no smaller than at all of them; here also above PLD and
    PRV, which the accountant then computes only for the clients the screen cannot rule out."""
    screen = rdp_screen_epsilon(history, DELTA)
    orders = [a for a in RDPAccountant.DEFAULT_ALPHAS if float(a).is_integer()]
    assert orders and len(orders) < len(RDPAccountant.DEFAULT_ALPHAS)
    dominated = [(s / 2 if n else s, q, k) for s, q, k, n in history]
    rdp = sum(compute_rdp(q=q, noise_multiplier=s, steps=k, orders=orders) for s, q, k in dominated)
    assert screen == pytest.approx(get_privacy_spent(orders=orders, rdp=rdp, delta=DELTA)[0])
    for accountant in ("rdp", "pld", "prv"):
        assert screen >= epsilon(history, DELTA, accountant) * (1 - 1e-9)
