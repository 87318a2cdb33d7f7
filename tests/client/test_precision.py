"""``client.precision``: ``"32"`` is the float32 loop unchanged, ``"bf16-mixed"`` trains under
bfloat16 autocast with float32 weights and is refused under DP-SGD, per-round overrides
included."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fl_lightning.client.config import DPSGDConfig, LocalTrainingConfig
from fl_lightning.client.dp_sgd import ENGINE_NAMES, build_engine
from fl_lightning.client.local_loop import LocalTrainer
from fl_lightning.client.module import ClientModule
from fl_lightning.models.mlp import MLP
from fl_lightning.records import LocalOverrides
from fl_lightning.strategies.fedavg import FedAvg
from tests.server.test_vectorized_executor import _ctx


def _problem(n: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded, learnable 4-class problem (labels from a fixed linear map)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 16, generator=g)
    y = (x @ torch.randn(16, 4, generator=g)).argmax(1)
    return x, y


def _train(
    precision: str, overrides: dict | None = None, device: str = "cpu"
) -> tuple[torch.Tensor, list[float]]:
    torch.manual_seed(0)
    client = ClientModule(
        MLP(input_dim=16, hidden=(32,), num_classes=4),
        num_classes=4,
        lr=0.2,
        local_steps=30,
        batch_size=32,
        precision=precision,
    )
    trainer = LocalTrainer(client, device)
    x, y = (t.to(device) for t in _problem())
    ctx = _ctx(client, [0], device=device)
    losses: list[float] = []
    original = trainer.engine.compute_gradients

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        losses.append(original(*args, **kwargs))
        return losses[-1]

    trainer.engine.compute_gradients = spy  # type: ignore[method-assign]
    plan = FedAvg().configure_client(0, ctx)  # the round's overrides reach it as values
    plan = dataclasses.replace(plan, local=LocalOverrides.from_mapping(overrides or {}))
    update = trainer.train(0, x, y, ctx, plan)
    assert all(p.dtype == torch.float32 for p in client.net.parameters())
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in client.net.parameters())
    assert update.delta.dtype == torch.float32
    return update.delta, losses


def test_bf16_mixed_trains_close_to_float32_but_not_identically() -> None:
    trains_close_to_float32("cpu")


def test_bf16_mixed_forward_runs_under_autocast() -> None:
    forward_runs_in_bf16("cpu")


def trains_close_to_float32(device: str) -> None:
    """bf16-mixed learns, and lands near the float32 run (tests/server/test_gpu.py: on CUDA)."""
    fp32, fp32_losses = _train("32", device=device)
    bf16, bf16_losses = _train("bf16-mixed", device=device)
    assert sum(bf16_losses[-5:]) < 0.75 * sum(bf16_losses[:5])  # it learns
    rel = float((bf16 - fp32).norm() / fp32.norm())
    assert 0 < rel < 5e-2, rel  # bfloat16 rounding moved the result, a little
    # a per-round override switches it on the same way
    overridden, _ = _train("32", {"precision": "bf16-mixed"}, device=device)
    torch.testing.assert_close(overridden, bf16, rtol=0, atol=0)


def forward_runs_in_bf16(device: str) -> None:
    """The forward's matmuls run in bfloat16; the loss comes back float32, on the device."""
    seen: list[torch.dtype] = []
    net = torch.nn.Linear(4, 3).to(device)
    net.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    engine = build_engine(net, None)
    x, y = torch.randn(5, 4, device=device), torch.tensor([0, 1, 2, 0, 1], device=device)
    loss = engine.compute_gradients(x, y, torch.nn.functional.cross_entropy, precision="32")
    engine.compute_gradients(x, y, torch.nn.functional.cross_entropy, precision="bf16-mixed")
    assert seen == [torch.float32, torch.bfloat16]
    assert loss.dim() == 0 and loss.dtype == torch.float32 and loss.device == x.device
    assert net.weight.grad is not None
    assert net.weight.grad.dtype == torch.float32


def test_unknown_precision_is_one_line_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"^client\.precision: expected one of") as err:
        LocalTrainingConfig(precision="16-mixed")  # type: ignore[arg-type]
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("engine", list(ENGINE_NAMES))
def test_bf16_mixed_is_refused_under_dp_sgd(engine: str) -> None:
    with pytest.raises(ValueError, match=r"^client\.precision: .*dp_sgd.*max_grad_norm") as err:
        ClientModule(
            MLP(input_dim=16, hidden=(8,), num_classes=4),
            num_classes=4,
            dp_sgd=DPSGDConfig(engine=engine),
            precision="bf16-mixed",
        )
    assert "\n" not in str(err.value)


def test_per_round_overrides_cannot_bypass_the_refusal() -> None:
    private = LocalTrainingConfig(dp_sgd=DPSGDConfig())
    with pytest.raises(ValueError, match=r"^client\.precision"):
        private.with_overrides({"precision": "bf16-mixed"})
    mixed = LocalTrainingConfig(precision="bf16-mixed")
    with pytest.raises(ValueError, match=r"^client\.precision"):
        mixed.with_overrides({"dp_sgd": DPSGDConfig()})
    # and the engine refuses it too, should a config be assembled some other way
    engine = build_engine(MLP(input_dim=16, hidden=(8,), num_classes=4), "functorch")
    x, y = torch.randn(3, 16), torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match=r"^client\.precision"):
        engine.compute_gradients(x, y, torch.nn.functional.cross_entropy, precision="bf16-mixed")
