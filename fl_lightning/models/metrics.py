"""The classification metrics of every evaluation path, one definition (torchmetrics).

The server's global model (each round, in ``summary.json``, Lightning's val/test loops), a
client's model (``ClientModule.evaluate``) and ADP-FL's accuracy probe all score logits with
:func:`classification_metrics`: cross-entropy (example-weighted mean), micro accuracy, macro
recall and macro F1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score, MulticlassRecall


def classification_metrics(
    logits: torch.Tensor, y: torch.Tensor, num_classes: int, *, sync: bool = False
) -> dict[str, float]:
    """Loss, accuracy, macro recall and macro F1 of ``logits`` against ``y``.

    With ``sync=True`` (several DDP processes, each holding a slice of the evaluation set) the
    metric states are summed over the processes before computing, so every rank returns the
    metrics of the union; every rank must then call it (it is a collective).
    """
    device = logits.device
    scores = MetricCollection(
        {
            "accuracy": MulticlassAccuracy(num_classes, average="micro", sync_on_compute=sync),
            "recall_macro": MulticlassRecall(num_classes, average="macro", sync_on_compute=sync),
            "f1_macro": MulticlassF1Score(num_classes, average="macro", sync_on_compute=sync),
        },
        compute_groups=False,
    ).to(device)
    loss = MeanMetric(sync_on_compute=sync).to(device)
    if len(y):
        loss.update(F.cross_entropy(logits, y), weight=len(y))
    scores.update(logits.argmax(dim=1), y)
    out = {"loss": float(loss.compute())}
    out.update({k: float(v) for k, v in scores.compute().items()})
    return out
