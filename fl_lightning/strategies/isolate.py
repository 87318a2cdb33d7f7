"""Isolate: every client trains alone on its own data (GCFL paper, Table II, "Isolated denotes
local-model training"), with the same record-level DP-SGD as the federated methods.

Wiring: the strategy keeps one flat model per client (in ``state_dict``, so checkpointed),
initialised from the common initial global model. ``configure_client`` makes each client
continue from its own model, ``aggregate`` stores w_i ← w_i + Δ_i and returns a zero delta (the
global model is not trained), and ``evaluation_models`` makes the server report the *mean* over
clients of each client model's metrics on the global test set (accuracy, macro recall, macro F1
are averaged per metric). ε is each client's DP-SGD ε (the maximum over clients is reported).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from fl_lightning.records import ClientPlan, ClientUpdate, RoundContext
from fl_lightning.strategies.base import Metrics, Strategy


class Isolate(Strategy):
    """Local-only training; the reported test metrics are means over the client models."""

    reduction = "stream"  # aggregate reads each update once (not a sum of partials)

    def __init__(self) -> None:
        super().__init__(weighting="uniform")
        self.client_models: dict[int, torch.Tensor] = {}

    def configure_client(self, client_id: int, ctx: RoundContext) -> ClientPlan:
        """Each client starts from (and takes its delta against) its own model."""
        return ClientPlan(start_params=self.client_model(client_id, ctx))

    def client_model(self, client_id: int, ctx: RoundContext) -> torch.Tensor:
        """Client ``client_id``'s own flat model (the initial global model until it trains)."""
        if client_id not in self.client_models:
            self.client_models[client_id] = ctx.global_params.clone()
        model = self.client_models[client_id]
        if model.device != ctx.global_params.device:  # restored from a CPU checkpoint
            model = self.client_models[client_id] = model.to(ctx.global_params.device)
        return model

    def aggregate(
        self, updates: Iterable[ClientUpdate], ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        for update in updates:
            start = self.client_model(update.client_id, ctx)
            self.client_models[update.client_id] = start + update.delta.to(start.device)
        return torch.zeros_like(ctx.global_params), {}

    def evaluation_models(self) -> list[torch.Tensor] | None:
        if not self.client_models:
            return None
        return [self.client_models[c] for c in sorted(self.client_models)]

    def state_dict(self) -> dict[str, Any]:
        return {"client_models": {c: m.cpu().clone() for c, m in self.client_models.items()}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.client_models = {int(c): m.clone() for c, m in state_dict["client_models"].items()}
