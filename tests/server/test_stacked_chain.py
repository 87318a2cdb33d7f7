"""StackedChain: per-client gradients and SGD steps equal autograd's on each client's own copy
(with padded examples masked out), and models that are not chains are reported, not run."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning.models.cnn import CifarCNN, MnistCNN
from fl_lightning.models.mlp import MLP
from fl_lightning.server.stacked_chain import build_chain, from_grouped, to_grouped

NETS = {
    "mnist_cnn": (lambda: MnistCNN(image_size=8, channels=(4, 8), hidden=16), (1, 8, 8)),
    "cifar_cnn": (lambda: CifarCNN(in_channels=3, image_size=16), (3, 16, 16)),
    "mlp": (lambda: MLP(input_dim=64, hidden=(16, 12)), (1, 8, 8)),
    "functional_relu": (
        lambda: _FunctionalNet(),
        (2, 6, 6),
    ),
}


class _FunctionalNet(nn.Module):
    """A chain written with functional calls (F.relu, torch.flatten) and a strided conv."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, stride=2, padding=1)
        self.fc = nn.Linear(27, 10, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(F.relu(self.conv(x)), 1))


def _setup(name: str, k: int = 3, n: int = 5):
    make, shape = NETS[name]
    torch.manual_seed(0)
    nets = [make() for _ in range(k)]  # different weights per client
    names = [nm for nm, _ in nets[0].named_parameters()]
    stacked = {
        nm: torch.stack([dict(net.named_parameters())[nm].detach() for net in nets]) for nm in names
    }
    x = torch.randn(k, n, *shape)
    y = torch.randint(0, 10, (k, n))
    mask = torch.ones(k, n)
    mask[0, 3:] = 0  # client 0 has 3 real examples, client 2 none (a frozen client)
    mask[2] = 0
    return nets, names, stacked, x, y, mask


def _reference_grads(net: nn.Module, x, y, m) -> tuple[list[torch.Tensor], torch.Tensor]:
    net.zero_grad()
    real = m.bool()
    if real.any():
        loss = F.cross_entropy(net(x[real]), y[real])
        loss.backward()
    else:
        loss = torch.tensor(0.0)
    return [
        p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in net.parameters()
    ], loss.detach()


@pytest.mark.parametrize("name", list(NETS))
def test_gradients_equal_autograd_per_client(name: str) -> None:
    nets, names, stacked, x, y, mask = _setup(name)
    chain, why = build_chain(nets[0], names)
    assert why is None and chain is not None
    grads = {nm: torch.empty_like(p) for nm, p in stacked.items()}
    before = {nm: p.clone() for nm, p in stacked.items()}
    losses = chain.step(stacked, x, y, mask, lr=0.1, grads=grads)
    for nm in names:  # with grads given, the weights are left alone
        assert torch.equal(stacked[nm], before[nm])
    for j, net in enumerate(nets):
        ref, loss = _reference_grads(net, x[j], y[j], mask[j])
        for nm, g in zip(names, ref):
            torch.testing.assert_close(grads[nm][j], g, rtol=1e-4, atol=1e-6)
        assert float(losses[j]) == pytest.approx(float(loss), rel=1e-5, abs=1e-7)
    assert all(float(grads[nm][2].abs().max()) == 0.0 for nm in names)


@pytest.mark.parametrize("name", list(NETS))
def test_fused_sgd_step_equals_torch_sgd(name: str) -> None:
    nets, names, stacked, x, y, mask = _setup(name)
    chain, _ = build_chain(nets[0], names)
    frozen = {nm: p[2].clone() for nm, p in stacked.items()}
    for _ in range(2):
        chain.step(stacked, x, y, mask, lr=0.1)
    for j, net in enumerate(copy.deepcopy(nets)):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            if mask[j].any():
                real = mask[j].bool()
                F.cross_entropy(net(x[j][real]), y[j][real]).backward()
                opt.step()
        for nm, p in net.named_parameters():
            torch.testing.assert_close(stacked[nm][j], p.detach(), rtol=1e-4, atol=1e-6)
    for nm in names:  # a client without real examples is not moved at all
        assert torch.equal(stacked[nm][2], frozen[nm])


def test_grouped_layout_round_trip() -> None:
    x = torch.randn(3, 4, 2, 5, 6)
    g = to_grouped(x)
    assert g.shape == (4, 6, 5, 6) and g.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(g[:, 2:4], x[1], rtol=0, atol=0)
    torch.testing.assert_close(from_grouped(g, 3), x, rtol=0, atol=0)


class _Skip(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + x


@pytest.mark.parametrize(
    ("net", "reason"),
    [
        (_Skip(), "not a link of a single chain"),
        (nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 2)), "GELU"),
        (nn.Sequential(nn.Conv2d(1, 2, 3), nn.Linear(4, 2)), "no Flatten"),
        (nn.Sequential(nn.Flatten(), nn.Linear(4, 4), nn.Conv2d(1, 1, 1)), "after a Linear"),
        (nn.Sequential(nn.Conv2d(1, 2, 3, padding="same"), nn.Flatten()), "padding"),
        (nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU()), "does not end in a Linear"),
    ],
)
def test_not_a_chain_says_why(net: nn.Module, reason: str) -> None:
    chain, why = build_chain(net, [n for n, _ in net.named_parameters()])
    assert chain is None and reason in why
