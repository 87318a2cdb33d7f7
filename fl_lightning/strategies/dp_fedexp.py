"""DP-FedExP: FedExP's extrapolated server step (Jhunjhunwala, Wang, Joshi, ICLR 2023, Eq. 9)
over record-level DP-SGD clients.

With client deltas Δ_i (local − global) and their weighted mean Δ̄ (weights p_i summing to 1,
uniform by default so p_i = 1/|S|), the server step size is

    η_g = max(1, Σ_i p_i ‖Δ_i‖² / (2 (‖Δ̄‖² + ε))),

and the aggregate is η_g·Δ̄ (applied by the server SGD at ``model.server_lr`` 1). Only the sums
Σ p_i Δ_i and Σ p_i ‖Δ_i‖² are needed, so updates are streamed. DP-SGD noise inflates ‖Δ_i‖²,
which pushes η_g up (towards |S|/2 when noise dominates). Post-processing of DP outputs: ε is the
clients' DP-SGD ε. Not implemented: the official code's averaging of the last two iterates for
evaluation and its decaying ε.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.base import Metrics, Strategy, Weighting, client_weight


def fedexp_step_size(mean_sq_norm: float, mean_delta_sq_norm: float, *, epsilon: float) -> float:
    """η_g = max(1, Σ p_i‖Δ_i‖² / (2(‖Δ̄‖² + ε))) given Σ p_i‖Δ_i‖² and ‖Δ̄‖²."""
    return max(1.0, mean_sq_norm / (2.0 * (mean_delta_sq_norm + epsilon)))


class DPFedExP(Strategy):
    """FedExP server step size.

    Args:
        epsilon: ε in the step-size denominator (FedExP uses a small value, e.g. 1e-3).
        weighting: ``uniform`` (the formula of the FedExP paper) or ``num_examples``.
    """

    reduction = "stream"  # aggregate reads each update once (not a sum of partials)

    def __init__(self, *, epsilon: float = 1e-3, weighting: Weighting = "uniform") -> None:
        super().__init__(weighting=weighting)
        if epsilon <= 0:
            raise ValueError(f"strategy.epsilon: must be > 0, got {epsilon}")
        self.epsilon = epsilon

    def aggregate(
        self, updates: Iterable[ClientUpdate], ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        total = torch.zeros_like(ctx.global_params)
        sq_norms = 0.0
        total_weight = 0.0
        for update in updates:
            w = client_weight(update, self.weighting)
            total.add_(update.delta, alpha=w)
            sq_norms += w * float(update.delta.square().sum())
            total_weight += w
        if total_weight == 0.0:
            return total, {}
        mean = total.div_(total_weight)
        eta_g = fedexp_step_size(
            sq_norms / total_weight, float(mean.square().sum()), epsilon=self.epsilon
        )
        return mean.mul_(eta_g), {"eta_g": eta_g}
