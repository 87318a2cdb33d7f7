"""Clipping, the one place where a release's sensitivity is enforced.

A mechanism's ε holds only for inputs whose norm it bounds; every strategy that clips an upload
(a client's delta, gradient or parameters) calls :func:`clip_by_l2_norm_`, and per-example
DP-SGD clipping uses :func:`clip_factors` (Opacus' formula).
"""

from __future__ import annotations

import torch


def clip_by_norm_(vector: torch.Tensor, max_norm: float, *, p: int = 2) -> float:
    """Scales ``vector`` in place to Lp norm at most ``max_norm``; returns the original norm
    (L1 for a Laplace release's sensitivity, L2 for a Gaussian's)."""
    norm = float(vector.norm(p=p))
    if norm > max_norm:
        vector.mul_(max_norm / norm)
    return norm


def clip_by_l2_norm_(vector: torch.Tensor, max_norm: float) -> float:
    """Scales ``vector`` in place to L2 norm at most ``max_norm``; returns the original norm.

    (McMahan et al. 2018, Alg. 1 ``ClipFn``: Δ · min(1, C/‖Δ‖).)
    """
    return clip_by_norm_(vector, max_norm, p=2)


def clip_factors(norms: torch.Tensor, max_grad_norm: float) -> torch.Tensor:
    """min(1, C / (‖g_i‖ + 1e-6)) per example, Opacus' ``clip_and_accumulate`` formula."""
    return (max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
