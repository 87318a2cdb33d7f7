"""Book-keeping clipping (``engine: bk``) gives the clipped per-example gradient sum of the
``functorch`` reference for every layer kind and code path it has: instantiated and ghost
norms, memory-bounded convolutions, convolution geometries, token-shaped Linear inputs,
normalisation layers, in-place activations, frozen parameters; and refuses what it cannot do."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from fl_lightning.client import book_keeping
from fl_lightning.client.dp_sgd import build_engine, noisy_mean_


def _clipped(net: nn.Module, engine: str, x: torch.Tensor, y: torch.Tensor, c: float = 0.05):
    eng = build_engine(net, engine)
    eng.configure_client(
        noise_multiplier=0.0, max_grad_norm=c, expected_batch_size=1.0, generator=torch.Generator()
    )
    return torch.cat([s.reshape(-1) for s in eng.clipped_sum(x, y, F.cross_entropy)])


def _assert_matches_functorch(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    reference = _clipped(net, "functorch", x, y)
    assert reference.abs().max() > 0
    torch.testing.assert_close(_clipped(net, "bk", x, y), reference, rtol=1e-4, atol=1e-6)


def _conv_net(cin, cout, kernel, stride, padding, dilation, side, bias=True) -> nn.Module:
    conv = nn.Conv2d(cin, cout, kernel, stride, padding, dilation, bias=bias)
    with torch.no_grad():
        out_side = conv(torch.zeros(1, cin, side, side)).shape[-1]
    return nn.Sequential(conv, nn.ReLU(), nn.Flatten(), nn.Linear(cout * out_side**2, 3))


@settings(max_examples=12, deadline=None)
@given(
    cin=st.integers(1, 3),
    cout=st.integers(1, 4),
    kernel=st.integers(1, 3),
    stride=st.integers(1, 2),
    padding=st.integers(0, 2),
    dilation=st.integers(1, 2),
    bounded=st.booleans(),
    bias=st.booleans(),
)
def test_conv_geometries_match_functorch(
    cin, cout, kernel, stride, padding, dilation, bounded, bias
):
    torch.manual_seed(0)
    net = _conv_net(cin, cout, kernel, stride, padding, dilation, side=7, bias=bias)
    x, y = torch.randn(5, cin, 7, 7), torch.randint(0, 3, (5,))
    # 0: the memory-bounded path (norms one example at a time, clipped sum as one weight grad).
    limit = 0 if bounded else book_keeping.MAX_INSTANTIATED_BYTES
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(book_keeping, "MAX_INSTANTIATED_BYTES", limit)
        _assert_matches_functorch(net, x, y)


class _Tokens(nn.Module):
    """A Linear applied to every token of a sequence (T > 1 positions), then LayerNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 6)
        self.norm = nn.LayerNorm(6)
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(torch.tanh(self.proj(x))).mean(1))


@pytest.mark.parametrize("ghost", [False, True])
def test_token_linear_and_layer_norm_match_functorch(ghost: bool, monkeypatch) -> None:
    if ghost:
        monkeypatch.setattr(book_keeping, "MAX_INSTANTIATED_BYTES", 0)
    torch.manual_seed(0)
    _assert_matches_functorch(_Tokens(), torch.randn(6, 5, 4), torch.randint(0, 3, (6,)))


def test_group_norm_and_in_place_relu_match_functorch() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1),
        nn.GroupNorm(2, 4),
        nn.ReLU(inplace=True),  # modifies the GroupNorm output that the tensor hook watches
        nn.Flatten(),
        nn.Linear(4 * 5 * 5, 3),
    )
    x, y = torch.randn(6, 2, 5, 5), torch.randint(0, 3, (6,))
    reference = _clipped(net, "functorch", x, y)
    torch.testing.assert_close(_clipped(net, "bk", x, y), reference, rtol=1e-4, atol=1e-6)


def test_frozen_parameters_are_left_out() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
    net[0].weight.requires_grad_(False)
    net[2].bias.requires_grad_(False)
    _assert_matches_functorch(net, torch.randn(8, 4), torch.randint(0, 3, (8,)))


def test_no_weight_gradients_are_computed() -> None:
    """The single backward is activation-only: parameters never get a ``.grad`` from it."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 4, 3))
    keeper = book_keeping.BookKeeper(net, list(net.parameters()))
    sums = [torch.zeros_like(p) for p in net.parameters()]
    keeper.clipped_sum_(
        torch.randn(4, 1, 6, 6),
        torch.randint(0, 3, (4,)),
        F.cross_entropy,
        max_grad_norm=1.0,
        sums=sums,
    )
    assert all(p.grad is None for p in net.parameters())
    assert all(s.abs().sum() > 0 for s in sums)


def test_unsupported_layers_are_a_config_error() -> None:
    net = nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(8, 2))
    with pytest.raises(ValueError, match=r"client.dp_sgd.engine: bk supports .*0 \(Embedding\)"):
        build_engine(net, "bk")
    grouped = nn.Sequential(nn.Conv2d(2, 2, 3, groups=2))
    assert book_keeping.unsupported_layers(grouped) == ["0 (Conv2d)"]


def test_shared_layer_is_refused() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(torch.relu(self.fc(x)))

    eng = build_engine(Twice(), "bk")
    eng.configure_client(
        noise_multiplier=0.0, max_grad_norm=1.0, expected_batch_size=1.0, generator=None
    )
    with pytest.raises(RuntimeError, match="used twice"):
        eng.clipped_sum(torch.randn(4, 3), torch.randint(0, 3, (4,)), F.cross_entropy)


def _brute_force_clipped_sum(net: nn.Module, x: torch.Tensor, y: torch.Tensor, c: float) -> list:
    """Σ_i min(1, C/(‖g_i‖+1e-6)) g_i from one ordinary backward per example (no engine)."""
    params = [p for p in net.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in params]
    for i in range(len(x)):
        grads = torch.autograd.grad(F.cross_entropy(net(x[i : i + 1]), y[i : i + 1]), params)
        norm = torch.cat([g.reshape(-1) for g in grads]).norm()
        factor = min(1.0, c / (float(norm) + 1e-6))
        for t, g in zip(total, grads):
            t.add_(g, alpha=factor)
    return total


@pytest.mark.parametrize("chunk", [2, book_keeping.CONV_CHUNK])
def test_onednn_and_chunked_conv_gradients_match_a_per_example_loop(chunk, monkeypatch) -> None:
    """The conv paths of issue 37: oneDNN's grouped kernels (in_channels ≥
    ``ONEDNN_MIN_IN_CHANNELS``) next to ATen's (fewer), per-example gradients kept as chunks
    (``CONV_CHUNK`` = 2: chunks of 2, 2, 1 examples) or as one; the clipped sum and the noisy
    release (same generator) equal those of a brute-force per-example loop."""
    monkeypatch.setattr(book_keeping, "CONV_CHUNK", chunk)
    wide = book_keeping.ONEDNN_MIN_IN_CHANNELS
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(2, wide, 3, padding=1),  # ATen path (2 input channels)
        nn.ReLU(),
        nn.Conv2d(wide, 4, 3, padding=1),  # oneDNN path
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 6 * 6, 3),
    )
    x, y = torch.randn(5, 2, 6, 6), torch.randint(0, 3, (5,))
    c = 0.05
    reference = _brute_force_clipped_sum(net, x, y, c)
    assert all(r.abs().max() > 0 for r in reference)
    eng = build_engine(net, "bk")
    eng.configure_client(
        noise_multiplier=1.3,
        max_grad_norm=c,
        expected_batch_size=4.0,
        generator=torch.Generator().manual_seed(7),
    )
    for got, want in zip(eng.clipped_sum(x, y, F.cross_entropy), reference):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    eng.compute_gradients(x, y, F.cross_entropy)
    noisy_mean_(
        reference, std=1.3 * c, expected_batch_size=4.0, generator=torch.Generator().manual_seed(7)
    )
    for p, want in zip(eng.params, reference):
        torch.testing.assert_close(p.grad, want, rtol=1e-4, atol=1e-6)
