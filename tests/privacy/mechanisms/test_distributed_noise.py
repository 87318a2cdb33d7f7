"""The distributed noise samplers against their closed-form pmfs, and their RDP bounds against
the limits they must reach (mechanisms/ddg.py, mechanisms/skellam.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from fl_lightning.privacy.distributed.ddg import ddg_tau, sample_discrete_gaussian
from fl_lightning.privacy.distributed.noise import EncodedSensitivity
from fl_lightning.privacy.distributed.registry import (
    distributed_noise,
    distributed_noise_names,
)
from fl_lightning.privacy.distributed.skellam import sample_skellam

N = 200_000


def chi_square_p(draws: torch.Tensor, pmf: np.ndarray, support: np.ndarray) -> float:
    """p-value of the draws against ``pmf`` on ``support`` (the tails pooled into the ends)."""
    x = draws.clamp(int(support[0]), int(support[-1])).numpy() - support[0]
    counts = np.bincount(x, minlength=len(support)).astype(float)
    expected = pmf / pmf.sum() * len(draws)
    return float(stats.chisquare(counts, expected).pvalue)


@pytest.mark.parametrize("variance", [0.6, 2.0, 9.0])
def test_discrete_gaussian_matches_its_pmf(variance):
    draws = sample_discrete_gaussian(N, variance, generator=torch.Generator().manual_seed(0))
    support = np.arange(-int(8 * math.sqrt(variance)) - 2, int(8 * math.sqrt(variance)) + 3)
    pmf = np.exp(-(support.astype(float) ** 2) / (2 * variance))
    assert chi_square_p(draws, pmf, support) > 1e-3
    # the negative control: a rounded continuous Gaussian of the same variance is rejected at 0.6
    if variance < 1:
        g = torch.Generator().manual_seed(1)
        rounded = torch.round(torch.randn(N, generator=g) * math.sqrt(variance)).long()
        assert chi_square_p(rounded, pmf, support) < 1e-6


def test_discrete_gaussian_large_variance_moments():
    v = 2.5e5
    draws = sample_discrete_gaussian(N, v, generator=torch.Generator().manual_seed(2)).double()
    assert abs(float(draws.mean())) < 4 * math.sqrt(v / N)
    assert float(draws.var()) == pytest.approx(v, rel=4 * math.sqrt(2 / N))


@pytest.mark.parametrize("variance", [1.0, 6.0])
def test_skellam_matches_its_pmf(variance):
    draws = sample_skellam(N, variance, generator=torch.Generator().manual_seed(3))
    support = np.arange(-int(8 * math.sqrt(variance)) - 2, int(8 * math.sqrt(variance)) + 3)
    pmf = stats.skellam.pmf(support, variance / 2, variance / 2)
    assert chi_square_p(draws, pmf, support) > 1e-3


def test_draws_come_from_the_generator_only():
    for name in distributed_noise_names():
        noise = distributed_noise(name)
        a = noise.sample(1000, 4.0, generator=torch.Generator().manual_seed(9))
        b = noise.sample(1000, 4.0, generator=torch.Generator().manual_seed(9))
        c = noise.sample(1000, 4.0, generator=torch.Generator().manual_seed(10))
        assert a.dtype == torch.int64 and torch.equal(a, b) and not torch.equal(a, c)


def test_unknown_mechanism_names_the_field():
    with pytest.raises(ValueError, match=r"^strategy\.mechanism: unknown 'gauss'"):
        distributed_noise("gauss")


def test_rdp_reaches_the_gaussian_limit():
    """With many shares of large variance, τ vanishes and Skellam's correction too: both RDPs
    tend to the Gaussian's α Δ₂² / (2 n σ²)."""
    sens = EncodedSensitivity(l2=100.0, l1=100.0 * 32, dim=1024, local_variance=1e4, clients=10)
    gaussian = 8 * 100.0**2 / (2 * 10 * 1e4)
    assert ddg_tau(1e4, 10) < 1e-300
    assert distributed_noise("ddg").rdp(8, sens) == pytest.approx(gaussian, rel=1e-12)
    assert distributed_noise("skellam").rdp(8, sens) == pytest.approx(gaussian, rel=0.05)
    assert distributed_noise("skellam").rdp(8, sens) > gaussian
    # small shares: τ is no longer negligible and DDG costs more than the Gaussian
    small = EncodedSensitivity(l2=1.0, l1=32.0, dim=1024, local_variance=0.05, clients=10)
    assert distributed_noise("ddg").rdp(8, small) > 8 / (2 * 10 * 0.05)
