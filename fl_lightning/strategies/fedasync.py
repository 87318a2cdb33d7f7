"""FedAsync (Xie, Koyejo, Gupta 2019, "Asynchronous Federated Optimization", Alg. 1).

Every arriving update is one server step: x ← (1 − α_τ)·x + α_τ·x_new with
α_τ = α·s(τ) and x_new = x_base + Δ the client's local model, x_base the global model it started
from (kept by ``AsyncStrategy`` because ``keeps_versions``) and τ the server steps since then.
Updates arriving in the same round are applied one after another in arrival order; the round's
aggregate is x_end − x_start (exact with the default server SGD, lr 1, no momentum). Local DP
on the uploads is a component set in the config, ``local_dp:``
(:class:`~fl_lightning.strategies.budgeted_uploads.BudgetedUploads`; none by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from fl_lightning.records import RoundContext
from fl_lightning.strategies.asynchronous.base import AsyncStrategy
from fl_lightning.strategies.asynchronous.buffer import Arrival
from fl_lightning.strategies.asynchronous.staleness import StalenessFn, staleness_scale
from fl_lightning.strategies.base import Metrics


class FedAsync(AsyncStrategy):
    """Asynchronous mixing with a staleness function.

    Args:
        mixing: α ∈ (0, 1], the mixing weight of a fresh update.
        staleness_fn: s(τ): ``constant``, ``polynomial`` (1+τ)^−a, ``hinge`` or ``sqrt``.
        staleness_a: a of ``polynomial`` / ``hinge``.
        staleness_b: b of ``hinge``.
        **kwargs: :class:`AsyncStrategy` arguments (clock, delays, ``local_dp``).
    """

    keeps_versions = True

    def __init__(
        self,
        *,
        mixing: float = 0.6,
        staleness_fn: StalenessFn = "polynomial",
        staleness_a: float = 0.5,
        staleness_b: int = 4,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not 0.0 < mixing <= 1.0:
            raise ValueError(f"strategy.mixing: must be in (0, 1], got {mixing}")
        staleness_scale(staleness_fn, 0)
        self.mixing = mixing
        self.staleness_fn: StalenessFn = staleness_fn
        self.staleness_a = staleness_a
        self.staleness_b = staleness_b

    def aggregate_arrivals(
        self, arrivals: Sequence[Arrival], ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        x = ctx.global_params.clone()
        alphas = []
        for a in arrivals:
            tau = self.model_version - a.base_version
            alpha = self.mixing * staleness_scale(
                self.staleness_fn, tau, a=self.staleness_a, b=self.staleness_b
            )
            x_new = self.base_params(a, ctx) + a.update.delta
            x.mul_(1.0 - alpha).add_(x_new, alpha=alpha)
            self.model_version += 1
            alphas.append(alpha)
        metrics = {"fedasync/alpha_mean": sum(alphas) / len(alphas)} if alphas else {}
        return x.sub_(ctx.global_params), metrics


__all__ = ["FedAsync"]
