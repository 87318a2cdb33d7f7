"""DP-SCAFFOLD: SCAFFOLD with control variates, option II (Karimireddy et al., ICML 2020, Alg. 1),
over record-level DP-SGD clients (the DP variant of Noble, Bellet, Dieuleveut, AISTATS 2022).

Client i starts from the global x, and each local step uses the noisy DP-SGD gradient g_i
corrected as y ← y − η_l (g_i(y) − c_i + c) (``adjust_local_gradients``, added after the noise,
so it is post-processing). After K steps, option II:

    c_i⁺ = c_i − c + (x − y_i) / (K η_l),   Δy_i = y_i − x,   Δc_i = c_i⁺ − c_i.

Server: x ← x + η_g · mean_i Δy_i (η_g = ``model.server_lr``) and c ← c + (|S|/N) · mean_i Δc_i.
The control variates are functions of the clients' DP outputs only, so ε is the clients'
DP-SGD ε. The server control c and the clients' c_i live in the strategy's ``state_dict``
(checkpointed). Option II assumes plain local SGD (no momentum, no weight decay).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from fl_lightning.records import ClientPlan, ClientUpdate, RoundContext
from fl_lightning.strategies.base import Metrics, Strategy, Weighting, client_weight
from fl_lightning.strategies.spec import FederationSpec, local_lr_in_force


class DPScaffold(Strategy):
    """SCAFFOLD (option II) with DP-SGD local gradients.

    Args:
        weighting: ``uniform`` (SCAFFOLD's mean of Δy_i) or ``num_examples``.
    """

    reduction = "stream"  # aggregate reads each update once (not a sum of partials)

    def __init__(self, *, weighting: Weighting = "uniform") -> None:
        super().__init__(weighting=weighting)
        self.control: torch.Tensor | None = None
        # c_i⁺, kept where the server syncs it: under DDP it is copied from the process that
        # trained client i to every other one after the round (docs/distributed.md).
        self.client_controls: dict[int, torch.Tensor] = {}
        self.client_states = self.client_controls
        self._pending_control: torch.Tensor | None = None
        self._correction: tuple[int, int, torch.Tensor] | None = None
        self.local_lr: float | None = None

    def setup_federation(self, spec: FederationSpec) -> None:
        super().setup_federation(spec)
        self.local_lr = float(spec.local.lr)

    def _server_control(self, ctx: RoundContext) -> torch.Tensor:
        if self.control is None:
            self.control = torch.zeros_like(ctx.global_params)
        elif self.control.device != ctx.global_params.device:
            self.control = self.control.to(ctx.global_params.device)
        return self.control

    def _client_control(self, client_id: int, ctx: RoundContext) -> torch.Tensor:
        c_i = self.client_controls.get(client_id)
        if c_i is None:
            return torch.zeros_like(ctx.global_params)
        return c_i.to(ctx.global_params.device)

    # -- client side -------------------------------------------------------------------------
    def configure_client(self, client_id: int, ctx: RoundContext) -> ClientPlan:
        """The global start, with the control-variate correction after each backward pass."""

        def correct(params: Sequence[torch.nn.Parameter]) -> None:
            self.adjust_local_gradients(client_id, params, ctx)

        return ClientPlan(start_params=ctx.global_params, grad_hook=correct)

    def adjust_local_gradients(
        self, client_id: int, params: Sequence[torch.nn.Parameter], ctx: RoundContext
    ) -> None:
        """g ← g − c_i + c on the (already noised) local gradient."""
        key = (ctx.round_idx, client_id)
        if self._correction is None or self._correction[:2] != key:
            c = self._server_control(ctx)
            self._correction = (*key, c - self._client_control(client_id, ctx))
        correction = self._correction[2]
        offset = 0
        for p in params:
            n = p.numel()
            assert p.grad is not None  # called after the backward pass
            p.grad.add_(correction[offset : offset + n].view_as(p))
            offset += n

    def process_update(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        """Option II: c_i⁺ = c_i − c + (x − y_i)/(K η_l); uploads Δc_i = c_i⁺ − c_i."""
        steps = max(1.0, float(update.metrics.get("local_steps", 1.0)))
        lr = local_lr_in_force(ctx.client_config, self.local_lr)
        c = self._server_control(ctx)
        c_i = self._client_control(update.client_id, ctx)
        c_i_new = c_i - c - update.delta / (steps * lr)
        update.extras["delta_control"] = c_i_new - c_i
        self.client_controls[update.client_id] = c_i_new
        return update

    # -- server side -------------------------------------------------------------------------
    def aggregate(
        self, updates: Iterable[ClientUpdate], ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        total = torch.zeros_like(ctx.global_params)
        control_sum = torch.zeros_like(ctx.global_params)
        total_weight = 0.0
        for update in updates:
            w = client_weight(update, self.weighting)
            total.add_(update.delta, alpha=w)
            control_sum.add_(update.extras["delta_control"])
            total_weight += w
        # c ← c + (|S|/N) · mean_S Δc_i = c + Σ_S Δc_i / N, applied in after_round.
        self._pending_control = control_sum.div_(max(1, ctx.num_clients))
        if total_weight == 0.0:
            return total, {}
        return total.div_(total_weight), {}

    def after_round(self, ctx: RoundContext, aggregate: torch.Tensor) -> Metrics:
        if self._pending_control is not None:
            self._server_control(ctx).add_(self._pending_control)
            self._pending_control = None
        self._correction = None
        return {"control_norm": float(self._server_control(ctx).norm())}

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "control": None if self.control is None else self.control.detach().cpu().clone(),
            "client_controls": {c: v.cpu().clone() for c, v in self.client_controls.items()},
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        control = state_dict["control"]
        self.control = None if control is None else control.clone()
        self.client_controls.clear()  # in place: it is the synced client_states
        self.client_controls.update(
            {int(c): v.clone() for c, v in state_dict["client_controls"].items()}
        )
