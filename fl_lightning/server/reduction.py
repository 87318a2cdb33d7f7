"""How a round's updates become one aggregate, in one process or across DDP processes.

The strategy declares how it consumes updates (``Strategy.reduction``, docs/distributed.md):

* one process: ``"sum"`` and ``"stream"`` strategies read the updates as the executor yields
  them (the cohort is never held in memory); ``"gather"`` strategies get a list;
* several processes: ``"sum"`` strategies add this rank's ``partial_aggregate`` buffer to the
  others' with one all-reduce and ``finalize`` it (every rank draws the same central noise, so
  no broadcast follows); the others gather every update to every rank, in client order.

Either way :class:`RoundUpdates` records what logging and accounting need from each update
(loss, metrics, the DP-SGD events) as :class:`UpdateRecord` rows, and the per-client strategy
state of clients trained on another rank is copied in, so that whichever rank trains a client
next starts from its latest state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from fl_lightning.privacy.accounting.events import SampledGaussian
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.server.distributed import (
    all_reduce_sum_,
    gather_objects,
    gather_updates,
    rank_and_world,
)
from fl_lightning.strategies.base import Metrics, Strategy


@dataclass(frozen=True)
class UpdateRecord:
    """What the server keeps of one client's update once it is aggregated."""

    client_id: int
    loss: float
    metrics: dict[str, float] = field(default_factory=dict)
    dp_steps: list[SampledGaussian] = field(default_factory=list)


class RoundUpdates:
    """Wraps the stream of a round's updates, recording an :class:`UpdateRecord` of each."""

    def __init__(self, updates: Iterable[ClientUpdate]) -> None:
        self._updates = updates
        self.records: list[UpdateRecord] = []

    def __iter__(self) -> Iterator[ClientUpdate]:
        for update in self._updates:
            self.records.append(
                UpdateRecord(
                    update.client_id, update.loss, dict(update.metrics), list(update.dp_steps)
                )
            )
            yield update

    @classmethod
    def from_records(cls, records: Iterable[UpdateRecord]) -> RoundUpdates:
        """Every rank's records, in client order (as one process sees them)."""
        out = cls(())
        out.records = sorted(records, key=lambda r: r.client_id)
        return out

    @property
    def count(self) -> int:
        return len(self.records)

    @property
    def losses(self) -> list[float]:
        return [r.loss for r in self.records if not math.isnan(r.loss)]

    @property
    def metrics(self) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {}
        for r in self.records:
            for k, v in r.metrics.items():
                out.setdefault(k, []).append(float(v))
        return out

    @property
    def dp_steps(self) -> dict[int, list[SampledGaussian]]:
        return {r.client_id: list(r.dp_steps) for r in self.records if r.dp_steps}


@dataclass(frozen=True)
class ReducedRound:
    """A round once its updates are reduced: the global delta, what the strategy's aggregation
    observed (``strategy/<key>``) and the records of every update in the round."""

    delta: torch.Tensor
    metrics: Metrics
    updates: RoundUpdates


def reduce_round(
    strategy: Strategy, local: RoundUpdates, ctx: RoundContext, central: torch.Generator
) -> ReducedRound:
    """The round's global delta from this process's updates (and, under DDP, every other
    process's), with the aggregation's metrics and the records of every update in the round."""
    if rank_and_world()[1] == 1:
        updates: Iterable[ClientUpdate] = local
        if strategy.reduction == "gather":
            updates = list(local)
        out = strategy.aggregate(updates, ctx, generator=central)
        return ReducedRound(*delta_and_metrics(out, strategy, "aggregate"), local)
    if strategy.reduction == "sum":
        partial = strategy.partial_aggregate(local, ctx)
        out = strategy.finalize(all_reduce_sum_(partial), ctx, generator=central)
        delta, metrics = delta_and_metrics(out, strategy, "finalize")
        gathered = gather_objects((local.records, _client_states(strategy, local.records)))
        _load_client_states(strategy, [states for _, states in gathered])
        records = [r for rank_records, _ in gathered for r in rank_records]
        return ReducedRound(delta, metrics, RoundUpdates.from_records(records))
    mine = list(local)
    everyone, states = gather_updates(
        mine,
        dim=ctx.global_params.numel(),
        device=ctx.global_params.device,
        payload=_client_states(strategy, local.records),
    )
    _load_client_states(strategy, states)
    stats = RoundUpdates(everyone)
    out = strategy.aggregate(list(stats), ctx, generator=central)
    return ReducedRound(*delta_and_metrics(out, strategy, "aggregate"), stats)


def delta_and_metrics(out: Any, strategy: Strategy, hook: str) -> tuple[torch.Tensor, Metrics]:
    """``out`` checked as the ``(delta, metrics)`` pair ``aggregate`` / ``finalize`` return: a
    strategy written for the old interface (a bare tensor) gets one line naming the hook."""
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], torch.Tensor)):
        raise TypeError(
            f"strategy: {type(strategy).__name__}.{hook} returned {type(out).__name__}; it "
            "returns (delta, metrics): the global delta and a dict of the round's metrics"
        )
    return out[0], hook_metrics(out[1], strategy, hook)


def hook_metrics(out: Any, strategy: Strategy, hook: str) -> Metrics:
    """``out`` checked as the metrics a strategy hook returns (a dict, ``{}`` for none)."""
    if not isinstance(out, dict):
        raise TypeError(
            f"strategy: {type(strategy).__name__}.{hook} returned {type(out).__name__} as its "
            "metrics; it returns a dict of the round's metrics ({} for none)"
        )
    return out


def _client_states(strategy: Strategy, records: list[UpdateRecord]) -> dict[int, Any] | None:
    """The per-client state (``Strategy.client_states``) of the clients this rank trained."""
    store = strategy.client_states
    if store is None:
        return None
    return {r.client_id: store[r.client_id] for r in records if r.client_id in store}


def _load_client_states(strategy: Strategy, per_rank: list[dict[int, Any] | None]) -> None:
    """Copies the other ranks' clients' state into this rank's strategy (same round)."""
    rank, store = rank_and_world()[0], strategy.client_states
    for r, states in enumerate(per_rank):
        if r == rank or not states or store is None:
            continue
        store.update(states)
