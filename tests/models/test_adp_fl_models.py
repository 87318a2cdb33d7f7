"""ADP-FL's models: exact parameter counts of the paper's Table 1 where recoverable."""

import pytest
import torch

from fl_lightning.models.emnist_cnn import EmnistCNN
from fl_lightning.models.lstm import MnistLSTM
from fl_lightning.models.vgg import VGG9


def count(m):
    return sum(p.numel() for p in m.parameters())


def test_mnist_lstm_has_24714_parameters_in_both_implementations():
    for impl in ("torch", "opacus"):
        m = MnistLSTM(impl=impl)
        assert count(m) == 24_714
        assert m(torch.randn(3, 1, 28, 28)).shape == (3, 10)


def test_vgg9_without_batchnorm_has_3491530_parameters():
    m = VGG9()
    assert count(m) == 3_491_530
    assert not any(isinstance(x, torch.nn.modules.batchnorm._BatchNorm) for x in m.modules())
    assert m(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_a_narrow_vgg9_keeps_the_layers():
    """``width``/``hidden`` narrow the paper's model without changing its layers (the config
    tests' shrink): six 3×3 convolutions in widths w, 2w, 4w, 4w, 8w, 8w and three FCs."""
    wide, narrow = VGG9(), VGG9(width=4, hidden=16)
    kinds = [type(m) for m in wide.modules()]
    assert kinds == [type(m) for m in narrow.modules()]
    convs = [m.out_channels for m in narrow.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs == [4, 8, 16, 16, 32, 32]
    assert count(narrow) < count(wide) / 100
    assert narrow(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    with pytest.raises(ValueError, match="client.net.init_args.width"):
        VGG9(width=0)


def test_emnist_cnn_is_about_0_2m_parameters():
    m = EmnistCNN()
    assert 180_000 <= count(m) <= 230_000
    assert m(torch.randn(2, 1, 28, 28)).shape == (2, 62)


def test_opacus_lstm_gives_per_sample_gradients():
    from opacus import GradSampleModule

    m = GradSampleModule(MnistLSTM(impl="opacus"))
    loss = m(torch.randn(4, 1, 28, 28)).sum()
    loss.backward()
    assert all(p.grad_sample.shape[0] == 4 for p in m.parameters())
