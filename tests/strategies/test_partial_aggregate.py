"""The split of aggregation into per-process partial sums and a final step."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
import torch

import fl_lightning.strategies as strategies_pkg
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.base import Strategy
from fl_lightning.strategies.dp_fedavg import DPFedAvg
from fl_lightning.strategies.dp_fedavg_local import DPFedAvgLocal
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.strategies.nbafl import NbAFL
from fl_lightning.testing import round_context

D = 50


def ctx() -> RoundContext:
    return round_context(D, range(6), num_clients=20, round_idx=3, total_rounds=5, seed=1,
                         sample_rate=0.3, expected_cohort_size=6.0)  # fmt: skip


def updates() -> list[ClientUpdate]:
    g = torch.Generator().manual_seed(0)
    return [ClientUpdate(client_id=i, delta=torch.randn(D, generator=g), num_examples=5 + 3 * i,
                         loss=0.5) for i in range(6)]  # fmt: skip


def sharded(strategy: Strategy, shards: list[list[int]]) -> torch.Tensor:
    ups = updates()
    total = sum(strategy.partial_aggregate([ups[i] for i in s], ctx()) for s in shards)
    return strategy.finalize(total, ctx(), generator=torch.Generator().manual_seed(9))[0]


def test_fedavg_sharded_equals_aggregate():
    s = FedAvg()
    whole, metrics = s.aggregate(updates(), ctx(), generator=torch.Generator().manual_seed(9))
    assert metrics == {}  # FedAvg observes nothing
    ups = updates()
    w = torch.tensor([u.num_examples for u in ups], dtype=torch.float32)
    expected = (torch.stack([u.delta for u in ups]) * w[:, None]).sum(0) / w.sum()
    torch.testing.assert_close(whole, expected)
    torch.testing.assert_close(sharded(s, [[0, 4], [1, 2, 3, 5]]), whole)
    torch.testing.assert_close(sharded(s, [[], list(range(6))]), whole)


def test_dp_fedavg_sharded_equals_aggregate_noise_included():
    s = DPFedAvg(clip_norm=1.0, noise_multiplier=1.3)
    whole, _ = s.aggregate(updates(), ctx(), generator=torch.Generator().manual_seed(9))
    torch.testing.assert_close(sharded(s, [[5], [0, 1], [2, 3, 4]]), whole)
    noiseless = torch.stack([u.delta for u in updates()]).sum(0) / 6.0
    assert not torch.allclose(whole, noiseless)  # the central noise is there


def test_empty_round_is_zero():
    out, metrics = FedAvg().aggregate([], ctx(), generator=torch.Generator())
    assert torch.equal(out, torch.zeros(D)) and metrics == {}


def all_strategies() -> list[type[Strategy]]:
    found = []
    for info in pkgutil.iter_modules(strategies_pkg.__path__):
        module = importlib.import_module(f"fl_lightning.strategies.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, Strategy) and obj.__module__ == module.__name__:
                found.append(obj)
    return found


def test_every_strategy_declares_a_reduction_its_aggregate_honours():
    """A strategy that overrides ``aggregate`` (below its split) must not declare ``"sum"``:
    the all-reduce path would skip its ``aggregate``. Checked for every class in the package."""
    for cls in all_strategies():
        assert cls.reduction in ("sum", "stream", "gather"), cls
        overrides_aggregate_only = any(
            "aggregate" in vars(k) and "partial_aggregate" not in vars(k)
            for k in cls.__mro__
            if k is not Strategy and issubclass(k, Strategy)
        )
        if overrides_aggregate_only:
            assert cls.reduction != "sum", cls
    # The strategies that only used to override aggregate to log or add noise are sums now.
    assert {FedAvg.reduction, DPFedAvg.reduction, NbAFL.reduction, DPFedAvgLocal.reduction} == {
        "sum"
    }


def test_subclass_overriding_aggregate_but_declaring_sum_is_refused_at_definition():
    with pytest.raises(TypeError, match="Projected overrides aggregate but declares reduction"):

        class Projected(DPFedAvg):
            reduction = "sum"

            def aggregate(self, updates, ctx, *, generator):
                return super().aggregate(updates, ctx, generator=generator)

    class Undeclared(DPFedAvg):  # a user's aggregator that says nothing: gathered (safe)
        def aggregate(self, updates, ctx, *, generator):
            return super().aggregate(list(updates), ctx, generator=generator)

    class Declared(FedAvg):
        reduction = "stream"

        def aggregate(self, updates, ctx, *, generator):
            return super().aggregate(updates, ctx, generator=generator)

    assert (Undeclared.reduction, Declared.reduction, DPFedAvg.reduction) == (
        "gather",
        "stream",
        "sum",
    )
    with pytest.raises(TypeError, match="reduction: 'all' is not one of"):

        class Wrong(FedAvg):
            reduction = "all"  # type: ignore[assignment]
