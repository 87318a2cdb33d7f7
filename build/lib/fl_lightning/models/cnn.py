"""Convolutional networks used by the papers."""

from __future__ import annotations

import torch
from torch import nn


class MnistCNN(nn.Module):
    """McMahan et al. 2017's MNIST CNN, used by paper 000: two 5×5 convs (32, 64 channels) with
    ReLU and 2×2 max-pooling, FC 512, FC classes (1,663,370 parameters at 28×28, 10 classes).

    Args:
        in_channels: input channels.
        num_classes: output classes.
        image_size: input height = width (28 for MNIST, 8 for scikit-learn digits).
        channels: conv widths.
        hidden: width of the first fully connected layer.
    """

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        image_size: int = 28,
        channels: tuple[int, int] = (32, 64),
        hidden: int = 512,
    ) -> None:
        super().__init__()
        c1, c2 = channels
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        side = image_size // 4
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(c2 * side * side, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class CifarCNN(nn.Module):
    """The LeNet-5-style CIFAR CNN of paper 000: conv 5×5 (6), pool, conv 5×5 (16), pool,
    FC 120, FC 84, FC classes.

    Args:
        in_channels: input channels.
        num_classes: output classes.
        image_size: input height = width (32 for CIFAR).
        channels: conv widths.
        hidden: widths of the two fully connected layers.
    """

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        image_size: int = 32,
        channels: tuple[int, int] = (6, 16),
        hidden: tuple[int, int] = (120, 84),
    ) -> None:
        super().__init__()
        c1, c2 = channels
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        side = ((image_size - 4) // 2 - 4) // 2
        h1, h2 = hidden
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(c2 * side * side, h1),
            nn.ReLU(),
            nn.Linear(h1, h2),
            nn.ReLU(),
            nn.Linear(h2, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))
