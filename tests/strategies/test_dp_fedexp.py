"""DP-FedExP server step size (Jhunjhunwala et al. 2023, Eq. 9)."""

from __future__ import annotations

import pytest
import torch

from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.dp_fedexp import DPFedExP, fedexp_step_size
from fl_lightning.testing import round_context


def _ctx(dim: int, n: int) -> RoundContext:
    return round_context(dim, range(n))


def _ups(deltas: list[torch.Tensor]) -> list[ClientUpdate]:
    return [ClientUpdate(i, d.clone(), 10, 0.0) for i, d in enumerate(deltas)]


def test_step_size_formula() -> None:
    torch.manual_seed(0)
    deltas = [torch.randn(20) for _ in range(5)]
    eps = 1e-3
    s = DPFedExP(epsilon=eps)
    agg, metrics = s.aggregate(_ups(deltas), _ctx(20, 5), generator=torch.Generator())
    mean = torch.stack(deltas).mean(0)
    eta = max(
        1.0, sum(float(d.norm() ** 2) for d in deltas) / (2 * 5 * (float(mean.norm() ** 2) + eps))
    )
    assert eta > 1.0  # random (noise-like) deltas extrapolate
    assert metrics["eta_g"] == pytest.approx(eta, rel=1e-5)
    torch.testing.assert_close(agg, eta * mean)


def test_aligned_updates_give_fedavg() -> None:
    d = torch.tensor([1.0, -2.0, 0.5])
    s = DPFedExP()
    agg, metrics = s.aggregate(_ups([d, d, d]), _ctx(3, 3), generator=torch.Generator())
    assert metrics["eta_g"] == 1.0
    torch.testing.assert_close(agg, d)


def test_helper_and_validation() -> None:
    assert fedexp_step_size(10.0, 1.0, epsilon=0.0) == 5.0
    assert fedexp_step_size(1.0, 1.0, epsilon=0.0) == 1.0
    with pytest.raises(ValueError, match="strategy.epsilon"):
        DPFedExP(epsilon=0.0)
