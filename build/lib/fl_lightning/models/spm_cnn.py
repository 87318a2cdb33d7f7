"""The shallow CIFAR-10 CNN of SPM-FL (Chen & Zheng, Electronics 13:4091, 2024, §5.1, "Model 1").

Two convolutions mapping the input to 64 and 128 channels, each with ReLU and 2×2 max-pooling
(32 → 16 → 8), flatten (128·8·8 = 8192), FC 384, FC 192, FC 10. The paper gives neither the
kernel size nor the activations between the FC layers: 3×3 kernels with padding 1 (so pooling
alone halves the side, matching the stated 8×8) and ReLU are chosen here.
"""

from __future__ import annotations

import torch
from torch import nn


class SpmCifarCNN(nn.Module):
    """conv 64 - pool - conv 128 - pool - FC 384 - FC 192 - FC classes.

    Args:
        in_channels: input channels.
        num_classes: output classes.
        image_size: input height = width (divisible by 4).
        kernel_size: odd conv kernel size (padding keeps the side).
    """

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        image_size: int = 32,
        kernel_size: int = 3,
    ) -> None:
        super().__init__()
        if image_size % 4 or kernel_size % 2 == 0:
            raise ValueError("client.net: image_size must be divisible by 4 and kernel_size odd")
        pad = kernel_size // 2
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 64, kernel_size, padding=pad),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 128, kernel_size, padding=pad),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        side = image_size // 4
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(128 * side * side, 384),
            nn.ReLU(),
            nn.Linear(384, 192),
            nn.ReLU(),
            nn.Linear(192, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))
