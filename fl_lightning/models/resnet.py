"""ResNet-50 (He et al. 2016, "Deep Residual Learning", Table 1, 50-layer column) with GroupNorm
and a CIFAR stem, as used by DP-FedASGP (Zhang et al. 2024, Sec. V-A: "the same default settings
as the 50-layer architecture in [36]").

Gaps the paper leaves open, decided here (``docs/dp_fedasgp.md``):

* stem: 3×3 conv, stride 1, no max-pool (the usual CIFAR stem; the ImageNet 7×7/2 stem plus
  max-pool would shrink 32×32 inputs to 8×8 before the first stage). 1-channel MNIST works
  through ``in_channels: 1``; 28×28 inputs pass because the head uses adaptive average pooling.
* normalisation: GroupNorm (``groups`` groups per layer, default 32) instead of
  BatchNorm, which mixes examples in a batch (breaks per-example DP-SGD and is unstable with
  small non-IID client batches; Hsieh et al. 2020). The last GroupNorm of each residual branch
  starts at zero weight (Goyal et al. 2017) so each block starts as the identity.
* bottleneck: stride on the 3×3 conv (torchvision's "ResNet v1.5").
"""

from __future__ import annotations

import torch
from torch import nn


def _norm(channels: int, groups: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(groups, channels), channels)


class Bottleneck(nn.Module):
    """1×1 → 3×3 (stride) → 1×1 (×4 channels) with a projection shortcut when shapes change."""

    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int, groups: int) -> None:
        super().__init__()
        out_ch = width * self.expansion
        self.branch = nn.Sequential(
            nn.Conv2d(in_ch, width, 1, bias=False),
            _norm(width, groups),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False),
            _norm(width, groups),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, out_ch, 1, bias=False),
            last_norm := _norm(out_ch, groups),
        )
        nn.init.zeros_(last_norm.weight)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), _norm(out_ch, groups)
            )
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.branch(x) + self.shortcut(x))


class ResNet50GN(nn.Module):
    """ResNet-50: stages of [3, 4, 6, 3] bottlenecks at widths 64/128/256/512 (×4 out).

    Args:
        in_channels: input channels (3 for CIFAR, 1 for MNIST).
        num_classes: output classes.
        groups: GroupNorm groups (32, Wu & He 2018).
        width: base width (64 in the paper; smaller values give cheap test models).
        blocks: bottlenecks per stage ([3, 4, 6, 3] is ResNet-50).
    """

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 10,
        groups: int = 32,
        width: int = 64,
        blocks: tuple[int, int, int, int] | list[int] = (3, 4, 6, 3),
    ) -> None:
        super().__init__()
        if len(blocks) != 4 or min(blocks) < 1:
            raise ValueError(f"model.blocks: expected four positive counts, got {blocks}")
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, stride=1, padding=1, bias=False),
            _norm(width, groups),
            nn.ReLU(inplace=True),
        )
        layers: list[nn.Module] = []
        in_ch = width
        for stage, count in enumerate(blocks):
            stage_width = width * 2**stage
            for i in range(count):
                stride = 2 if (stage > 0 and i == 0) else 1
                layers.append(Bottleneck(in_ch, stage_width, stride, groups))
                in_ch = stage_width * Bottleneck.expansion
        self.stages = nn.Sequential(*layers)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_ch, num_classes)
        )
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))
