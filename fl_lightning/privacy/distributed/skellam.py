"""The distributed Skellam mechanism (Agarwal, Kairouz & Liu, NeurIPS 2021, "The Skellam
Mechanism for Differentially Private Federated Learning").

Each client adds Sk(λ, λ) = Poisson(λ) − Poisson(λ) noise per coordinate, λ = σ²/2 (variance
σ²); Skellam variables are closed under summation, so n shares sum to Sk(nλ, nλ) of variance
μ = nσ² exactly (no τ term, unlike the discrete Gaussian). Poisson draws are PyTorch's
(``torch.poisson``, from the generator handed in).

Privacy (their RDP of the multi-dimensional Skellam mechanism, §3; the form implemented in
``distributed_dp/accounting_utils.py: _skellam_rdp``, written on the integer grid, scale 1):
ε(α) = α Δ₂²/(2μ) + min(((2α − 1) Δ₂² + 6Δ₁) / (4μ²), 3Δ₁/(2μ)).
"""

from __future__ import annotations

import math

import torch

from fl_lightning.privacy.distributed.noise import DistributedNoise, EncodedSensitivity


def sample_skellam(n: int, variance: float, *, generator: torch.Generator) -> torch.Tensor:
    """``n`` draws of Sk(σ²/2, σ²/2): mean 0, variance σ² = ``variance``."""
    if variance < 0:
        raise ValueError(f"Skellam: variance must be ≥ 0, got {variance}")
    if variance == 0 or n == 0:
        return torch.zeros(n, dtype=torch.int64)
    rates = torch.full((2, n), variance / 2.0, dtype=torch.float64, device=generator.device)
    draws = torch.poisson(rates, generator=generator)  # on its input's device: the generator's
    return (draws[0] - draws[1]).to(torch.int64)


class DistributedSkellam(DistributedNoise):
    """Each client adds Sk(σ²/2, σ²/2); the sum Sk(nσ²/2, nσ²/2) is priced by its RDP."""

    name = "skellam"
    words = "distributed Skellam (Agarwal, Kairouz & Liu 2021)"

    def sample(self, n: int, variance: float, *, generator: torch.Generator) -> torch.Tensor:
        return sample_skellam(n, variance, generator=generator)

    def rdp(self, order: int, sens: EncodedSensitivity) -> float:
        if sens.clients == 0:
            return 0.0
        mu = sens.clients * sens.local_variance
        if mu <= 0:
            return math.inf
        a, l2, l1 = float(order), sens.l2, sens.l1
        return a * l2**2 / (2.0 * mu) + min(
            ((2.0 * a - 1.0) * l2**2 + 6.0 * l1) / (4.0 * mu**2), 3.0 * l1 / (2.0 * mu)
        )
