"""Every DP-SGD engine releases the same clipped, noised gradient (same noise generator) for
every model of the zoo, with and without virtual batches; Poisson sampling is kept."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fl_lightning.client.book_keeping import unsupported_layers
from fl_lightning.client.config import DPSGDConfig
from fl_lightning.client.dp_sgd import (
    DP_SGD_ENGINES,
    auto_engine,
    build_engine,
    noisy_mean,
    noisy_mean_,
)
from fl_lightning.client.local_loop import LocalTrainer
from fl_lightning.client.module import ClientModule
from fl_lightning.models.abadi_cnn import AbadiCNN
from fl_lightning.models.char_lstm import CharLSTM
from fl_lightning.models.cnn import CifarCNN, MnistCNN
from fl_lightning.models.emnist_cnn import EmnistCNN
from fl_lightning.models.lstm import MnistLSTM
from fl_lightning.models.mlp import MLP, LogisticRegression
from fl_lightning.models.resnet import ResNet50GN
from fl_lightning.models.resnet_gn import ResNet18GN
from fl_lightning.models.spm_cnn import SpmCifarCNN
from fl_lightning.models.vgg import VGG9
from fl_lightning.records import RoundContext
from fl_lightning.strategies.base import Strategy
from fl_lightning.utils.flat import flatten, trainable_parameters


def _images(c: int, side: int, n: int = 7):
    return lambda g: (
        torch.randn(n, c, side, side, generator=g),
        torch.randint(0, 10, (n,), generator=g),
    )


def _chars(g: torch.Generator):
    return torch.randint(1, 20, (5, 6), generator=g), torch.randint(0, 20, (5, 6), generator=g)


def _no_inplace(net: nn.Module) -> nn.Module:
    # Opacus' backward hooks (opacus, ghost) forbid in-place ops on hooked outputs.
    for m in net.modules():
        if isinstance(m, nn.ReLU):
            m.inplace = False
    return net


ZOO = {
    "MnistCNN": (lambda: MnistCNN(), _images(1, 28)),
    "CifarCNN": (lambda: CifarCNN(), _images(3, 32)),
    "MLP": (lambda: MLP(), _images(1, 28)),
    "LogisticRegression": (lambda: LogisticRegression(), _images(1, 28)),
    "AbadiCNN": (lambda: AbadiCNN(channels=(8, 8), hidden=(32, 32)), _images(1, 28)),
    "ResNet50GN": (
        lambda: _no_inplace(ResNet50GN(in_channels=3, width=8, groups=4, blocks=(1, 1, 1, 1))),
        _images(3, 16, n=5),
    ),
    "EmnistCNN": (lambda: EmnistCNN(), _images(1, 28)),
    "SpmCifarCNN": (lambda: SpmCifarCNN(), _images(3, 32)),
    "VGG9": (lambda: _no_inplace(VGG9()), _images(3, 32, n=4)),
    "ResNet18GN": (lambda: _no_inplace(ResNet18GN(width=8, groups=4)), _images(3, 16, n=5)),
    "MnistLSTM": (lambda: MnistLSTM(impl="opacus", hidden_size=8), _images(1, 28, n=5)),
    "CharLSTM": (
        lambda: CharLSTM(vocab_size=20, embedding_dim=4, hidden_size=8, dp_lstm=True),
        _chars,
    ),
}
ENGINES = sorted(DP_SGD_ENGINES)
RECURRENT = {"CharLSTM", "MnistLSTM"}  # DPLSTM: Opacus hooks only (auto_engine picks opacus)


def _released(name: str, engine: str, physical: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    make_net, make_data = ZOO[name]
    torch.manual_seed(0)
    net = make_net()
    x, y = make_data(torch.Generator().manual_seed(1))
    eng = build_engine(net, engine, max_physical_batch_size=physical)
    eng.configure_client(
        noise_multiplier=0.7,
        max_grad_norm=0.1,
        expected_batch_size=6.0,
        generator=torch.Generator().manual_seed(2),
    )
    clipped = torch.cat([s.reshape(-1) for s in eng.clipped_sum(x, y, F.cross_entropy)])
    eng.compute_gradients(x, y, F.cross_entropy)
    noised = torch.cat([p.grad.reshape(-1) for p in trainable_parameters(net)])
    return clipped, noised


@pytest.mark.parametrize("name", list(ZOO))
def test_engines_release_the_same_gradient(name: str) -> None:
    ref_clipped, ref_noised = _released(name, "opacus", None)
    n = len(ZOO[name][1](torch.Generator().manual_seed(1))[1])
    # Small C: every example is clipped, so the sum's norm is bounded by n·C.
    assert ref_clipped.norm() <= n * 0.1 + 1e-4
    for engine in ENGINES:
        for physical in (None, 2):
            if name in RECURRENT and engine != "opacus":
                continue  # DPLSTM: only Opacus' hooks (see auto_engine); checked below
            if engine == "bk" and unsupported_layers(ZOO[name][0]()):
                with pytest.raises(ValueError, match="client.dp_sgd.engine: bk supports"):
                    _released(name, engine, physical)
                continue
            clipped, noised = _released(name, engine, physical)
            torch.testing.assert_close(clipped, ref_clipped, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(noised, ref_noised, rtol=1e-4, atol=1e-5)
    # The noise is really there: σC/B per coordinate.
    assert (ref_noised - ref_clipped / 6.0).std() == pytest.approx(0.7 * 0.1 / 6.0, rel=0.2)


def test_auto_rule() -> None:
    assert auto_engine(MnistCNN(), batch_size=64) == "bk"  # Linear and Conv2d only
    assert auto_engine(CifarCNN(), batch_size=64) == "bk"
    assert auto_engine(ResNet50GN(width=16), batch_size=512) == "bk"  # GroupNorm is supported
    assert auto_engine(CharLSTM(dp_lstm=True), batch_size=8) == "opacus"
    assert type(build_engine(MLP(), "auto", batch_size=32)).__name__ == "BookKeepingEngine"
    # An embedding (not supported by bk) with >= 1M parameters: ghost norms.
    assert auto_engine(nn.Sequential(nn.Embedding(20_000, 64), nn.Linear(64, 2))) == "ghost"
    assert auto_engine(nn.Sequential(nn.Embedding(20, 4), nn.Linear(4, 2))) == "functorch"


def test_unknown_engine_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="client.dp_sgd.engine"):
        DPSGDConfig(engine="fast")
    with pytest.raises(ValueError, match="max_physical_batch_size"):
        DPSGDConfig(max_physical_batch_size=0)


class _Recorder(Strategy):
    def __init__(self) -> None:
        super().__init__()
        self.batch_sizes: list[int] = []


@pytest.mark.parametrize("engine", [*ENGINES, "auto"])
def test_poisson_sampling_is_kept(engine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch sizes vary (Poisson at rate B/n), they are not fixed-size batches, and the whole
    local run is identical across engines (same batches, same noise)."""
    n, batch = 200, 20
    results = {}
    sizes_seen = {}
    for eng in ("opacus", engine):
        torch.manual_seed(0)
        client = ClientModule(
            LogisticRegression(input_dim=4, num_classes=3),
            num_classes=3,
            lr=0.1,
            local_steps=40,
            batch_size=batch,
            dp_sgd=DPSGDConfig(noise_multiplier=1.0, max_grad_norm=1.0, engine=eng),
        )
        trainer = LocalTrainer(client)
        sizes: list[int] = []
        original = trainer.engine.compute_gradients

        def spy(x, y, loss_fn, _orig=original, _sizes=sizes, **kwargs):
            _sizes.append(len(x))
            return _orig(x, y, loss_fn, **kwargs)

        monkeypatch.setattr(trainer.engine, "compute_gradients", spy)
        g = torch.Generator().manual_seed(3)
        x, y = torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g)
        ctx = RoundContext(
            round_idx=0,
            total_rounds=1,
            seed=0,
            num_clients=1,
            cohort=[0],
            expected_cohort_size=1.0,
            sample_rate=1.0,
            global_params=flatten(trainable_parameters(client.net)),
        )
        update = trainer.train(0, x, y, ctx, _Recorder().configure_client(0, ctx))
        results[eng] = update.delta
        sizes_seen[eng] = sizes
        assert update.dp_steps[0].sample_rate == pytest.approx(batch / n)
    sizes = sizes_seen[engine]
    assert len(set(sizes)) > 3  # random sizes
    assert abs(sum(sizes) / len(sizes) - batch) < 4  # around the expected batch size
    assert sizes == sizes_seen["opacus"]
    torch.testing.assert_close(results[engine], results["opacus"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("physical", [None, 2])
def test_an_empty_poisson_batch_releases_noise_only(engine: str, physical: int | None) -> None:
    """A Poisson batch is empty with probability (1 − B/n)^n ≈ e^(−B); the DP-SGD step then
    releases N(0, σ²C²)/B and no gradient (Abadi et al. 2016), in every engine."""
    torch.manual_seed(0)
    net = MLP()
    eng = build_engine(net, engine, max_physical_batch_size=physical)
    eng.configure_client(
        noise_multiplier=2.0,
        max_grad_norm=0.5,
        expected_batch_size=4.0,
        generator=torch.Generator().manual_seed(3),
    )
    x, y = torch.empty(0, 1, 28, 28), torch.empty(0, dtype=torch.long)
    loss = eng.compute_gradients(x, y, F.cross_entropy)
    assert loss != loss  # nan: no example, no loss
    released = torch.cat([p.grad.reshape(-1) for p in trainable_parameters(net)])
    assert released.mean() == pytest.approx(0.0, abs=0.01)
    assert released.std() == pytest.approx(2.0 * 0.5 / 4.0, rel=0.05)


@pytest.mark.parametrize(
    ("layer", "advice"),
    [
        (lambda: torch.nn.RNN(4, 4), "DPRNN"),
        (lambda: torch.nn.RNN(4, 4, nonlinearity="relu"), "DPRNN"),
        (lambda: torch.nn.GRU(4, 4), "GRU"),
        (lambda: torch.nn.LSTM(4, 4), "DPLSTM"),
    ],
)
def test_fused_recurrent_layers_are_refused_under_dp_sgd_with_their_replacement(layer, advice):
    """nn.RNN/GRU/LSTM keep their weights in fused kernels no DP-SGD engine can see (nn.RNN
    used to pass and crash inside the engine); Opacus' DP layers run."""
    from opacus.layers import DPGRU, DPLSTM, DPRNN

    from fl_lightning.client.module import dp_incompatibility

    reason = dp_incompatibility(torch.nn.Sequential(layer()))
    assert reason is not None and reason.startswith("client.net: ") and advice in reason
    for ok in (DPRNN(4, 4), DPGRU(4, 4), DPLSTM(4, 4)):
        assert dp_incompatibility(torch.nn.Sequential(ok)) is None


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("physical", [None, 2])
def test_the_release_is_noisy_mean_of_the_clipped_sum_bit_for_bit(
    engine: str, physical: int | None
) -> None:
    """compute_gradients releases exactly noisy_mean_(clipped sum) (Abadi et al. 2016, Alg. 1):
    the same noise draws in the same order from the client's generator, the same float
    operations (the release into the noise buffers of ``noisy_mean`` is N + S, which equals
    S + N exactly), and the sums are left as they were."""
    torch.manual_seed(0)
    net = MnistCNN(image_size=8, channels=(4, 8), hidden=16)
    x, y = _images(1, 8, n=5)(torch.Generator().manual_seed(1))
    eng = build_engine(net, engine, max_physical_batch_size=physical)
    eng.configure_client(
        noise_multiplier=0.9,
        max_grad_norm=0.2,
        expected_batch_size=4.0,
        generator=torch.Generator().manual_seed(3),
    )
    expected = noisy_mean_(
        eng.clipped_sum(x, y, F.cross_entropy),
        std=0.9 * 0.2,
        expected_batch_size=4.0,
        generator=torch.Generator().manual_seed(3),
    )
    eng.compute_gradients(x, y, F.cross_entropy)
    for p, want in zip(eng.params, expected, strict=True):
        assert torch.equal(p.grad, want)
    sums = [torch.randn(3, 2), torch.randn(5)]
    kept = [s.clone() for s in sums]
    fresh = noisy_mean(sums, std=0.5, expected_batch_size=3.0, generator=torch.Generator())
    assert all(torch.equal(s, k) for s, k in zip(sums, kept))
    in_place = noisy_mean_(sums, std=0.5, expected_batch_size=3.0, generator=torch.Generator())
    assert all(torch.equal(a, b) for a, b in zip(fresh, in_place))
