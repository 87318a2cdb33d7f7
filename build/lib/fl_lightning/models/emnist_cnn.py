"""A small EMNIST CNN of about 0.2M parameters (ADP-FL's EMNIST model, Wu et al. 2025,
Table 1, reports 206,922; no standard architecture matches that count, see the paper notes).

conv5×5 1→32 (pad 2), ReLU, maxpool; conv5×5 32→64 (pad 2), ReLU, maxpool; FC 3136→48, ReLU;
FC 48→62: 205,710 parameters for 62 classes (EMNIST ByClass).
"""

from __future__ import annotations

import torch
from torch import nn


class EmnistCNN(nn.Module):
    """Two-conv CNN for 28×28 grey images.

    Args:
        in_channels: input channels (1).
        num_classes: output classes (62 for ByClass, 47 for Balanced).
        image_size: input side (28).
        hidden: width of the hidden FC layer (48 gives ≈ 0.2M parameters).
    """

    def __init__(
        self, in_channels: int = 1, num_classes: int = 62, image_size: int = 28, hidden: int = 48
    ) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 32, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5, padding=2),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        side = image_size // 4
        self.classifier = nn.Sequential(
            nn.Linear(64 * side * side, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))
