"""What a strategy may need to know about the model it aggregates: its layer slices in the flat
vector and the clients' local learning rate (to turn deltas into pseudo-gradients).

``ModelBinding.setup`` is the Lightning ``Callback.setup`` hook, so a strategy that mixes it in
reads both from the ``FederatedModule`` once, before training; unit tests call ``bind`` directly.
"""

from __future__ import annotations

from typing import Any

from fl_lightning.utils.flat import layer_slices


class ModelBinding:
    """Mixin for strategies: ``self.layer_slices`` and ``self.local_lr`` from the running model."""

    layer_slices: dict[str, slice] | None = None
    local_lr: float | None = None

    def bind(self, *, layer_slices: dict[str, slice] | None, local_lr: float | None) -> None:
        self.layer_slices = layer_slices
        self.local_lr = local_lr

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        net = getattr(pl_module, "global_net", None)
        client = getattr(pl_module, "client", None)
        self.bind(
            layer_slices=layer_slices(net) if net is not None else None,
            local_lr=float(client.training_config.lr) if client is not None else None,
        )

    def round_local_lr(self, client_config: dict[str, Any]) -> float:
        """The local learning rate η_l in force this round (a per-round override wins)."""
        lr = client_config.get("lr", self.local_lr)
        if lr is None or lr <= 0:
            raise ValueError("client.lr: a positive local learning rate is needed by this strategy")
        return float(lr)
