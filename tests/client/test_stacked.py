"""The stacked model (client/stacked.py) computes, for models the core has never seen, each
client's own gradients, fused SGD steps and DP-SGD clipped sums, and says why when it cannot."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning.client.dp_sgd import build_engine
from fl_lightning.client.stacked import StackedNet, stack_blocker
from fl_lightning.client.stacked_layers import LowRankSteps


class UserCNN(nn.Module):
    """A user's CNN: functional pooling, an in-place ReLU, ``view(x.size(0), -1)``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 6, 3, padding=1, padding_mode="reflect")
        self.gn = nn.GroupNorm(2, 6)
        self.fc1 = nn.Linear(6 * 4 * 4, 12)
        self.fc2 = nn.Linear(12, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x), inplace=True), 2)
        x = F.avg_pool2d(torch.tanh(self.gn(self.conv2(x))), 2)
        x = x.view(x.size(0), -1)
        h = F.relu(self.fc1(x))
        return self.fc2(h + 0.5 * h.sigmoid())  # a branch


class SeqNet(nn.Module):
    """Conv1d over a sequence, LayerNorm, a Linear applied per position, mean over positions."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(3, 5, 3, padding=1)
        self.norm = nn.LayerNorm(5)
        self.proj = nn.Linear(5, 7)
        self.head = nn.Linear(7, 10, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x).transpose(1, 2)  # (B, L, 5)
        h = torch.relu(self.proj(self.norm(h)))  # per position
        return self.head(h.mean(1))


class EmbedNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 6)
        self.out = nn.Linear(6, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.emb(x).mean(1))


class RecurrentNet(nn.Module):
    """A time-major two-layer bidirectional LSTM whose head reads the outputs and h_n."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(3, 5, num_layers=2, bidirectional=True)
        self.head = nn.Linear(10, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, (h, _) = self.lstm(x.transpose(0, 1))  # (L, B, 10)
        return self.head(out[-1] + out.mean(0)) + h.sum(0).sum(-1, keepdim=True)


def _inputs(name: str, n: int, g: torch.Generator) -> torch.Tensor:
    if name == "user_cnn":
        return torch.randn(n, 1, 16, 16, generator=g)
    if name == "seq":
        return torch.randn(n, 3, 9, generator=g)
    if name == "lstm":
        return torch.randn(n, 4, 3, generator=g)
    return torch.randint(0, 20, (n, 5), generator=g)


MODELS = {"user_cnn": UserCNN, "seq": SeqNet, "embed": EmbedNet, "lstm": RecurrentNet}
K, N = 3, 4


def _setup(name: str, dp: bool = False):
    torch.manual_seed(0)
    net = MODELS[name]()
    names = [n for n, p in net.named_parameters()]
    stacked = StackedNet(net, names, dp=dp)
    g = torch.Generator().manual_seed(1)
    params = {
        n: p.detach() + 0.1 * torch.randn(K, *p.shape, generator=g)
        for n, p in net.named_parameters()
    }
    x = _inputs(name, N * K, g)  # row n·K + k: example n of client k
    y = torch.randint(0, 10, (N * K,), generator=g)
    mask = torch.ones(N, K)
    mask[2:, 1] = 0  # client 1 has two real examples; the rest is padding
    mask[:, 2] = 0
    mask[0, 2] = 1  # client 2 has one
    return net, names, stacked, params, x, y, mask.reshape(-1)


def _own(net: nn.Module, params: dict, k: int, names: list[str]) -> nn.Module:
    own = copy.deepcopy(net)
    with torch.no_grad():
        for n, p in own.named_parameters():
            p.copy_(params[n][k])
    return own


@pytest.mark.parametrize("name", list(MODELS))
def test_gradients_equal_each_clients_own(name: str) -> None:
    net, names, stacked, params, x, y, mask = _setup(name)
    stacked.check(params, x)
    leaves = {n: p.clone().requires_grad_(True) for n, p in params.items()}
    per = F.cross_entropy(stacked.forward(leaves, x), y, reduction="none") * mask
    loss = (per.view(N, K).sum(0) / mask.view(N, K).sum(0)).sum()
    grads = dict(zip(leaves, torch.autograd.grad(loss, list(leaves.values()))))
    for k in range(K):
        own = _own(net, params, k, names)
        rows = [n * K + k for n in range(N) if mask[n * K + k] > 0]
        F.cross_entropy(own(x[rows]), y[rows]).backward()
        for n, p in own.named_parameters():
            torch.testing.assert_close(grads[n][k], p.grad, rtol=1e-5, atol=1e-6)


def test_fused_sgd_step_equals_the_plain_step() -> None:
    net, names, stacked, params, x, y, mask = _setup("user_cnn")
    lr = 0.3
    want = {}
    leaves = {n: p.clone().requires_grad_(True) for n, p in params.items()}
    per = F.cross_entropy(stacked.forward(leaves, x), y, reduction="none") * mask
    grads = torch.autograd.grad(per.sum(), list(leaves.values()))
    for (n, p), g in zip(params.items(), grads):
        want[n] = p - lr * g
    fused = {n: p.clone() for n, p in params.items()}
    leaves = {n: p.detach().requires_grad_(True) for n, p in fused.items()}
    per = F.cross_entropy(stacked.forward(leaves, x, fused_lr=lr), y, reduction="none") * mask
    grads = torch.autograd.grad(per.sum(), list(leaves.values()), allow_unused=True)
    for (n, p), g in zip(fused.items(), grads):
        if g is None:  # a Linear layer: stepped in place during the backward pass
            assert n.startswith("fc")
        else:
            p.sub_(lr * g)
        torch.testing.assert_close(p, want[n], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["user_cnn", "seq", "embed", "lstm"])
def test_low_rank_steps_equal_the_fused_steps(name: str) -> None:
    """Three plain SGD steps from shared start weights, the last one by a suffix of the
    clients (one left early): the Linear layers kept as factors (LowRankSteps, any size) end
    where the fused step-by-step update ends, and so do the layers updated as usual."""
    net, names, stacked, _, x, y, mask = _setup(name)
    start = {n: p.detach().clone() for n, p in net.named_parameters()}
    lr = 0.3

    def run(low_rank: LowRankSteps | None) -> dict[str, torch.Tensor]:
        params = {n: p.unsqueeze(0).repeat(K, *[1] * p.dim()) for n, p in start.items()}
        for t in range(3):
            j0 = 1 if t == 2 else 0  # client 0 has two steps, clients 1 and 2 three
            rows = (torch.arange(N * K) % K) >= j0
            xt, yt, mt = x[rows], y[rows], mask[rows]
            active = {n: p[j0:] for n, p in params.items()}
            leaves = {n: p.data.requires_grad_(True) for n, p in active.items()}
            out = stacked.forward(leaves, xt, fused_lr=lr, low_rank=low_rank)
            per = F.cross_entropy(out, yt, reduction="none") * mt
            grads = torch.autograd.grad(per.sum(), list(leaves.values()), allow_unused=True)
            with torch.no_grad():
                for p, g in zip(active.values(), grads):
                    if g is not None:
                        p.sub_(lr * g)
        if low_rank is not None:
            low_rank.finish_(params)
        return params

    want = run(None)
    views = {n: p for n, p in start.items() if p.dim() == 2}
    low_rank = LowRankSteps(views, lr, clients=K, examples=3 * N, ratio=float("inf"))
    got = run(low_rank)
    linear = [n for n, m in net.named_modules() if isinstance(m, nn.Linear)]
    assert sorted(k for k, used in low_rank.use.items() if used) == sorted(
        f"{n}.weight" for n in linear
    )
    for n in names:
        torch.testing.assert_close(got[n], want[n], rtol=1e-5, atol=1e-6)
        assert not torch.equal(want[n], start[n].expand_as(want[n]))


def test_low_rank_rule_keeps_small_layers_stacked() -> None:
    """The history rule: rows · (in + out) ≤ ratio · in · out picks the wide Linear layer
    and leaves a narrow head (more history than weights) to the stacked update."""
    net = nn.Sequential(nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 2))
    stacked = StackedNet(net, [n for n, _ in net.named_parameters()])
    start = {n: p.detach() for n, p in net.named_parameters() if p.dim() == 2}
    low_rank = LowRankSteps(start, 0.1, clients=2, examples=20)
    params = {
        n: p.detach().unsqueeze(0).repeat(2, *[1] * p.dim()) for n, p in net.named_parameters()
    }
    stacked.forward(params, torch.randn(2 * 5, 256), fused_lr=0.1, low_rank=low_rank)
    assert low_rank.use == {"0.weight": True, "2.weight": False}


@pytest.mark.parametrize("name", ["user_cnn", "seq", "embed", "lstm"])
def test_dp_clipped_sums_equal_the_sequential_engine(name: str) -> None:
    """Σ_n clip_C(∇ℓ_kn) per client, against the functorch engine on each client's own model."""
    net, names, stacked, params, x, y, mask = _setup(name, dp=True)
    clip = 0.05  # small: every example is clipped
    sums, losses = stacked.clipped_sums(
        params,
        x,
        lambda out: F.cross_entropy(out, y, reduction="none") * mask,
        n=N,
        max_grad_norm=clip,
    )
    for k in range(K):
        own = _own(net, params, k, names)
        engine = build_engine(own, "functorch")
        engine.configure_client(
            noise_multiplier=0.0,
            max_grad_norm=clip,
            expected_batch_size=1.0,
            generator=torch.Generator(),
        )
        rows = [n * K + k for n in range(N) if mask[n * K + k] > 0]
        want = engine.clipped_sum(x[rows], y[rows], lambda o, t: F.cross_entropy(o, t))
        for got, ref in zip(sums, want):
            torch.testing.assert_close(got[k], ref, rtol=1e-5, atol=1e-6)
        expected_loss = F.cross_entropy(own(x[rows]), y[rows], reduction="sum")
        torch.testing.assert_close(losses.view(N, K)[:, k].sum(), expected_loss.detach())


class _Rnn(nn.Module):
    """A recurrent layer (given the initial state or not) and a Linear head on the last step."""

    def __init__(self, rnn: nn.Module, with_state: bool) -> None:
        super().__init__()
        self.rnn, self.with_state = rnn, with_state
        self.lstm = "LSTM" in type(rnn).__name__
        dirs = 2 if rnn.bidirectional else 1
        self.head = nn.Linear(dirs * rnn.hidden_size, 10)
        if with_state:  # a start state computed from the input by a layer of its own
            self.init = nn.Linear(rnn.input_size, rnn.num_layers * dirs * rnn.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq = x if self.rnn.batch_first else x.transpose(0, 1)
        state = None
        if self.with_state:  # its gradient reaches self.init through ∂ℓ/∂h_0
            h = torch.tanh(self.init(x[:, 0])).view(len(x), -1, self.rnn.hidden_size)
            h = h.transpose(0, 1).contiguous()
            state = (h, torch.tanh(h)) if self.lstm else h
        out, _ = self.rnn(seq, state)
        return self.head(out[:, -1] if self.rnn.batch_first else out[-1])


def _rnn(kind: str) -> nn.Module:
    from opacus.layers import DPGRU, DPLSTM, DPRNN

    return {
        "gru": lambda: nn.GRU(3, 4, batch_first=True),
        "gru_time_major_no_bias_state": lambda: nn.GRU(3, 4, bias=False),
        "rnn_relu_2_layers_bidirectional": lambda: nn.RNN(
            3, 4, num_layers=2, nonlinearity="relu", bidirectional=True, batch_first=True
        ),
        "lstm_no_bias_state": lambda: nn.LSTM(3, 4, bias=False, batch_first=True),
        "rnn_time_major_state": lambda: nn.RNN(3, 4),
        "dplstm_2_layers": lambda: DPLSTM(3, 4, num_layers=2, batch_first=True),
        "dpgru_bidirectional_state": lambda: DPGRU(3, 4, bidirectional=True, batch_first=True),
        "dprnn": lambda: DPRNN(3, 4, batch_first=True),
    }[kind]()


@pytest.mark.parametrize(
    "kind",
    [
        "gru",
        "gru_time_major_no_bias_state",
        "rnn_relu_2_layers_bidirectional",
        "rnn_time_major_state",
        "lstm_no_bias_state",
        "dplstm_2_layers",
        "dpgru_bidirectional_state",
        "dprnn",
    ],
)
@pytest.mark.parametrize("one_client_a_chunk", [False, True])
def test_recurrent_layers_give_each_clients_gradients_and_clipped_sums(
    kind: str, one_client_a_chunk: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GRU / RNN / LSTM variants and Opacus' drop-ins: each client's own forward
    (``check``), gradients, and Σ_n clip_C(∇ℓ_kn) against per-example backward passes of each
    client's own model (what every DP-SGD engine computes); the LSTM and RNN recurrences over
    all K clients at once or one client a chunk."""
    from fl_lightning.client import stacked_recurrent

    if one_client_a_chunk:
        monkeypatch.setattr(stacked_recurrent, "CHUNK_BYTES", 1)
    torch.manual_seed(0)
    net = _Rnn(_rnn(kind), with_state=kind.endswith("state"))
    names = [n for n, _ in net.named_parameters()]
    g = torch.Generator().manual_seed(1)
    params = {
        n: p.detach() + 0.2 * torch.randn(K, *p.shape, generator=g)
        for n, p in net.named_parameters()
    }
    x = torch.randn(N * K, 5, 3, generator=g)
    y = torch.randint(0, 10, (N * K,), generator=g)
    StackedNet(net, names).check(params, x)
    leaves = {n: p.clone().requires_grad_(True) for n, p in params.items()}
    out = StackedNet(net, names).forward(leaves, x)
    grads = torch.autograd.grad(F.cross_entropy(out, y, reduction="sum"), list(leaves.values()))
    clip = 0.1
    sums, _ = StackedNet(net, names, dp=True).clipped_sums(
        params, x, lambda o: F.cross_entropy(o, y, reduction="none"), n=N, max_grad_norm=clip
    )
    clipped = 0
    for k in range(K):
        own = _own(net, params, k, names)
        want_grad = [torch.zeros_like(p) for p in own.parameters()]
        want_sum = [torch.zeros_like(p) for p in own.parameters()]
        for row in range(k, N * K, K):
            own.zero_grad()
            F.cross_entropy(own(x[row : row + 1]), y[row : row + 1]).backward()
            per = [p.grad.clone() for p in own.parameters()]
            norm = torch.sqrt(sum(t.square().sum() for t in per))
            factor = min(1.0, clip / (float(norm) + 1e-6))
            clipped += factor < 1
            for a, b, t in zip(want_grad, want_sum, per):
                a += t
                b += factor * t
        for i in range(len(names)):
            torch.testing.assert_close(grads[i][k], want_grad[i], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(sums[i][k], want_sum[i], rtol=1e-5, atol=1e-6)
    assert clipped > 0


class _OwnParameter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


@pytest.mark.parametrize(
    ("net", "dp", "reason"),
    [
        (nn.Sequential(nn.Linear(4, 10), nn.BatchNorm1d(10)), False, "BatchNorm1d"),
        (nn.Sequential(nn.LSTM(4, 10, proj_size=3)), False, "LSTM with proj_size"),
        (nn.Sequential(nn.LSTMCell(4, 10)), False, "LSTMCell"),
        (nn.Sequential(nn.Linear(4, 10), _OwnParameter()), False, "_OwnParameter"),
        (nn.Sequential(nn.Embedding(5, 10, padding_idx=0)), True, "padding_idx"),
        (nn.Sequential(nn.Conv2d(2, 4, 3, groups=2)), True, "groups"),
    ],
)
def test_stack_blocker_says_why(net: nn.Module, dp: bool, reason: str) -> None:
    assert reason in stack_blocker(net, dp=dp)


class _MixesExamples(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x - x.mean(0))  # batch statistics without a BatchNorm


def test_check_catches_a_forward_that_mixes_examples() -> None:
    net = _MixesExamples()
    names = [n for n, _ in net.named_parameters()]
    stacked = StackedNet(net, names)
    params = {n: p.detach().unsqueeze(0) for n, p in net.named_parameters()}
    with pytest.raises(ValueError, match="mixes the examples"):
        stacked.check(params, torch.randn(3, 4))
