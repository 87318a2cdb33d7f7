"""ResNet-18 with GroupNorm (SPM-FL "Model 2", Chen & Zheng 2024 §5.1; He et al. 2016).

The paper says only "ResNet18". The CIFAR variant is used (3×3 stem, no max-pool, stages of
64/128/256/512 channels with two BasicBlocks each), with GroupNorm instead of BatchNorm so that
the model has no running statistics (every trainable parameter is privatised and averaged;
Hsieh et al. 2020 for GroupNorm in FL). 11.2M parameters at 10 classes.
"""

from __future__ import annotations

import torch
from torch import nn


def _norm(channels: int, groups: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(groups, channels), channels)


class BasicBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.norm1 = _norm(out_ch, groups)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.norm2 = _norm(out_ch, groups)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride, bias=False), _norm(out_ch, groups)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet18GN(nn.Module):
    """CIFAR ResNet-18 with GroupNorm.

    Args:
        in_channels: input channels.
        num_classes: output classes.
        width: channels of the first stage (64 in ResNet-18; smaller for tests).
        groups: GroupNorm groups (32 by default, capped at the channel count).
    """

    def __init__(
        self, in_channels: int = 3, num_classes: int = 10, width: int = 64, groups: int = 32
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, 1, 1, bias=False), _norm(width, groups), nn.ReLU()
        )
        blocks: list[nn.Module] = []
        in_ch = width
        for i, mult in enumerate((1, 2, 4, 8)):
            out_ch = width * mult
            for j in range(2):
                blocks.append(BasicBlock(in_ch, out_ch, 2 if (i > 0 and j == 0) else 1, groups))
                in_ch = out_ch
        self.layers = nn.Sequential(*blocks)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_ch, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(self.stem(x)))
