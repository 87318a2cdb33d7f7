"""Fully connected models."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    """Flatten, then Linear-ReLU layers, then a linear classifier (paper 003: 784-256-10).

    Args:
        input_dim: flattened input size.
        hidden: hidden widths.
        num_classes: output classes.
    """

    def __init__(
        self, input_dim: int = 784, hidden: tuple[int, ...] = (256,), num_classes: int = 10
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = input_dim
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class LogisticRegression(MLP):
    """Multinomial logistic regression (an MLP without hidden layers)."""

    def __init__(self, input_dim: int = 784, num_classes: int = 10) -> None:
        super().__init__(input_dim=input_dim, hidden=(), num_classes=num_classes)
