"""Cohort execution: runs local training for the clients of a round.

``Executor`` is the protocol the round calls (``server/round.py``):
``run(clients, plans, ctx, data)`` yields each client's trained ``ClientUpdate``, where
``plans(client_id)`` is the client's :class:`~fl_lightning.records.ClientPlan` (start weights,
optimizer state, gradient hook and its local-training overrides, as values). An executor never
sees the strategy: the round builds the plans from it and hands the trained updates to its
``process_update`` and aggregation. Every implementation follows the one statement of local
training in ``client/semantics.py``, with generators keyed by (seed, round, client) so results
do not depend on the order or the process:

- ``SequentialExecutor`` trains this process's clients one after another on the one reused
  LocalTrainer (``LocalTrainer.train_many``, the one statement of local training);
- ``server/vectorized_executor.py: VectorizedExecutor`` is the same call with its stacked
  engine, which trains buckets of clients at once on a stacked copy of the model where it can;
- ``AutoExecutor`` measures both on the first rounds and keeps the faster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

import torch

from fl_lightning.client.local_loop import ClientStart, LocalTrainer, name_failed_clients
from fl_lightning.records import ClientPlan, ClientUpdate, RoundContext

if TYPE_CHECKING:
    from fl_lightning.callbacks import ClientHooks
    from fl_lightning.data.datamodule import FederatedDataModule


log = logging.getLogger(__name__)

ClientPlans = Callable[[int], ClientPlan]
"""Client ``client_id``'s plan of this round, built when the executor reaches the client
(``server/round.py: client_plans``)."""


class Executor(Protocol):
    """Runs local training for a round's clients (those of this process)."""

    #: the callbacks' on_client_start (here) / on_client_end (once the round processed the
    #: update) around each client; set by the module
    hooks: ClientHooks | None

    def run(
        self,
        clients: Sequence[int],
        plans: ClientPlans,
        ctx: RoundContext,
        data: FederatedDataModule,
    ) -> Iterator[ClientUpdate]:
        """Yields one trained update per client, in the order of ``clients``."""
        ...


class FallbackExecutor(Executor, Protocol):
    """An executor that may hand a round to the sequential one; says which path ran and why."""

    last_path: str | None
    last_fallback_reason: str | None


class SequentialExecutor:
    """Trains the given clients one at a time; yields their trained updates."""

    def __init__(self, trainer: LocalTrainer) -> None:
        self.local_trainer = trainer
        # ``fl_lightning.callbacks.ClientHooks`` (set by the FederatedModule): the callbacks'
        # on_client_start before each client trains.
        self.hooks: ClientHooks | None = None

    def run(
        self,
        clients: Sequence[int],
        plans: ClientPlans,
        ctx: RoundContext,
        data: FederatedDataModule,
    ) -> Iterator[ClientUpdate]:
        yield from self.local_trainer.train_many(
            clients, plans, ctx, data, on_start=client_start(self.hooks, ctx)
        )


def client_start(hooks: ClientHooks | None, ctx: RoundContext) -> ClientStart | None:
    """The callbacks' ``on_client_start`` of round ``ctx`` as ``LocalTrainer.train_many`` calls
    it (None without callbacks)."""
    if hooks is None:
        return None
    return lambda client_id: hooks.start(client_id, ctx)


def _device_clock(device: torch.device) -> float:
    """``time.perf_counter()`` once the device's queued work is done (a GPU runs kernels after
    the host returns from launching them, so an unsynchronised clock would time the launches)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


class AutoExecutor:
    """``executor: auto``: never the slower path. Rounds whose cohort can be vectorised are
    split while calibrating: the first ``probe`` clients train sequentially, the others stacked,
    and each path's seconds per client are measured (both paths give the same updates up to
    float rounding, so the split changes nothing). The second such round (the first pays one-time
    costs) decides; from then on the faster path runs alone. When the stacked path is slower, or
    cannot run, one WARNING line says why.

    Args:
        sequential: the sequential executor.
        vectorized: the vectorised executor (``server/vectorized_executor.py``).
        probe: clients trained sequentially per calibration round.
        rounds: calibration rounds (the last one's measurement decides).
        device: where the clients train (on a GPU the clock is read after a synchronize).
    """

    def __init__(
        self,
        sequential: SequentialExecutor,
        vectorized: FallbackExecutor,
        *,
        probe: int = 3,
        rounds: int = 2,
        device: torch.device | str = "cpu",
    ) -> None:
        self.sequential = sequential
        self.vectorized = vectorized
        self.hooks: ClientHooks | None = None
        self.probe = probe
        self.rounds = rounds
        self.device = torch.device(device)
        self.choice: str | None = None  # "sequential" or "vectorized" once decided
        self.reason: str | None = None
        self.measured: dict[str, float] = {}  # seconds per client of the deciding round
        self._seen = 0

    def _decide(self, choice: str, reason: str) -> None:
        self.choice, self.reason = choice, reason
        if choice == "sequential":
            log.warning("executor auto: sequential training: %s", reason)
        else:
            log.info("executor auto: vectorised training: %s", reason)

    def run(
        self,
        clients: Sequence[int],
        plans: ClientPlans,
        ctx: RoundContext,
        data: FederatedDataModule,
    ) -> Iterator[ClientUpdate]:
        self.sequential.hooks = self.vectorized.hooks = self.hooks
        if self.choice == "sequential":
            yield from self.sequential.run(clients, plans, ctx, data)
            return
        if self.choice == "vectorized":
            yield from self.vectorized.run(clients, plans, ctx, data)
            if self.vectorized.last_path == "sequential":  # a round it cannot stack
                self._decide("sequential", str(self.vectorized.last_fallback_reason))
            return
        probe = min(self.probe, len(clients) // 2)
        if probe == 0:  # too few clients to compare: vectorise (same updates)
            yield from self.vectorized.run(clients, plans, ctx, data)
            if self.vectorized.last_path == "sequential":
                self._decide("sequential", str(self.vectorized.last_fallback_reason))
            return
        device = self.device
        start = _device_clock(device)
        first = list(self.sequential.run(clients[:probe], plans, ctx, data))
        seq = (_device_clock(device) - start) / probe
        # handed on before the stacked share trains (the round processes them and the
        # callbacks' on_client_end fires now); neither clock runs meanwhile
        yield from first
        start = _device_clock(device)
        rest = list(self.vectorized.run(clients[probe:], plans, ctx, data))
        vec = (_device_clock(device) - start) / (len(clients) - probe)
        yield from rest
        if self.vectorized.last_path == "sequential":
            self._decide("sequential", str(self.vectorized.last_fallback_reason))
            return
        self._seen += 1
        self.measured = {"sequential": seq, "vectorized": vec}
        if self._seen >= self.rounds:
            detail = (
                f"measured {vec * 1e3:.1f} ms a client stacked ({len(clients) - probe} clients) "
                f"vs {seq * 1e3:.1f} ms sequential on round {ctx.round_idx}"
            )
            if vec < seq:
                self._decide("vectorized", detail)
            else:
                self._decide("sequential", f"the vectorised path is slower here: {detail}")


__all__ = [
    "AutoExecutor",
    "ClientPlans",
    "Executor",
    "FallbackExecutor",
    "SequentialExecutor",
    "client_start",
    "name_failed_clients",
]
