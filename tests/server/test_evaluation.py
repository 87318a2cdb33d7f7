"""The server's evaluation path (server/evaluation.py): every example of the split is scored,
in batches of any size, and a strategy's own models are averaged."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fl_lightning.server.evaluation import evaluate_split
from fl_lightning.utils.flat import trainable_parameters


def _split(n: int = 53, d: int = 6, classes: int = 4):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, d, generator=g), torch.randint(0, classes, (n,), generator=g)


def _expected(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    with torch.no_grad():
        logits = net(x)
    return {
        "loss": float(F.cross_entropy(logits, y)),
        "accuracy": float((logits.argmax(1) == y).float().mean()),
    }


@pytest.mark.parametrize("batch_size", [1, 7, 53, 1024])
def test_every_example_is_scored_whatever_the_batch_size(batch_size):
    """53 examples in batches of 7 leave a last batch of 4: it must count as much as the
    others (a dropped or truncated last batch changes the accuracy and the loss)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Dropout(0.5))
    x, y = _split()
    got = evaluate_split(net, x, y, batch_size=batch_size, num_classes=4)
    want = _expected(net.eval(), x, y)  # dropout off, as evaluation must have it
    assert got["accuracy"] == pytest.approx(want["accuracy"], abs=1e-6)
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
    net.train()
    evaluate_split(net, x, y, batch_size=batch_size, num_classes=4)
    assert net.training  # restored for the next round's clients


def test_a_strategys_own_models_are_averaged_not_the_global_one():
    torch.manual_seed(0)
    net = torch.nn.Linear(6, 4)
    x, y = _split()
    models, expected = [], []
    for seed in (1, 2, 3):
        torch.manual_seed(seed)
        other = torch.nn.Linear(6, 4)
        models.append(torch.cat([p.detach().flatten() for p in trainable_parameters(other)]))
        expected.append(_expected(other, x, y))
    got = evaluate_split(net, x, y, batch_size=10, num_classes=4, models=models)
    for key in ("loss", "accuracy"):
        assert got[key] == pytest.approx(sum(e[key] for e in expected) / 3, rel=1e-5)
    assert got != evaluate_split(net, x, y, batch_size=10, num_classes=4)
