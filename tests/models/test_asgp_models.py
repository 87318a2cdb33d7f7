"""ResNet-50-GN (CIFAR stem) and the Shakespeare LSTM."""

import torch
import torch.nn.functional as F

from fl_lightning.models.char_lstm import CharLSTM
from fl_lightning.models.resnet import ResNet50GN


def test_resnet50_size_and_no_batchnorm():
    m = ResNet50GN(num_classes=10)
    assert 23_400_000 < sum(p.numel() for p in m.parameters()) < 23_600_000  # ResNet-50 ≈ 23.5M
    assert not any(isinstance(x, torch.nn.modules.batchnorm._BatchNorm) for x in m.modules())
    small = ResNet50GN(in_channels=1, width=8, groups=4, blocks=[1, 1, 1, 1])
    assert small(torch.randn(2, 1, 28, 28)).shape == (2, 10)


def test_char_lstm_shapes_and_loss():
    m = CharLSTM()
    assert sum(p.numel() for p in m.parameters()) == 822_570
    x = torch.randint(0, 90, (3, 80))
    assert m(x).shape == (3, 90, 80)
    last = CharLSTM(last_only=True)
    loss = F.cross_entropy(last(x), torch.randint(0, 90, (3,)))
    loss.backward()
    assert torch.isfinite(loss)
