"""The split of aggregation into per-process partial sums and a final step."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import torch

import fl_lightning.strategies as strategies_pkg
from fl_lightning.server.update import ClientUpdate, RoundContext
from fl_lightning.strategies.base import Strategy
from fl_lightning.strategies.dp_fedavg import DPFedAvg
from fl_lightning.strategies.fedavg import FedAvg

D = 50


def ctx() -> RoundContext:
    return RoundContext(round_idx=3, total_rounds=5, seed=1, num_clients=20, cohort=list(range(6)),
                        expected_cohort_size=6.0, sample_rate=0.3,
                        global_params=torch.zeros(D))  # fmt: skip


def updates() -> list[ClientUpdate]:
    g = torch.Generator().manual_seed(0)
    return [ClientUpdate(client_id=i, delta=torch.randn(D, generator=g), num_examples=5 + 3 * i,
                         loss=0.5) for i in range(6)]  # fmt: skip


def sharded(strategy: Strategy, shards: list[list[int]]) -> torch.Tensor:
    ups = updates()
    total = sum(strategy.partial_aggregate([ups[i] for i in s], ctx()) for s in shards)
    return strategy.finalize(total, ctx(), generator=torch.Generator().manual_seed(9))


def test_fedavg_sharded_equals_aggregate():
    s = FedAvg()
    whole = s.aggregate(updates(), ctx(), generator=torch.Generator().manual_seed(9))
    ups = updates()
    w = torch.tensor([u.num_examples for u in ups], dtype=torch.float32)
    expected = (torch.stack([u.delta for u in ups]) * w[:, None]).sum(0) / w.sum()
    torch.testing.assert_close(whole, expected)
    torch.testing.assert_close(sharded(s, [[0, 4], [1, 2, 3, 5]]), whole)
    torch.testing.assert_close(sharded(s, [[], list(range(6))]), whole)


def test_dp_fedavg_sharded_equals_aggregate_noise_included():
    s = DPFedAvg(clip_norm=1.0, noise_multiplier=1.3)
    whole = s.aggregate(updates(), ctx(), generator=torch.Generator().manual_seed(9))
    torch.testing.assert_close(sharded(s, [[5], [0, 1], [2, 3, 4]]), whole)
    noiseless = torch.stack([u.delta for u in updates()]).sum(0) / 6.0
    assert not torch.allclose(whole, noiseless)  # the central noise is there


def test_empty_round_is_zero():
    out = FedAvg().aggregate([], ctx(), generator=torch.Generator())
    assert torch.equal(out, torch.zeros(D))


def all_strategies() -> list[type[Strategy]]:
    found = []
    for info in pkgutil.iter_modules(strategies_pkg.__path__):
        module = importlib.import_module(f"fl_lightning.strategies.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, Strategy) and obj.__module__ == module.__name__:
                found.append(obj)
    return found


def test_sum_based_classification_of_every_strategy():
    """Overriding ``aggregate`` without the split, or needs_all_updates, means gathering."""
    for cls in all_strategies():
        overrides_aggregate_only = any(
            "aggregate" in vars(k) and "partial_aggregate" not in vars(k)
            for k in cls.__mro__
            if k is not Strategy and issubclass(k, Strategy)
        )
        expected = not cls.needs_all_updates and not overrides_aggregate_only
        assert cls.is_sum_based() == expected, cls
    assert FedAvg.is_sum_based() and DPFedAvg.is_sum_based()


def test_subclass_overriding_aggregate_of_a_split_strategy_is_gathered():
    class Projected(DPFedAvg):
        def aggregate(self, updates, ctx, *, generator):  # noqa: ANN001
            return super().aggregate(updates, ctx, generator=generator)

    assert not Projected.is_sum_based()
