"""One-run empirical privacy (privacy/audit/one_run.py): the Gaussian-fit estimate of Andrew et al.
2024 and the lower bound of Steinke, Nasr & Jagielski 2023, on the Gaussian mechanism alone
(canary directions summed, Gaussian noise added, no training), where the true ε is known."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from fl_lightning.privacy.audit.one_run import (
    gaussian_fit_epsilon,
    gaussian_pair_delta,
    gaussian_pair_epsilon,
    steinke_epsilon,
    steinke_lower_bound,
    steinke_p_value,
)

DELTA = 1e-5


def analytic_epsilon(sigma: float, delta: float = DELTA) -> float:
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.GaussianDpEvent(sigma))
    return float(acc.get_epsilon(delta))


def gaussian_mechanism_scores(sigma: float, *, m: int = 500, d: int = 10_000, seed: int = 0):
    """The sum of the inserted canaries' unit directions plus N(0, σ²I), scored by cosine."""
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((m, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    inserted = rng.random(m) < 0.5
    release = u[inserted].sum(axis=0) + sigma * rng.standard_normal(d)
    return u @ release / np.linalg.norm(release), inserted


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0, 5.0])
def test_pair_of_equal_variance_gaussians_is_the_gaussian_mechanism(sigma):
    assert gaussian_pair_epsilon((1 / sigma, 1.0), (0.0, 1.0), DELTA) == pytest.approx(
        analytic_epsilon(sigma), rel=1e-4
    )


def test_pair_delta_of_unequal_variances_matches_numerical_integration():
    p, q, eps = (0.3, 1.3), (0.0, 1.0), 0.7
    x = np.linspace(-30, 30, 2_000_001)
    density = np.maximum(stats.norm.pdf(x, *p) - math.exp(eps) * stats.norm.pdf(x, *q), 0)
    assert gaussian_pair_delta(eps, p, q) == pytest.approx(np.trapezoid(density, x), rel=1e-6)


@pytest.mark.parametrize("sigma", [1.0, 3.0])
def test_estimate_recovers_the_analytic_epsilon_within_its_interval(sigma):
    scores, inserted = gaussian_mechanism_scores(sigma)
    fit = gaussian_fit_epsilon(scores[inserted], scores[~inserted], DELTA, bootstrap=100)
    assert fit.low <= analytic_epsilon(sigma) <= fit.high
    assert fit.low <= fit.epsilon <= fit.high


def test_non_private_release_gives_a_large_estimate_and_bound():
    scores, inserted = gaussian_mechanism_scores(0.02)
    fit = gaussian_fit_epsilon(scores[inserted], scores[~inserted], DELTA, bootstrap=50)
    assert fit.low > 20
    bound = steinke_lower_bound(scores, inserted, DELTA)
    assert bound.correct == bound.guesses  # every guess right
    assert bound.epsilon > 3


def test_heavy_noise_gives_about_zero():
    scores, inserted = gaussian_mechanism_scores(200.0)
    fit = gaussian_fit_epsilon(scores[inserted], scores[~inserted], DELTA, bootstrap=50)
    assert fit.epsilon < 0.5 and fit.low < 0.1
    bound = steinke_lower_bound(scores, inserted, DELTA).epsilon
    assert bound <= analytic_epsilon(200.0) < 0.05  # valid, and about 0


@pytest.mark.parametrize("sigma", [0.7, 1.0, 2.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lower_bound_never_exceeds_the_true_epsilon(sigma, seed):
    scores, inserted = gaussian_mechanism_scores(sigma, seed=seed)
    assert steinke_lower_bound(scores, inserted, DELTA).epsilon <= analytic_epsilon(sigma)


def test_steinke_p_value_is_the_binomial_tail_without_delta_and_monotone():
    m, r, v = 1000, 100, 80
    q = 1 / (1 + math.exp(-1.0))
    assert steinke_p_value(m, r, v, 1.0, 0.0) == pytest.approx(stats.binom.sf(v - 1, r, q))
    assert steinke_p_value(m, r, v, 1.0, 1e-5) > steinke_p_value(m, r, v, 1.0, 0.0)
    eps = steinke_epsilon(m, r, v, 1e-5, beta=0.05)
    assert steinke_p_value(m, r, v, eps, 1e-5) < 0.05 <= steinke_p_value(m, r, v, eps + 1e-3, 1e-5)
    assert steinke_epsilon(m, r, r // 2, 1e-5) == 0.0  # chance accuracy proves nothing


def test_gdp_mu_inverts_the_gaussian_curve_and_infinity_stays_infinite():
    from fl_lightning.privacy.audit.one_run import gdp_mu

    for sigma in (0.7, 2.0):
        assert gdp_mu(analytic_epsilon(sigma), DELTA) == pytest.approx(1 / sigma, rel=1e-3)
    assert gdp_mu(math.inf, DELTA) == math.inf and gdp_mu(0.0, DELTA) == 0.0


def test_planned_guesses_read_the_claim_and_are_all_of_them_without_privacy():
    from fl_lightning.privacy.audit.one_run import expected_correct, planned_guess_fraction

    assert planned_guess_fraction(1000, math.inf, DELTA)[0] == 1.0
    fraction, expected = planned_guess_fraction(1000, 4.0, DELTA)
    assert fraction < 0.5 and 0 < expected < 4.0
    # the expected precision at the top of N(μ, 1) vs N(0, 1) grows as the guesses shrink
    assert expected_correct(1000, 10, 1.0) / 20 > expected_correct(1000, 200, 1.0) / 400 > 0.5


@pytest.mark.parametrize("seed", range(3))
def test_gaussian_curve_bound_is_valid_and_not_below_the_dp_bound(seed):
    """On the Gaussian mechanism (whose curve is μ-GDP, μ = 1/σ), the Gaussian-curve reading of
    the guesses never rejects the true μ, and it is at least Steinke et al.'s (ε, δ) bound."""
    from fl_lightning.privacy.audit.one_run import gdp_lower_bound

    sigma = 1.0
    scores, inserted = gaussian_mechanism_scores(sigma, m=400, d=4000, seed=seed)
    dp = steinke_lower_bound(scores, inserted, DELTA, guess_fraction=0.2)
    curve = gdp_lower_bound(400, dp.guesses, dp.correct, DELTA)
    assert curve.mu <= 1 / sigma and curve.epsilon <= analytic_epsilon(sigma)
    assert curve.epsilon >= dp.epsilon - 1e-6
