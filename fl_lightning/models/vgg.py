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
        width: channels of the first convolution (32); the others are 2, 4, 4, 8 and 8 times
            it, as in the paper's 32, 64, 128, 128, 256, 256.
        hidden: width of the two hidden fully connected layers (512).

    ``width`` and ``hidden`` keep the architecture and narrow it (the config tests run a
    ``width: 4, hidden: 16`` copy; the defaults are the paper's model).
    """

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        image_size: int = 32,
        dropout: bool = False,
        width: int = 32,
        hidden: int = 512,
    ) -> None:
        super().__init__()
        if width < 1:
            raise ValueError(f"client.net.init_args.width: must be >= 1, got {width}")
        if hidden < 1:
            raise ValueError(f"client.net.init_args.hidden: must be >= 1, got {hidden}")

        def conv(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(inplace=True)]

        w = width
        drop2d: list[nn.Module] = [nn.Dropout2d(0.05)] if dropout else []
        self.features = nn.Sequential(
            *conv(in_channels, w),
            *conv(w, 2 * w),
            nn.MaxPool2d(2),
            *conv(2 * w, 4 * w),
            *conv(4 * w, 4 * w),
            nn.MaxPool2d(2),
            *drop2d,
            *conv(4 * w, 8 * w),
            *conv(8 * w, 8 * w),
            nn.MaxPool2d(2),
        )
        drop: list[nn.Module] = [nn.Dropout(0.1)] if dropout else []
        side = image_size // 8
        self.classifier = nn.Sequential(
            *drop,
            nn.Linear(8 * w * side * side, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, hidden),
            nn.ReLU(inplace=True),
            *drop,
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))
