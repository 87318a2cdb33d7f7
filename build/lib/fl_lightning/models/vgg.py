"""VGG-9 without BatchNorm (Wang et al. 2020, FedMA; ADP-FL's CIFAR-10 model, 3,491,530
parameters in Wu et al. 2025, Table 1).

conv3×3 (pad 1) 3→32, 32→64, maxpool; 64→128, 128→128, maxpool; 128→256, 256→256, maxpool;
FC 4096→512, 512→512, 512→10; ReLU throughout (convs 1,126,080 + FCs 2,365,450). FedMA's
Dropout2d(0.05) / Dropout(0.1) are kept as options (they add no parameters).
"""

from __future__ import annotations

import torch
from torch import nn


class VGG9(nn.Module):
    """VGG-9 for 32×32 RGB images, no normalisation layers (DP-compatible).

    Args:
        in_channels: input channels (3).
        num_classes: output classes (10).
        image_size: input side (32; the first FC takes 256·(image_size/8)²).
        dropout: use FedMA's dropout layers.
    """

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        image_size: int = 32,
        dropout: bool = False,
    ) -> None:
        super().__init__()

        def conv(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(inplace=True)]

        drop2d: list[nn.Module] = [nn.Dropout2d(0.05)] if dropout else []
        self.features = nn.Sequential(
            *conv(in_channels, 32),
            *conv(32, 64),
            nn.MaxPool2d(2),
            *conv(64, 128),
            *conv(128, 128),
            nn.MaxPool2d(2),
            *drop2d,
            *conv(128, 256),
            *conv(256, 256),
            nn.MaxPool2d(2),
        )
        drop: list[nn.Module] = [nn.Dropout(0.1)] if dropout else []
        side = image_size // 8
        self.classifier = nn.Sequential(
            *drop,
            nn.Linear(256 * side * side, 512),
            nn.ReLU(inplace=True),
            nn.Linear(512, 512),
            nn.ReLU(inplace=True),
            *drop,
            nn.Linear(512, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))
