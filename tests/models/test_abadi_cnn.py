"""The Abadi et al. 2016 CNN: shapes, size, Opacus compatibility."""

from __future__ import annotations

import torch

from fl_lightning.client.module import dp_incompatibility
from fl_lightning.models.abadi_cnn import AbadiCNN


def test_shapes_and_parameter_count():
    for channels, size, flat in [(1, 28, 7 * 7 * 64), (3, 32, 8 * 8 * 64), (3, 24, 6 * 6 * 64)]:
        net = AbadiCNN(in_channels=channels, image_size=size)
        assert net(torch.zeros(2, channels, size, size)).shape == (2, 10)
        assert net.features(torch.zeros(1, channels, size, size)).flatten(1).shape[1] == flat
        expected = (
            (channels * 25 * 64 + 64)
            + (64 * 25 * 64 + 64)
            + (flat * 384 + 384)
            + (384 * 384 + 384)
            + (384 * 10 + 10)
        )
        assert sum(p.numel() for p in net.parameters()) == expected


def test_is_dp_sgd_compatible():
    assert dp_incompatibility(AbadiCNN()) is None
