"""cpSGD pieces (Agarwal et al. 2018): rotation, quantisation, Theorem 1."""

import math

import pytest
import torch

from fl_lightning.privacy.mechanisms.binomial import (
    binomial_mechanism_epsilon,
    calibrate_trials,
    fwht,
    next_power_of_two,
    random_signs,
    rotate,
    stochastic_quantize,
    unrotate,
)
from fl_lightning.utils.rng import generator_for


def test_fwht_matches_dense_hadamard_and_is_involution():
    n = 16
    h = torch.tensor([[1.0]])
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    x = torch.randn(n, generator=generator_for(0, "x"))
    assert torch.allclose(fwht(x), h @ x / 4, atol=1e-5)
    assert torch.allclose(fwht(fwht(x)), x, atol=1e-5)


def test_rotation_round_trip_preserves_norm():
    x = torch.randn(1000, generator=generator_for(1, "x"))
    signs = random_signs(next_power_of_two(1000), generator=generator_for(2, "s"))
    y = rotate(x, signs)
    assert float(y.norm()) == pytest.approx(float(x.norm()), rel=1e-5)
    assert torch.allclose(unrotate(y, signs, 1000), x, atol=1e-5)


def test_stochastic_quantisation_is_unbiased():
    y = torch.linspace(-0.9, 0.9, 50)
    reps = 4000
    gen = generator_for(3, "q")
    acc = torch.zeros(50)
    for _ in range(reps // 100):
        batch = y.repeat(100)
        u = stochastic_quantize(batch, levels=4, bound=1.0, generator=gen)
        acc += (-1.0 + u * (2.0 / 3.0)).view(100, 50).sum(0)
    assert torch.allclose(acc / reps, y, atol=0.03)


def test_theorem1_epsilon_decreases_in_trials_and_checks_condition():
    kw = dict(
        p=0.5,
        delta=1e-5,
        dimension=1024,
        l1_sensitivity=50.0,
        l2_sensitivity=5.0,
        linf_sensitivity=2.0,
    )
    assert math.isinf(binomial_mechanism_epsilon(trials=10, **kw))  # N p(1-p) too small
    e1 = binomial_mechanism_epsilon(trials=10_000, **kw)
    e2 = binomial_mechanism_epsilon(trials=100_000, **kw)
    assert 0 < e2 < e1 < math.inf
    # Leading term Δ2 sqrt(2 ln(1.25/δ)) / sqrt(N p (1-p)) dominates for large N.
    lead = 5.0 * math.sqrt(2 * math.log(1.25e5)) / math.sqrt(1e8 * 0.25)
    assert binomial_mechanism_epsilon(trials=100_000_000, **kw) == pytest.approx(lead, rel=0.05)


def test_calibrate_trials_hits_target():
    sens = (50.0, 5.0, 2.0)
    n = calibrate_trials(target_epsilon=1.0, p=0.5, delta=1e-5, dimension=1024, sensitivities=sens)
    eps = binomial_mechanism_epsilon(
        trials=n,
        p=0.5,
        delta=1e-5,
        dimension=1024,
        l1_sensitivity=50.0,
        l2_sensitivity=5.0,
        linf_sensitivity=2.0,
    )
    assert eps <= 1.0
    assert (
        binomial_mechanism_epsilon(
            trials=int(n * 0.9),
            p=0.5,
            delta=1e-5,
            dimension=1024,
            l1_sensitivity=50.0,
            l2_sensitivity=5.0,
            linf_sensitivity=2.0,
        )
        > 1.0
    )
