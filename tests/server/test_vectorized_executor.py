"""The vectorised executor produces the sequential executor's updates (FedAvg, DP-FedAvg,
DP-SGD clients, momentum, unequal client sizes) and falls back, saying why, where it cannot."""

from __future__ import annotations

import copy
import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from fl_lightning.client.config import DPSGDConfig
from fl_lightning.client.local_loop import LocalTrainer
from fl_lightning.client.module import ClientModule
from fl_lightning.models.char_lstm import CharLSTM
from fl_lightning.models.cnn import CifarCNN, MnistCNN
from fl_lightning.models.lstm import MnistLSTM
from fl_lightning.models.mlp import MLP
from fl_lightning.records import ClientPlan, RoundContext
from fl_lightning.server.executor import SequentialExecutor
from fl_lightning.server.round import train_cohort
from fl_lightning.server.vectorized_executor import VectorizedExecutor
from fl_lightning.strategies.dp_fedavg import DPFedAvg
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.testing import round_context
from fl_lightning.utils.flat import flatten, trainable_parameters


def _data(sizes: list[int], shape=(1, 8, 8), seed: int = 0, device: str = "cpu") -> SimpleNamespace:
    g = torch.Generator().manual_seed(seed)
    total = sum(sizes)
    x = torch.randn(total, *shape, generator=g).to(device)
    y = torch.randint(0, 10, (total,), generator=g).to(device)
    perm = torch.randperm(total, generator=g).to(device)
    bounds = torch.tensor([0, *sizes]).cumsum(0).tolist()
    indices = [perm[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    # only the data module's accessors: both executors read a client's examples through them
    return SimpleNamespace(
        client_sizes=lambda: np.array(sizes),
        client_data=lambda c: (x[indices[c]], y[indices[c]]),
    )


def _ctx(
    client: ClientModule, cohort: list[int], round_idx: int = 3, device: str = "cpu"
) -> RoundContext:
    params = flatten(trainable_parameters(client.net)).to(device)
    return round_context(params, cohort, num_clients=len(cohort), round_idx=round_idx,
                         total_rounds=5, seed=7, sample_rate=1.0)  # fmt: skip


def _both(  # noqa: PLR0913
    net: nn.Module, strategy_factory, data, cohort, low_rank_ratio=0.5, device="cpu", **client_kw
):
    out = {}
    for name, cls in (("seq", SequentialExecutor), ("vec", VectorizedExecutor)):
        torch.manual_seed(0)
        client = ClientModule(copy.deepcopy(net), num_classes=10, **client_kw)
        trainer = LocalTrainer(client, device)
        if cls is VectorizedExecutor:
            executor = cls(trainer, low_rank_ratio=low_rank_ratio)
        else:
            executor = cls(trainer)
        ctx = _ctx(client, cohort, device=device)
        out[name] = list(train_cohort(executor, strategy_factory(), cohort, ctx, data))
        if cls is VectorizedExecutor:
            assert executor.last_fallback_reason is None
            out["path"] = executor.last_path
            out["low_rank"] = executor.last_low_rank
    if low_rank_ratio != 0.5:
        return out["seq"], out["vec"], out["low_rank"]
    return out["seq"], out["vec"], out["path"]


class _Residual(nn.Module):
    """Not a chain (a skip connection), functional activations."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.head = nn.Linear(64, 16), nn.Linear(16, 16), nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x.flatten(1)))
        return self.head(h + torch.tanh(self.b(h)))


class _RowRnn(nn.Module):
    """A user's recurrent classifier over the image rows: nn.RNN / nn.GRU (or Opacus' drop-ins)
    and a Linear head on the last layer's h_n."""

    def __init__(self, kind: str, **kw) -> None:  # noqa: ANN003
        super().__init__()
        if kind.startswith("DP"):
            from opacus import layers

            self.rnn = getattr(layers, kind)(8, 6, batch_first=True, **kw)
        else:
            self.rnn = getattr(nn, kind)(8, 6, batch_first=True, **kw)
        self.dirs = 2 if kw.get("bidirectional") else 1
        self.head = nn.Linear(6 * self.dirs, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h = self.rnn(x.squeeze(1))
        return self.head(torch.cat(list(h[-self.dirs :]), -1))  # the last layer's directions


def _user_cnn() -> nn.Module:
    from tests.client.test_stacked import UserCNN

    return UserCNN()


CASES = {
    "fedavg_mlp": (lambda: MLP(input_dim=64, hidden=(16,)), FedAvg, {}),
    "fedavg_cnn_plain_sgd": (
        lambda: MnistCNN(image_size=8, channels=(4, 8), hidden=16),
        FedAvg,
        {},
    ),
    "fedavg_cifar_cnn_momentum": (
        lambda: CifarCNN(in_channels=3, image_size=16),
        FedAvg,
        {"momentum": 0.9},
    ),
    "fedavg_tanh_chain_wd": (
        lambda: nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.Tanh(), nn.Linear(16, 10)),
        FedAvg,
        {"weight_decay": 1e-2, "local_epochs": 2},
    ),
    "fedavg_residual": (_Residual, FedAvg, {"momentum": 0.5}),
    "fedavg_user_cnn_fused_sgd": (_user_cnn, FedAvg, {}),
    "fedavg_cnn_momentum_wd": (
        lambda: MnistCNN(image_size=8, channels=(4, 8), hidden=16),
        FedAvg,
        {"momentum": 0.9, "weight_decay": 1e-3, "local_epochs": 2},
    ),
    "dp_fedavg_cnn": (
        lambda: MnistCNN(image_size=8, channels=(4, 8), hidden=16),
        lambda: DPFedAvg(clip_norm=0.5, noise_multiplier=1.0),
        {},
    ),
    "dp_sgd_clients": (
        lambda: MnistCNN(image_size=8, channels=(4, 8), hidden=16),
        FedAvg,
        {"dp_sgd": DPSGDConfig(noise_multiplier=0.8, max_grad_norm=0.5, engine="functorch")},
    ),
    "dp_sgd_clients_philox": (
        lambda: MnistCNN(image_size=8, channels=(4, 8), hidden=16),
        FedAvg,
        {"dp_sgd": DPSGDConfig(noise_multiplier=0.8, max_grad_norm=0.5, noise_rng="philox")},
    ),
    "fedavg_mnist_lstm_fused_sgd": (lambda: MnistLSTM(input_size=8, hidden_size=6), FedAvg, {}),
    "fedavg_mnist_lstm_momentum_wd": (
        lambda: MnistLSTM(input_size=8, hidden_size=6),
        FedAvg,
        {"momentum": 0.9, "weight_decay": 1e-3, "local_epochs": 2},
    ),
    # DP-SGD needs Opacus' DPLSTM (ClientModule refuses nn.LSTM); engine auto: opacus
    "dp_sgd_mnist_dplstm": (
        lambda: MnistLSTM(input_size=8, hidden_size=6, impl="opacus"),
        FedAvg,
        {"dp_sgd": DPSGDConfig(noise_multiplier=0.8, max_grad_norm=0.3)},
    ),
    "dp_sgd_mnist_dplstm_momentum": (
        lambda: MnistLSTM(input_size=8, hidden_size=6, impl="opacus"),
        lambda: DPFedAvg(clip_norm=0.5, noise_multiplier=1.0),
        {"momentum": 0.5, "dp_sgd": DPSGDConfig(noise_multiplier=0.8, max_grad_norm=0.3)},
    ),
    # nn.RNN (RNNSteps) and nn.GRU (autograd loop); DP-SGD: Opacus' DPRNN / DPGRU (auto: opacus)
    "fedavg_user_rnn_fused_sgd": (lambda: _RowRnn("RNN"), FedAvg, {}),
    "fedavg_user_rnn_relu_2_layers_bidirectional_momentum_wd": (
        lambda: _RowRnn("RNN", nonlinearity="relu", num_layers=2, bidirectional=True),
        FedAvg,
        {"momentum": 0.9, "weight_decay": 1e-3, "local_epochs": 2},
    ),
    "dp_sgd_dprnn": (
        lambda: _RowRnn("DPRNN"),
        FedAvg,
        {"dp_sgd": DPSGDConfig(noise_multiplier=0.8, max_grad_norm=0.3)},
    ),
    "dp_sgd_dprnn_momentum": (
        lambda: _RowRnn("DPRNN"),
        lambda: DPFedAvg(clip_norm=0.5, noise_multiplier=1.0),
        {"momentum": 0.5, "dp_sgd": DPSGDConfig(noise_multiplier=0.8, max_grad_norm=0.3)},
    ),
    "fedavg_user_gru_momentum": (lambda: _RowRnn("GRU"), FedAvg, {"momentum": 0.9}),
    "dp_sgd_dpgru": (
        lambda: _RowRnn("DPGRU"),
        FedAvg,
        {"dp_sgd": DPSGDConfig(noise_multiplier=0.8, max_grad_norm=0.3)},
    ),
    "dp_sgd_opacus_momentum": (
        lambda: MLP(input_dim=64, hidden=(16,)),
        lambda: DPFedAvg(clip_norm=0.5, noise_multiplier=1.0),
        {"momentum": 0.5, "dp_sgd": DPSGDConfig(noise_multiplier=0.8, engine="opacus")},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_same_updates_as_sequential(case: str) -> None:
    _same_updates_as_sequential(case)


@pytest.mark.parametrize(
    "case",
    [
        "fedavg_mnist_lstm_momentum_wd",
        "dp_sgd_mnist_dplstm_momentum",
        "fedavg_user_rnn_relu_2_layers_bidirectional_momentum_wd",
        "dp_sgd_dprnn",
    ],
)
@pytest.mark.parametrize("clients_a_chunk", [1, 3])
def test_recurrence_in_client_chunks_equals_sequential(
    case: str, clients_a_chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The LSTM / RNN recurrences run over chunks of clients on CPU (their W_hh cache-hot):
    chunks of 1 client, and of 3 (the 4-client cohort's last chunk holds 1), give the
    sequential executor's updates."""
    from fl_lightning.client import stacked_recurrent

    net = CASES[case][0]()
    w_hh = next(p for n, p in net.named_parameters() if "weight_hh" in n)
    monkeypatch.setattr(
        stacked_recurrent, "CHUNK_BYTES", clients_a_chunk * w_hh.numel() * w_hh.element_size()
    )
    stacked = torch.zeros(4, *w_hh.shape)
    assert len(stacked_recurrent.client_chunks(stacked)) == -(-4 // clients_a_chunk)
    _same_updates_as_sequential(case)


def _same_updates_as_sequential(case: str, device: str = "cpu") -> None:
    make_net, strategy, kw = CASES[case]
    torch.manual_seed(1)
    net = make_net()
    sizes = [13, 30, 7, 30, 22]
    shape = (3, 16, 16) if "cifar" in case else (1, 16, 16) if "user_cnn" in case else (1, 8, 8)
    data = _data(sizes, shape=shape, device=device)
    steps = {(n + 5) // 6 * kw.get("local_epochs", 1) for n in sizes}
    assert len(steps) > 1  # clients with different numbers of local steps
    cohort = [3, 0, 4, 1]
    seq, vec, path = _both(net, strategy, data, cohort, lr=0.1, batch_size=6, device=device, **kw)
    assert path == "stacked"
    assert [u.client_id for u in vec] == cohort
    for s, v in zip(seq, vec):
        assert s.num_examples == v.num_examples
        assert s.metrics.keys() == v.metrics.keys()
        for key in s.metrics:
            assert v.metrics[key] == pytest.approx(s.metrics[key], rel=1e-4, abs=1e-6)
        assert s.dp_steps == v.dp_steps
        torch.testing.assert_close(v.delta, s.delta, rtol=1e-4, atol=2e-5)
        assert v.loss == pytest.approx(s.loss, rel=1e-4, nan_ok=True)
        assert s.delta.abs().sum() > 0


@pytest.mark.parametrize("case", ["fedavg_mlp", "fedavg_user_cnn_fused_sgd", "fedavg_residual"])
@pytest.mark.parametrize("ratio", [float("inf"), 0.0])
def test_low_rank_linear_steps_equal_sequential(case: str, ratio: float) -> None:
    """Plain SGD with every Linear layer kept as low-rank factors over the bucket (ratio ∞;
    clients of 1 to 5 steps, so later steps run a suffix of the bucket), or none (0): the
    sequential executor's updates."""
    make_net, strategy, _ = CASES[case]
    torch.manual_seed(1)
    net = make_net()
    sizes = [13, 30, 7, 30, 22]
    data = _data(sizes, shape=(1, 16, 16)) if "user_cnn" in case else _data(sizes)
    cohort = [3, 0, 4, 1]
    seq, vec, low_rank = _both(
        net, strategy, data, cohort, low_rank_ratio=ratio, lr=0.1, batch_size=6
    )
    linear = [f"{n}.weight" for n, m in net.named_modules() if isinstance(m, nn.Linear)]
    assert sorted(low_rank) == (sorted(linear) if ratio > 0 else [])
    for s, v in zip(seq, vec):
        torch.testing.assert_close(v.delta, s.delta, rtol=1e-4, atol=2e-5)
        assert v.loss == pytest.approx(s.loss, rel=1e-4)


def test_falls_back_with_a_reason(caplog: pytest.LogCaptureFixture) -> None:
    net = MLP(input_dim=64, hidden=(16,))
    data = _data([10, 12])
    client = ClientModule(net, num_classes=10, prox_mu=0.1)
    executor = VectorizedExecutor(LocalTrainer(client))
    with caplog.at_level(logging.WARNING):
        updates = list(train_cohort(executor, FedAvg(), [0, 1], _ctx(client, [0, 1]), data))
    assert len(updates) == 2
    assert "prox_mu" in executor.last_fallback_reason
    assert executor.last_path == "sequential"
    assert "falling back to sequential" in caplog.text

    class Scaffoldish(FedAvg):
        def configure_client(self, client_id, ctx):  # noqa: ANN001
            return ClientPlan(start_params=ctx.global_params, grad_hook=lambda params: None)

    client = ClientModule(MLP(input_dim=64, hidden=(16,)), num_classes=10)
    executor = VectorizedExecutor(LocalTrainer(client))
    list(train_cohort(executor, Scaffoldish(), [0], _ctx(client, [0]), data))
    assert "gradient hook" in executor.last_fallback_reason

    bn_net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10), nn.BatchNorm1d(10))
    client = ClientModule(bn_net, num_classes=10)
    executor = VectorizedExecutor(LocalTrainer(client))
    list(train_cohort(executor, FedAvg(), [0], _ctx(client, [0]), data))
    assert "BatchNorm1d" in executor.last_fallback_reason


def test_bf16_mixed_falls_back_to_the_sequential_loop(caplog: pytest.LogCaptureFixture) -> None:
    """The stacked layers are autograd Functions autocast does not cast: ``bf16-mixed`` trains
    sequentially (same updates as the SequentialExecutor), and ``auto`` does not measure."""
    from fl_lightning.server.executor_choice import build_executor

    data = _data([10, 12])
    out = {}
    for name, cls in (("seq", SequentialExecutor), ("vec", VectorizedExecutor)):
        torch.manual_seed(0)
        client = ClientModule(
            MLP(input_dim=64, hidden=(16,)), num_classes=10, precision="bf16-mixed"
        )
        executor = cls(LocalTrainer(client))
        with caplog.at_level(logging.WARNING):
            out[name] = list(train_cohort(executor, FedAvg(), [0, 1], _ctx(client, [0, 1]), data))
    assert "client.precision 'bf16-mixed'" in executor.last_fallback_reason
    assert executor.last_path == "sequential"
    for s, v in zip(out["seq"], out["vec"]):
        torch.testing.assert_close(v.delta, s.delta, rtol=0, atol=0)
    client = ClientModule(MLP(input_dim=64, hidden=(16,)), num_classes=10, precision="bf16-mixed")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert isinstance(build_executor("auto", LocalTrainer(client)), SequentialExecutor)
    assert "client.precision 'bf16-mixed'" in caplog.text


def test_reused_buffers_across_rounds() -> None:
    """One executor, rounds with different cohorts and bucket sizes: the weight buffers kept
    between rounds leak nothing into the next round, and earlier updates are not overwritten."""
    torch.manual_seed(2)
    net = MnistCNN(image_size=8, channels=(4, 8), hidden=16)
    data = _data([13, 30, 7, 30, 22])
    runs = {}
    for name, cls in (("seq", SequentialExecutor), ("vec", VectorizedExecutor)):
        client = ClientModule(copy.deepcopy(net), num_classes=10, lr=0.1, batch_size=6)
        executor = cls(LocalTrainer(client))
        if cls is VectorizedExecutor:
            executor.max_clients = 3  # buckets of 3 and 1, then 2
        runs[name] = []
        for r, cohort in enumerate([[3, 0, 4, 1], [2, 1]]):
            ctx = _ctx(ClientModule(copy.deepcopy(net), num_classes=10), cohort, round_idx=r)
            runs[name].append(list(train_cohort(executor, FedAvg(), cohort, ctx, data)))
    for seq_round, vec_round in zip(runs["seq"], runs["vec"]):
        for s, v in zip(seq_round, vec_round):
            assert s.client_id == v.client_id
            torch.testing.assert_close(v.delta, s.delta, rtol=1e-4, atol=2e-5)


def test_updates_stream_out_bucket_by_bucket_in_cohort_order() -> None:
    """A FedAvg round streams the updates into its sum, so the executor hands each bucket's
    clients on before it trains the next bucket (a cohort of 1000 held 6.6 GB of deltas of the
    benchmark's CNN before); a client that takes more steps than a later one (its bucket comes
    later) is held back until it is done, so the order stays the caller's."""
    net = MLP(input_dim=64, hidden=(8,), num_classes=10)
    data = _data([12, 12, 12, 12, 30, 12])  # client 4 takes 5 steps, the others 2
    client = ClientModule(copy.deepcopy(net), num_classes=10, lr=0.1, batch_size=6)
    executor = VectorizedExecutor(LocalTrainer(client))
    executor.max_clients = 2
    trained: list[list[int]] = []
    train_bucket = executor._train_bucket

    def spy(stacked, bucket, *args):  # noqa: ANN001, ANN002, ANN202
        trained.append(list(bucket))
        return train_bucket(stacked, bucket, *args)

    executor._train_bucket = spy  # type: ignore[method-assign]
    cohort = [0, 1, 2, 3, 4, 5]
    stream = train_cohort(executor, FedAvg(), cohort, _ctx(client, cohort), data)
    assert [next(stream).client_id, next(stream).client_id] == [0, 1]
    assert trained == [[0, 1]]  # the first bucket handed on before the second trains
    rest = [u.client_id for u in stream]
    assert rest == [2, 3, 4, 5]
    assert trained == [[0, 1], [2, 3], [5, 4]]  # sorted by steps: 4 trains last, held until then


@pytest.mark.parametrize(
    ("net", "dp_sgd", "expected"),
    [
        (MLP(input_dim=64, hidden=(8,), num_classes=10), None, True),
        (MLP(input_dim=64, hidden=(8,), num_classes=10), DPSGDConfig(), True),
        (MnistLSTM(input_size=8, hidden_size=4), None, True),
        (nn.Sequential(nn.Flatten(), nn.Linear(64, 10), nn.BatchNorm1d(10)), None, False),
    ],
    ids=["plain-clients", "dp-sgd-clients", "lstm", "model-with-batch-norm"],
)
def test_auto_executor_measures_stackable_models(net, dp_sgd, expected, caplog):
    from fl_lightning.server.executor import AutoExecutor
    from fl_lightning.server.executor_choice import auto_vectorizes, build_executor

    trainer = LocalTrainer(ClientModule(net, num_classes=10, dp_sgd=dp_sgd))
    assert auto_vectorizes(trainer) is expected
    with caplog.at_level(logging.WARNING):
        executor = build_executor("auto", trainer)
    assert isinstance(executor, AutoExecutor) is expected
    if not expected:
        assert isinstance(executor, SequentialExecutor)
        assert "BatchNorm1d" in caplog.text


class _Timed:
    """A fake executor that advances a fake clock by ``cost`` seconds a client."""

    def __init__(self, clock: list[float], cost: float) -> None:
        self.clock, self.cost, self.hooks = clock, cost, None
        self.last_path, self.last_fallback_reason, self.calls = "stacked", None, []

    def run(self, clients, plans, ctx, data):  # noqa: ANN001, ANN201
        self.calls.append(list(clients))
        for cid in clients:
            self.clock[0] += self.cost
            yield SimpleNamespace(client_id=cid)


@pytest.mark.parametrize(
    ("seq_cost", "vec_cost", "choice"), [(1.0, 0.2, "vectorized"), (1.0, 3.0, "sequential")]
)
def test_auto_executor_keeps_the_faster_path(monkeypatch, caplog, seq_cost, vec_cost, choice):
    from fl_lightning.server import executor as executor_module

    clock = [0.0]
    monkeypatch.setattr(executor_module.time, "perf_counter", lambda: clock[0])
    seq, vec = _Timed(clock, seq_cost), _Timed(clock, vec_cost)
    auto = executor_module.AutoExecutor(seq, vec, probe=2, rounds=2)
    cohort = list(range(10))
    with caplog.at_level(logging.WARNING):
        for r in range(3):
            out = list(auto.run(cohort, None, SimpleNamespace(round_idx=r), None))
            assert [u.client_id for u in out] == cohort  # every client once, in order
    assert auto.choice == choice
    assert auto.measured == pytest.approx({"sequential": seq_cost, "vectorized": vec_cost})
    assert seq.calls[:2] == [cohort[:2], cohort[:2]] and vec.calls[:2] == [cohort[2:]] * 2
    last = vec.calls[-1] if choice == "vectorized" else seq.calls[-1]
    assert last == cohort  # after calibration the chosen path runs the whole cohort
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == (choice == "sequential")
    if warnings:
        assert "slower" in warnings[0].getMessage()


def test_auto_executor_reads_a_gpu_clock_after_a_synchronize(monkeypatch) -> None:
    """On a GPU the host returns from a launch before the kernel runs: the calibration's clock is
    read only after ``torch.cuda.synchronize`` (before and after each path's share)."""
    from fl_lightning.server import executor as executor_module

    clock, events = [0.0], []
    monkeypatch.setattr(executor_module.time, "perf_counter", lambda: events.append("clock") or 0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))
    seq, vec = _Timed(clock, 1.0), _Timed(clock, 0.5)
    auto = executor_module.AutoExecutor(seq, vec, probe=2, rounds=2, device="cuda")
    list(auto.run(list(range(6)), None, SimpleNamespace(round_idx=0), None))
    assert events == ["sync", "clock"] * 4
    cpu = executor_module.AutoExecutor(seq, vec, probe=2, rounds=2)
    events.clear()
    list(cpu.run(list(range(6)), None, SimpleNamespace(round_idx=0), None))
    assert events == ["clock"] * 4


@pytest.mark.parametrize("engine", ["functorch", "bk"])
def test_dp_sgd_cohort_of_a_user_model_equals_sequential(engine: str) -> None:
    """DP-SGD clients of a model the core has never seen (functional ops, in-place ReLU,
    reflect padding, GroupNorm, a branch): the stacked path gives the sequential engines'
    updates (same Poisson batches, clip, noise from the same keyed generators, same event)."""
    from tests.client.test_stacked import UserCNN

    torch.manual_seed(3)
    net = UserCNN()
    if engine == "bk":  # bk's layers: zero padding only
        net.conv2 = nn.Conv2d(4, 6, 3, padding=1)
    data = _data([13, 30, 7, 30, 22], shape=(1, 16, 16))
    cohort = [3, 0, 4, 1, 2]
    dp = DPSGDConfig(noise_multiplier=0.7, max_grad_norm=0.3, engine=engine)
    seq, vec, path = _both(net, FedAvg, data, cohort, lr=0.1, batch_size=6, momentum=0.5, dp_sgd=dp)
    assert path == "stacked"
    for s, v in zip(seq, vec):
        assert s.client_id == v.client_id
        assert s.dp_steps == v.dp_steps and s.dp_steps
        assert s.metrics == v.metrics
        torch.testing.assert_close(v.delta, s.delta, rtol=1e-5, atol=1e-5)
        assert v.loss == pytest.approx(s.loss, rel=1e-5, nan_ok=True)


def _token_data(sizes: list[int], *, length: int) -> SimpleNamespace:
    """``_data``'s clients holding sequences of ``length`` token ids of a 20-token vocabulary
    (seeded), for Embedding and CharLSTM models."""
    data = _data(sizes, shape=(length,))
    g = torch.Generator().manual_seed(1)
    tokens = [torch.randint(0, 20, (n, length), generator=g) for n in sizes]
    labels = [data.client_data(c)[1] for c in range(len(sizes))]
    data.client_data = lambda c: (tokens[c], labels[c])
    return data


def test_dp_sgd_cohort_of_an_embedding_model_equals_sequential() -> None:
    """Token inputs through nn.Embedding under DP-SGD (repeated tokens in a sequence: the
    ghost norm's cross terms) give the sequential engine's updates."""
    from tests.client.test_stacked import EmbedNet

    torch.manual_seed(3)
    data = _token_data([13, 30, 7, 22], length=5)
    dp = DPSGDConfig(noise_multiplier=0.7, max_grad_norm=0.3, engine="functorch")
    cohort = [2, 0, 3, 1]
    seq, vec, path = _both(EmbedNet(), FedAvg, data, cohort, lr=0.1, batch_size=6, dp_sgd=dp)
    assert path == "stacked"
    for s, v in zip(seq, vec):
        assert s.client_id == v.client_id and s.dp_steps == v.dp_steps and s.dp_steps
        torch.testing.assert_close(v.delta, s.delta, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dp", [False, True], ids=["sgd", "dp-sgd"])
def test_char_lstm_cohort_equals_sequential(dp: bool) -> None:
    """The Shakespeare CharLSTM (Embedding, two stacked LSTM layers, Linear head on the last
    position), clients of 2 to 5 steps, plain SGD, or DP-SGD with Opacus' DPLSTM (auto engine:
    opacus): the sequential executor's updates."""
    torch.manual_seed(3)
    data = _token_data([13, 30, 7, 22], length=7)
    net = CharLSTM(
        vocab_size=20, embedding_dim=4, hidden_size=6, num_layers=2, dp_lstm=dp, last_only=True
    )
    kw = {"dp_sgd": DPSGDConfig(noise_multiplier=0.7, max_grad_norm=0.3)} if dp else {}
    cohort = [2, 0, 3, 1]
    seq, vec, path = _both(net, FedAvg, data, cohort, lr=0.5, batch_size=6, **kw)
    assert path == "stacked"
    for s, v in zip(seq, vec):
        assert s.client_id == v.client_id and s.dp_steps == v.dp_steps
        assert bool(s.dp_steps) is dp
        torch.testing.assert_close(v.delta, s.delta, rtol=1e-5, atol=1e-5)
        assert v.loss == pytest.approx(s.loss, rel=1e-5)
        assert s.delta.abs().sum() > 0


class _PackedLSTM(nn.Module):
    """Feeds its LSTM a PackedSequence, which the stacked layer does not take."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm, self.head = nn.LSTM(3, 4, batch_first=True), nn.Linear(4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lengths = torch.full((len(x),), x.shape[1])
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True)
        _, (h, _) = self.lstm(packed)
        return self.head(h[-1])


def test_packed_sequence_input_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    data = _data([10, 12], shape=(5, 3))
    client = ClientModule(_PackedLSTM(), num_classes=10)
    executor = VectorizedExecutor(LocalTrainer(client))
    with caplog.at_level(logging.WARNING):
        updates = list(train_cohort(executor, FedAvg(), [0, 1], _ctx(client, [0, 1]), data))
    assert len(updates) == 2 and executor.last_path == "sequential"
    assert "PackedSequence" in executor.last_fallback_reason


@pytest.mark.parametrize("executor_cls", [VectorizedExecutor, SequentialExecutor])
@pytest.mark.parametrize("engine", [None, "functorch", "bk"], ids=["sgd", "functorch", "bk"])
def test_no_host_sync_per_local_step(
    monkeypatch: pytest.MonkeyPatch, engine: str | None, executor_cls: type
) -> None:
    """GPU readiness: neither executor's hot loop calls ``.item()`` / ``.cpu()`` /
    ``.tolist()`` / ``float(t)`` / ``bool(t)`` per step (DP-SGD engines included, ``bk`` and
    ``functorch``): the count for a round of 3 local epochs equals the count for 1 epoch (what
    remains is per bucket and per client, after training)."""
    import dataclasses

    torch.manual_seed(4)
    net = MnistCNN(image_size=8, channels=(4, 8), hidden=16)
    dp_sgd = DPSGDConfig(noise_multiplier=1.0, engine=engine) if engine else None
    client = ClientModule(net, num_classes=10, lr=0.1, batch_size=6, dp_sgd=dp_sgd)
    executor = executor_cls(LocalTrainer(client))
    data = _data([13, 30, 7, 30, 22])
    cohort = [3, 0, 4, 1]
    ctx = _ctx(client, cohort)
    list(train_cohort(executor, FedAvg(), cohort, ctx, data))  # builds and checks the stacked model
    calls = {"n": 0}
    for name in ("item", "cpu", "tolist", "__float__", "__bool__", "__int__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, **kwargs):  # noqa: ANN001, ANN202
            calls["n"] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    counts = []
    for epochs in (1, 3):
        calls["n"] = 0
        epoch_ctx = dataclasses.replace(ctx, client_config={"local_epochs": epochs})
        list(train_cohort(executor, FedAvg(), cohort, epoch_ctx, data))
        assert getattr(executor, "last_path", "stacked") == "stacked"
        counts.append(calls["n"])
    assert counts[0] == counts[1]


def test_memory_budget_chunks_the_cohort() -> None:
    """A budget of three clients' memory gives buckets of three; updates do not change."""
    torch.manual_seed(5)
    net = MnistCNN(image_size=8, channels=(4, 8), hidden=16)
    data = _data([13, 30, 7, 30, 22])
    cohort = [3, 0, 4, 1, 2]
    client = ClientModule(copy.deepcopy(net), num_classes=10, lr=0.1, batch_size=6)
    whole = VectorizedExecutor(LocalTrainer(client))
    ctx = _ctx(client, cohort)
    want = list(train_cohort(whole, FedAvg(), cohort, ctx, data))
    assert whole.last_bucket_size == len(cohort)  # the machine has room for five tiny clients
    per_client = whole.client_bytes(client.training_config, data.client_data(0)[0][:1])
    assert per_client > 2 * sum(p.numel() * 4 for p in net.parameters())
    chunked = VectorizedExecutor(LocalTrainer(client), memory_budget=3 * per_client + 1)
    got = list(train_cohort(chunked, FedAvg(), cohort, ctx, data))
    assert chunked.last_bucket_size == 3
    for a, b in zip(want, got):
        torch.testing.assert_close(a.delta, b.delta, rtol=1e-5, atol=1e-6)


def test_dp_sgd_buckets_on_the_cpu_are_small() -> None:
    """DP-SGD clients with Poisson batches train on the CPU in buckets of
    ``dp_cpu_bucket_flops`` ÷ the model's training FLOPs per example, between 2 and
    ``dp_cpu_max_clients`` (the padding to the widest batch grows with the bucket);
    non-private clients and full-batch DP-SGD ones do not, and the updates are the same in
    buckets of 2 as in one bucket."""
    torch.manual_seed(5)
    net = MnistCNN(image_size=8, channels=(4, 8), hidden=16)
    data = _data([13, 30, 7, 30, 22])
    cohort = [3, 0, 4, 1, 2]
    dp = DPSGDConfig(noise_multiplier=0.8, max_grad_norm=0.5)
    plain = ClientModule(copy.deepcopy(net), num_classes=10, lr=0.1, batch_size=6)
    private = ClientModule(copy.deepcopy(net), num_classes=10, lr=0.1, batch_size=6, dp_sgd=dp)
    # batches of every example (B ≥ n: rate 1) are not Poisson samples: nothing to pad
    whole_data = ClientModule(copy.deepcopy(net), num_classes=10, lr=0.1, batch_size=30, dp_sgd=dp)
    one = data.client_data(0)[0][:1]
    probe = VectorizedExecutor(LocalTrainer(private))
    probe.dp_bucket_cap(one)
    flops = probe._flops_per_example
    assert flops is not None and flops > 3 * sum(p.numel() for p in net.parameters())
    for budget, most, cap in ((1, 16, 2), (3 * flops, 16, 3), (3 * flops + flops - 1, 16, 3),
                              (2**50, 4, 4), (2**50, 1, 1)):  # fmt: skip
        ex = VectorizedExecutor(LocalTrainer(private), dp_cpu_max_clients=most,
                                dp_cpu_bucket_flops=budget)  # fmt: skip
        assert ex.dp_bucket_cap(one) == cap
    cap = 3
    for client, expected in ((plain, len(cohort)), (private, cap), (whole_data, len(cohort))):
        executor = VectorizedExecutor(LocalTrainer(client), dp_cpu_bucket_flops=cap * flops)
        list(train_cohort(executor, FedAvg(), cohort, _ctx(client, cohort), data))
        assert executor.last_path == "stacked" and executor.last_bucket_size == expected
    ctx = _ctx(private, cohort)
    whole = VectorizedExecutor(LocalTrainer(private), dp_cpu_max_clients=len(cohort))
    pairs = VectorizedExecutor(LocalTrainer(private), dp_cpu_max_clients=2)
    want = list(train_cohort(whole, FedAvg(), cohort, ctx, data))
    got = list(train_cohort(pairs, FedAvg(), cohort, ctx, data))
    assert whole.last_bucket_size == len(cohort) and pairs.last_bucket_size == 2
    for a, b in zip(want, got):
        assert a.client_id == b.client_id
        torch.testing.assert_close(a.delta, b.delta, rtol=1e-5, atol=1e-6)
