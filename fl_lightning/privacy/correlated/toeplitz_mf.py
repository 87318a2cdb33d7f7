"""Lower-triangular Toeplitz factorisations of the prefix-sum workload: their loss and exact
multi-participation sensitivity, shared by the optimised banded factorisation
(:mod:`~fl_lightning.privacy.correlated.banded_mf`) and the BLT
(:mod:`~fl_lightning.privacy.correlated.blt`).

C is lower-triangular Toeplitz with first column (c_0, c_1, …) (c_0 = 1 without loss of
generality: scaling C scales Δ and B = A·C⁻¹ inversely). C⁻¹ and B = A·C⁻¹ are lower-triangular
Toeplitz too; B's first column is s_t = Σ_{j≤t} r_j with r the first column of C⁻¹, so row t of B
is (s_t, …, s_0) and

* mean error  (1/n)·‖B‖_F² = (1/n)·Σ_j (n − j)·s_j²,
* max error   max_t ‖B_t‖² = Σ_{j<n} s_j²  (the last row),

in units of σ² (the mean and max squared errors of Choquette-Choo et al., NeurIPS 2023, and McMahan,
Xu & Zhang, FOCS 2024; jax_privacy's ``toeplitz.mean_error``/``max_error``). The loss the
factorisations minimise is Δ²·error, the squared RMSE (mean) or the squared worst-round error (max)
of the prefix sums at noise multiplier 1 (the noise of C·x + z is σΔ, the error of B·z is σ²·error).

Sensitivity (k participations at least b apart). With non-negative, non-increasing coefficients the
worst pattern is the earliest, u = Σ_{j<k} e_{j·b}, so Δ = ‖C·u‖ (Kalinin & Lampert 2024, "Banded
square root matrix factorization", arXiv:2405.13763, Thm. 2; used for BLTs in "Don't Use Tree
Aggregation, Use BLTs", McMahan et al., EMNLP Industry 2024). With bandwidth p ≤ b the columns a
pattern touches never overlap and the column norms do not increase with the column, so the same u is
worst whatever the signs. :func:`toeplitz_sensitivity` uses it only under one of those two
conditions and refuses otherwise.
"""

from __future__ import annotations

import math

import numpy as np
import torch

ERRORS: tuple[str, ...] = ("mean", "max")


def check_error(error: str) -> None:
    if error not in ERRORS:
        raise ValueError(f"strategy.error: unknown {error!r}; choose from {ERRORS}")


def worst_pattern(n: int, k: int, b: int) -> np.ndarray:
    """u = Σ_{j<k'} e_{j·b}, k' = min(k, ⌈n/b⌉): the earliest k participations b apart."""
    u = np.zeros(n)
    u[[j * b for j in range(min(k, math.ceil(n / b)))]] = 1.0
    return u


def toeplitz_dense(coefficients: np.ndarray | torch.Tensor, n: int) -> torch.Tensor:
    """The n×n lower-triangular Toeplitz matrix of ``coefficients`` (zero past their length), as
    a float64 tensor differentiable in the coefficients."""
    c = torch.as_tensor(coefficients, dtype=torch.float64)[:n]
    full = torch.cat([c, torch.zeros(n - len(c), dtype=torch.float64)])
    idx = torch.arange(n)
    lag = idx[:, None] - idx[None, :]
    return torch.where(lag >= 0, full[lag.clamp(min=0)], torch.zeros((), dtype=torch.float64))


def toeplitz_loss(
    coefficients: torch.Tensor, n: int, k: int, b: int, error: str = "mean"
) -> torch.Tensor:
    """Δ²·error of the Toeplitz factorisation (differentiable): Δ = ‖C·u‖ for the earliest
    pattern u (exact under the conditions of the module docstring), error the mean or max
    squared prefix-sum error (module docstring)."""
    check_error(error)
    c = toeplitz_dense(coefficients, n)
    e0 = torch.zeros(n, 1, dtype=torch.float64)
    e0[0, 0] = 1.0
    r = torch.linalg.solve_triangular(c, e0, upper=False)[:, 0]  # first column of C⁻¹
    s = torch.cumsum(r, 0)  # first column of B = A·C⁻¹
    if error == "mean":
        weights = torch.arange(n, 0, -1, dtype=torch.float64) / n
        err = torch.sum(weights * s * s)
    else:
        err = torch.sum(s * s)
    u = torch.as_tensor(worst_pattern(n, k, b))
    sens2 = torch.sum((c @ u) ** 2)
    return sens2 * err


def toeplitz_sensitivity(coefficients: np.ndarray, n: int, k: int, b: int) -> float:
    """Exact Δ of the Toeplitz C under at most k participations ≥ b apart, ‖C·u‖ for the earliest
    pattern; refuses coefficients that are neither non-negative non-increasing nor of bandwidth
    ≤ b (module docstring)."""
    c = np.asarray(coefficients, dtype=float)[:n]
    monotone = bool(np.all(c >= 0) and np.all(np.diff(c) <= 1e-15))
    if not (monotone or len(c) <= b):
        raise ValueError(
            "toeplitz_sensitivity: the earliest pattern is worst only for non-negative "
            "non-increasing coefficients or bandwidth <= b"
        )
    mat = toeplitz_dense(c, n).numpy()
    return float(np.linalg.norm(mat @ worst_pattern(n, k, b)))


def toeplitz_error(coefficients: np.ndarray, n: int, error: str = "mean") -> float:
    """The mean or max squared prefix-sum error of the Toeplitz factorisation, in units of σ²."""
    k_and_b_free = toeplitz_loss(torch.as_tensor(coefficients, dtype=torch.float64), n, 1, n, error)
    return float(k_and_b_free) / float(np.sum(np.asarray(coefficients, dtype=float)[:n] ** 2))


__all__ = [
    "ERRORS",
    "check_error",
    "toeplitz_dense",
    "toeplitz_error",
    "toeplitz_loss",
    "toeplitz_sensitivity",
    "worst_pattern",
]
