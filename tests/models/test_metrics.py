"""One definition of the evaluation metrics (models/metrics.py), checked against torchmetrics'
functional forms on logits with a known answer."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torchmetrics.functional.classification import (
    multiclass_accuracy,
    multiclass_f1_score,
    multiclass_recall,
)

from fl_lightning.models.metrics import classification_metrics


def test_matches_torchmetrics_functional_and_a_hand_count():
    g = torch.Generator().manual_seed(0)
    logits, y = torch.randn(300, 5, generator=g), torch.randint(0, 5, (300,), generator=g)
    got = classification_metrics(logits, y, 5)
    preds = logits.argmax(1)
    assert got["loss"] == pytest.approx(float(F.cross_entropy(logits, y)), rel=1e-6)
    assert got["accuracy"] == pytest.approx(float((preds == y).float().mean()), abs=1e-7)
    assert got["accuracy"] == pytest.approx(
        float(multiclass_accuracy(preds, y, 5, average="micro"))
    )
    assert got["recall_macro"] == pytest.approx(float(multiclass_recall(preds, y, 5)))
    assert got["f1_macro"] == pytest.approx(float(multiclass_f1_score(preds, y, 5)))


def test_perfect_predictions_score_one():
    y = torch.tensor([0, 1, 2, 2])
    got = classification_metrics(F.one_hot(y, 3).float() * 20, y, 3)
    assert got["accuracy"] == got["recall_macro"] == got["f1_macro"] == pytest.approx(1.0)
    assert got["loss"] < 1e-6
