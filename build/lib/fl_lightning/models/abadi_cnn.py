"""The CNN of Abadi et al. 2016 ("Deep Learning with Differential Privacy", §5.2), used by
DPFL-AGN (Jiao et al. 2023, §5: "two convolutional layers and two fully connected layers ...
5 × 5 convolutions with stride 1 ... 6 × 6 × 64", a near-copy of Abadi et al.'s description).

conv 5×5 (64, 'same') → ReLU → 2×2 max-pool → conv 5×5 (64, 'same') → ReLU → 2×2 max-pool
→ FC 384 → ReLU → FC 384 → ReLU → FC classes. On Abadi et al.'s 24×24 CIFAR crops the feature
maps are 12×12×64 and 6×6×64; on 28×28 MNIST 14×14×64 and 7×7×64; on 32×32 CIFAR 16×16×64 and
8×8×64. No batch normalisation (it would break per-example DP-SGD).
"""

from __future__ import annotations

import torch
from torch import nn


class AbadiCNN(nn.Module):
    """Two 5×5 conv layers of 64 channels with max-pooling, FC 384, FC 384, FC classes.

    Args:
        in_channels: input channels (1 for MNIST, 3 for CIFAR-10).
        num_classes: output classes.
        image_size: input height = width (28 MNIST, 32 CIFAR-10, 24 for Abadi et al.'s crops).
        channels: conv widths (64, 64 in the paper).
        hidden: widths of the two fully connected layers (384, 384 in the paper).
    """

    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        image_size: int = 28,
        channels: tuple[int, int] = (64, 64),
        hidden: tuple[int, int] = (384, 384),
    ) -> None:
        super().__init__()
        if image_size < 4:
            raise ValueError(f"client.net.image_size: must be >= 4, got {image_size}")
        c1, c2 = channels
        h1, h2 = hidden
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, 5, stride=1, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 5, stride=1, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        side = image_size // 4
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
