"""Evaluation of the global model: one path, torchmetrics (``models/metrics.py``).

The round loop (every ``eval_every`` rounds and at the end), ``trainer.validate`` /
``trainer.test`` and DPFL-AGN's server loss all come here. Under DDP each rank scores a strided
slice of the split and the metrics are reduced across ranks (``sync``), so every rank gets the
same numbers.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch

from fl_lightning.models.metrics import classification_metrics
from fl_lightning.server.distributed import rank_and_world
from fl_lightning.utils.flat import load_flat_, trainable_parameters


@torch.no_grad()
def model_metrics(
    net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_size: int, num_classes: int
) -> dict[str, float]:
    """Metrics of ``net`` on ``(x, y)`` in eval mode (restored to train mode after), reduced
    across processes when several run."""
    net.eval()
    logits = torch.cat([net(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])
    net.train()
    return classification_metrics(logits, y, num_classes, sync=rank_and_world()[1] > 1)


@torch.no_grad()
def evaluate_split(
    global_net: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    batch_size: int,
    num_classes: int,
    models: Sequence[torch.Tensor] | None = None,
) -> dict[str, float]:
    """Metrics of the global model on a split (this rank's strided share under DDP), or the
    mean metrics of ``models`` (flat weight vectors, e.g. Isolate's per-client models) when the
    strategy evaluates its own."""
    rank, world = rank_and_world()
    if world > 1:
        x, y = x[rank::world], y[rank::world]
    if not models:
        return model_metrics(global_net, x, y, batch_size=batch_size, num_classes=num_classes)
    net = copy.deepcopy(global_net)
    per_model = []
    for flat in models:
        load_flat_(trainable_parameters(net), flat.to(x.device))
        per_model.append(model_metrics(net, x, y, batch_size=batch_size, num_classes=num_classes))
    return {k: sum(m[k] for m in per_model) / len(per_model) for k in per_model[0]}


__all__ = ["evaluate_split", "model_metrics"]
