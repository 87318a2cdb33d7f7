"""The distributed discrete Gaussian (Kairouz, Liu & Steinke, ICML 2021, "The Distributed
Discrete Gaussian Mechanism for Federated Learning with Secure Aggregation").

Sampling: Canonne, Kamath & Steinke 2020 ("The Discrete Gaussian for Differential Privacy"),
Algorithm 3: with t = ⌊σ⌋ + 1, draw Y from the discrete Laplace of scale t (a difference of two
geometric variables, Algorithm 2) and accept it with probability exp(−(|Y| − σ²/t)² / (2σ²));
accepted draws are exactly N_ℤ(0, σ²) when the Bernoulli draws are exact. Here they are
float64 uniforms compared with the float64 acceptance probability (as the reference
implementation, ``distributed_dp/discrete_gaussian_utils.py``, does), vectorised.

Privacy of the sum of n shares of variance σ² each (Kairouz et al. 2021):

* Thm. 1: the sum is close to N_ℤ(0, nσ²): τ = 10·Σ_{k=1}^{n−1} exp(−2π²σ²·k/(k+1));
* Prop. 14 / Eq. 17: the release of a vector of sensitivity (Δ₁, Δ₂) plus that sum is
  (α, ε(α))-RDP with ε(α) = min(α Δ₂²/(2nσ²) + τd,
  α/2·(Δ₂²/(nσ²) + 2Δ₁τ/√(nσ²) + τ²d), α/2·(Δ₂/√(nσ²) + τ√d)²).
"""

from __future__ import annotations

import math

import torch

from fl_lightning.privacy.distributed.noise import DistributedNoise, EncodedSensitivity


def sample_discrete_laplace(n: int, scale: float, *, generator: torch.Generator) -> torch.Tensor:
    """``n`` draws with P(y) ∝ exp(−|y|/scale): G₁ − G₂ for geometric G on {0, 1, …} with
    success probability 1 − exp(−1/scale) (CKS 2020, Algorithm 2, by inversion)."""
    u = 1.0 - torch.rand(
        2, n, dtype=torch.float64, generator=generator, device=generator.device
    )  # (0, 1]
    g = torch.floor(-scale * torch.log(u))
    return (g[0] - g[1]).to(torch.int64)


def sample_discrete_gaussian(
    n: int, variance: float, *, generator: torch.Generator
) -> torch.Tensor:
    """``n`` draws of N_ℤ(0, ``variance``) (CKS 2020, Algorithm 3; module docstring)."""
    if variance < 0:
        raise ValueError(f"discrete Gaussian: variance must be ≥ 0, got {variance}")
    if variance == 0 or n == 0:
        return torch.zeros(n, dtype=torch.int64)
    t = math.floor(math.sqrt(variance)) + 1
    out: list[torch.Tensor] = []
    needed = n
    while needed > 0:
        m = int(needed * 1.6) + 64  # acceptance ≥ about 0.7 for every σ
        y = sample_discrete_laplace(m, t, generator=generator)
        u = torch.rand(m, dtype=torch.float64, generator=generator, device=generator.device)
        keep = u < torch.exp(-((y.abs().double() - variance / t) ** 2) / (2.0 * variance))
        accepted = y[keep][:needed]
        out.append(accepted)
        needed -= accepted.numel()
    return torch.cat(out)


def ddg_tau(local_variance: float, clients: int) -> float:
    """τ of Kairouz et al. 2021, Thm. 1, for ``clients`` shares of variance σ² each."""
    return 10.0 * sum(
        math.exp(-2.0 * math.pi**2 * local_variance * k / (k + 1)) for k in range(1, clients)
    )


class DistributedDiscreteGaussian(DistributedNoise):
    """Each client adds N_ℤ(0, σ²); the sum is priced by Prop. 14 with Thm. 1's τ."""

    name = "ddg"
    words = "distributed discrete Gaussian (Kairouz, Liu & Steinke 2021)"

    def sample(self, n: int, variance: float, *, generator: torch.Generator) -> torch.Tensor:
        return sample_discrete_gaussian(n, variance, generator=generator)

    def rdp(self, order: int, sens: EncodedSensitivity) -> float:
        """Kairouz et al. 2021, Prop. 14 / Eq. 17 (module docstring); ∞ without noise."""
        if sens.clients == 0:
            return 0.0
        if sens.local_variance <= 0:
            return math.inf
        std = math.sqrt(sens.clients * sens.local_variance)
        tau = ddg_tau(sens.local_variance, sens.clients)
        l2, l1, d, a = sens.l2 / std, sens.l1 / std, sens.dim, float(order)
        return min(
            a / 2.0 * l2**2 + tau * d,
            a / 2.0 * (l2**2 + 2.0 * l1 * tau + tau**2 * d),
            a / 2.0 * (l2 + math.sqrt(d) * tau) ** 2,
        )
