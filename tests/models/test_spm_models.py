import torch

from fl_lightning.models.resnet_gn import ResNet18GN
from fl_lightning.models.spm_cnn import SpmCifarCNN


def test_spm_cifar_cnn_shapes():
    net = SpmCifarCNN()
    assert net(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    fc = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in fc] == [(8192, 384), (384, 192), (192, 10)]


def test_resnet18_gn():
    net = ResNet18GN()
    assert sum(p.numel() for p in net.parameters()) == 11_173_962
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in net.modules())
    small = ResNet18GN(width=8, groups=4)
    assert small(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
