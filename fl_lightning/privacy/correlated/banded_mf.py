"""Optimised banded Toeplitz factorisation (``factorization: banded``).

C is lower-triangular, banded (p bands: c_j = 0 for j ≥ p) and Toeplitz, c_0 = 1, with
c_1 … c_{p−1} chosen to minimise the loss Δ²·error for the run's n rounds, k participations and
separation b (Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta, Xu, NeurIPS 2023,
"(Amplified) Banded Matrix Factorization", arXiv:2306.08153: banded C minimising the squared
error under its multi-epoch sensitivity; McKenna, ICLR 2025, "Scaling up the banded matrix
factorization mechanism", arXiv:2405.15913: the banded Toeplitz parametrisation, O(p)
parameters).
The banded square root (``bsr``, Kalinin & Lampert 2024) is the same family with fixed
coefficients binom(2j, j)/4ʲ; it is the starting point of the optimisation, so the optimised
loss is never above it (tested).

With p ≤ b the columns a client touches never overlap, so Δ² = Σ_{j<k} ‖C e_{jb}‖² exactly
(:mod:`~fl_lightning.privacy.correlated.toeplitz_mf`), whatever the coefficients' signs; p > b is
refused. The noise streams like the banded square root's: w_t = z_t − Σ_{j=1}^{p−1} c_j w_{t−j}, the
last p − 1 noise vectors as state (O(p·d), checkpointed).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from fl_lightning.privacy.correlated.toeplitz_mf import check_error, toeplitz_loss


def _sqrt_coefficients(p: int) -> np.ndarray:
    c = np.ones(p)
    for j in range(1, p):
        c[j] = c[j - 1] * (2 * j - 1) / (2 * j)
    return c


def lbfgs(
    params: list[torch.Tensor], loss_fn: Callable[[], torch.Tensor], *, iterations: int = 300
) -> float:
    """Minimises ``loss_fn()`` over ``params`` with L-BFGS (strong Wolfe line search), float64,
    deterministic on CPU; returns the final loss."""
    opt = torch.optim.LBFGS(
        params,
        lr=1.0,
        max_iter=iterations,
        tolerance_grad=1e-12,
        tolerance_change=1e-15,
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    opt.step(closure)
    with torch.no_grad():
        return float(loss_fn())


def optimise_banded(
    n: int, k: int, b: int, bands: int, *, error: str = "mean", iterations: int = 300
) -> np.ndarray:
    """c_0 … c_{p−1} (c_0 = 1) of the banded Toeplitz C minimising Δ²·error for n rounds and at
    most k participations ≥ b apart (module docstring). ``bands`` p must satisfy 1 ≤ p ≤ b."""
    check_error(error)
    if bands < 1 or bands > max(1, min(b, n)):
        raise ValueError(
            f"strategy.bands: the optimised banded factorisation needs 1 <= p <= b = {min(b, n)} "
            f"(columns b apart must not overlap for its exact sensitivity), got {bands}"
        )
    if bands == 1:
        return np.ones(1)
    tail = torch.tensor(_sqrt_coefficients(bands)[1:], dtype=torch.float64, requires_grad=True)
    one = torch.ones(1, dtype=torch.float64)

    def loss() -> torch.Tensor:
        return toeplitz_loss(torch.cat([one, tail]), n, k, b, error)

    start = float(loss().detach())
    final = lbfgs([tail], loss, iterations=iterations)
    coefficients = np.concatenate([[1.0], tail.detach().numpy()])
    if not np.isfinite(final) or final > start:  # never worse than the square root
        return _sqrt_coefficients(bands)
    return coefficients


__all__ = ["lbfgs", "optimise_banded"]
