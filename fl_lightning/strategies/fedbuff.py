"""FedBuff: buffered asynchronous aggregation (Nguyen, Malik, Zhan, Yousefpour, Rabbat,
Malek, Huba 2022, "Federated Learning with Buffered Asynchronous Aggregation", Alg. 1).

Arriving updates (from the simulated clock of ``AsyncStrategy``) go into a buffer; every K
updates the server takes one step with their staleness-scaled mean
Δ̄ = Σ_k w_k·s(τ_k)·Δ_k / Σ_k w_k, s(τ) = 1/√(1+τ) (the paper's choice), τ = server model
versions since the update's base version. When more than one group of K is complete in a round,
their means are summed (the same as applying them one after another with the default server
SGD at lr 1 and no momentum); the remainder stays buffered. Local DP on the uploads (the ADP-FL
baselines' "same noise") is a component set in the config, ``local_dp:``
(:class:`~fl_lightning.strategies.budgeted_uploads.BudgetedUploads`; none by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch

from fl_lightning.records import RoundContext
from fl_lightning.strategies.asynchronous.base import AsyncStrategy
from fl_lightning.strategies.asynchronous.buffer import Arrival, update_from_state, update_to_state
from fl_lightning.strategies.asynchronous.staleness import StalenessFn, staleness_scale
from fl_lightning.strategies.base import Metrics, client_weight


class FedBuff(AsyncStrategy):
    """Buffered asynchronous aggregation.

    Args:
        buffer_size: K, updates per server step.
        staleness_fn: s(τ) (``sqrt`` as in FedBuff; see :func:`staleness_scale`).
        staleness_a: exponent/slope a of ``polynomial`` / ``hinge``.
        staleness_b: hinge point b.
        weighting: ``uniform`` (FedBuff) or ``num_examples``.
        **kwargs: :class:`AsyncStrategy` arguments (clock, delays, ``local_dp``).
    """

    def __init__(
        self,
        *,
        buffer_size: int = 10,
        staleness_fn: StalenessFn = "sqrt",
        staleness_a: float = 0.5,
        staleness_b: int = 4,
        weighting: Literal["num_examples", "uniform"] = "uniform",
        **kwargs: Any,
    ) -> None:
        super().__init__(weighting=weighting, **kwargs)
        if buffer_size < 1:
            raise ValueError(f"strategy.buffer_size: must be >= 1, got {buffer_size}")
        staleness_scale(staleness_fn, 0)  # validates the name
        self.buffer_size = buffer_size
        self.staleness_fn: StalenessFn = staleness_fn
        self.staleness_a = staleness_a
        self.staleness_b = staleness_b
        self.buffer: list[Arrival] = []

    def aggregate_arrivals(
        self, arrivals: Sequence[Arrival], ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        self.buffer.extend(arrivals)
        out = torch.zeros_like(ctx.global_params)
        K = self.buffer_size
        steps = 0
        while len(self.buffer) >= K:
            group, self.buffer = self.buffer[:K], self.buffer[K:]
            total_w = 0.0
            step = torch.zeros_like(out)
            for a in group:
                tau = self.model_version - a.base_version
                w = client_weight(a.update, self.weighting)
                s = staleness_scale(self.staleness_fn, tau, a=self.staleness_a, b=self.staleness_b)
                step.add_(a.update.delta, alpha=w * s)
                total_w += w
            out.add_(step.div_(total_w))
            self.model_version += 1
            steps += 1
        return out, {
            "fedbuff/server_steps": float(steps),
            "fedbuff/buffered": float(len(self.buffer)),
        }

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["fedbuff_buffer"] = [
            {
                "update": update_to_state(a.update),
                "dispatch_round": a.dispatch_round,
                "arrival_time": a.arrival_time,
                "base_version": a.base_version,
                "staleness": a.staleness,
            }
            for a in self.buffer
        ]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.buffer = [
            Arrival(
                update_from_state(a["update"]),
                int(a["dispatch_round"]),
                float(a["arrival_time"]),
                int(a["base_version"]),
                int(a["staleness"]),
            )
            for a in state_dict["fedbuff_buffer"]
        ]


__all__ = ["FedBuff", "staleness_scale"]
