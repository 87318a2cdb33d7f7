"""Buffered Linear Toeplitz factorisation (``factorization: blt``).

A BLT(θ, ω) with m buffers is the lower-triangular Toeplitz C with c_0 = 1 and
c_t = Σ_{i<m} ω_i θ_i^{t−1} for t ≥ 1 (McMahan, Xu & Zhang, FOCS 2024, "Efficient and
near-optimal noise generation for streaming differential privacy", the BLT definition). The
noise w = C⁻¹·z streams from C itself with m buffers: z_t = Σ_j c_j w_{t−j}, so

    w_t = z_t − Σ_i ω_i S_{i,t},   S_{i,t+1} = θ_i S_{i,t} + w_t,   S_{i,0} = 0,

S_{i,t} = Σ_{j≥1} θ_i^{j−1} w_{t−j} (the buffers of their streaming multiplication by C⁻¹): O(m·d)
memory whatever the number of rounds, the buffers checkpointed.

The parameters are optimised for the run's n rounds, k participations and separation b by minimising
the loss Δ²·error (mean or max squared prefix-sum error) with the exact multi-participation Δ =
‖C·Σ_{j<k} e_{jb}‖, valid because θ_i ∈ (0, 1), ω_i ≥ 0 and Σω_i ≤ 1 make the coefficients
non-negative and non-increasing (Kalinin & Lampert 2024, Thm. 2; the multi-participation BLT loss of
McMahan, Pillutla, Steinke, Thakurta, Xu, Zhang, "Don't Use Tree Aggregation, Use BLTs", EMNLP
Industry 2024). The parametrisation keeps those constraints: θ = sigmoid(u), ω =
sigmoid(s)·softmax(v).
"""

from __future__ import annotations

import numpy as np
import torch

from fl_lightning.privacy.correlated.banded_mf import lbfgs
from fl_lightning.privacy.correlated.toeplitz_mf import check_error, toeplitz_loss


def blt_coefficients_torch(theta: torch.Tensor, omega: torch.Tensor, n: int) -> torch.Tensor:
    """:func:`blt_coefficients`, differentiable in θ and ω."""
    t = torch.arange(n - 1, dtype=torch.float64)
    tail = (omega[None, :] * theta[None, :] ** t[:, None]).sum(1)
    return torch.cat([torch.ones(1, dtype=torch.float64), tail])


def blt_coefficients(theta: np.ndarray, omega: np.ndarray, n: int) -> np.ndarray:
    """c_0 … c_{n−1} of BLT(θ, ω): c_0 = 1, c_t = Σ_i ω_i θ_i^{t−1}."""
    t = np.arange(n - 1)
    tail = (np.asarray(omega)[None, :] * np.asarray(theta)[None, :] ** t[:, None]).sum(1)
    return np.concatenate([[1.0], tail])


def _params(u: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    theta = torch.sigmoid(u)
    omega = torch.sigmoid(s) * torch.softmax(v, 0)
    return theta, omega


def optimise_blt(
    n: int, k: int, b: int, buffers: int, *, error: str = "mean", iterations: int = 200
) -> tuple[np.ndarray, np.ndarray]:
    """(θ, ω) of the BLT with ``buffers`` buffers minimising Δ²·error for n rounds and at most k
    participations ≥ b apart (module docstring); the best of a few deterministic starts
    (θ spread geometrically towards 1 on the horizon's scale)."""
    check_error(error)
    if buffers < 1:
        raise ValueError(f"strategy.buffers: must be >= 1, got {buffers}")
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for spread in (1.0, 0.5, 2.0):
        # θ_i = 1 − n^{−spread·(i+1)/m}: time scales from a few rounds up to the horizon
        theta0 = 1.0 - np.power(float(max(n, 2)), -spread * (np.arange(buffers) + 1) / buffers)
        theta0 = np.clip(theta0, 0.05, 1 - 1e-6)
        u = torch.tensor(np.log(theta0 / (1 - theta0)), dtype=torch.float64, requires_grad=True)
        s = torch.tensor([0.0], dtype=torch.float64, requires_grad=True)
        v = torch.zeros(buffers, dtype=torch.float64, requires_grad=True)

        def loss(u: torch.Tensor = u, s: torch.Tensor = s, v: torch.Tensor = v) -> torch.Tensor:
            theta, omega = _params(u, s[0], v)
            return toeplitz_loss(blt_coefficients_torch(theta, omega, n), n, k, b, error)

        value = lbfgs([u, s, v], loss, iterations=iterations)
        if np.isfinite(value) and (best is None or value < best[0]):
            theta, omega = _params(u.detach(), s.detach()[0], v.detach())
            best = (value, theta.numpy().copy(), omega.numpy().copy())
    assert best is not None
    return best[1], best[2]


__all__ = ["blt_coefficients", "blt_coefficients_torch", "optimise_blt"]
