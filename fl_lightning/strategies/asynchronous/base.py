"""AsyncStrategy: (semi-)asynchronous aggregation on top of the synchronous round loop.

How it pairs with the core (one ``FederatedModule`` training step = one round):

1. ``select_clients``: the sampled cohort minus clients still computing an earlier update
   (their upload has not arrived yet) and minus clients ``local_dp`` finds ineligible (e.g. a
   spent privacy budget); with ``refill`` the cohort is topped up, seeded by (seed, round), from
   the idle eligible clients.
2. The unchanged ``SequentialExecutor`` trains every dispatched client *now*, from the current
   global model W^t; ``ClientUpdate.base_round`` = t records that version. Training at dispatch
   time is exactly "a late update was computed from the global model version the client started
   from": nothing is re-run later, the processed upload itself waits in the buffer.
3. ``aggregate`` (``reduction = "gather"``) draws each new update's compute time from the
   seeded :class:`~.clock.DelayModel`, asks the :class:`~.clock.AsyncClock` in which round it
   arrives, buffers the late ones (or drops them with ``drop_late``) and hands the updates
   arriving this round, with their staleness, to ``aggregate_arrivals`` (the algorithm:
   FedBuff, FedAsync, ADP-FL, ...).
   Strategies that need the global model an update was computed from (FedAsync's mixing) set
   ``keeps_versions``: the global vector of every round with an update still in flight is kept
   (and freed when its last update arrives).

Local DP is not part of the algorithm: like any strategy, an ``AsyncStrategy`` may hold a
:class:`~fl_lightning.strategies.budgeted_uploads.BudgetedUploads` as ``local_dp`` (clip and
noise on every upload within a per-client budget; clients that cannot afford their next upload
are not dispatched, nor drawn to refill the cohort), so FedBuff, FedAsync and ADP-FL's
aggregation each take the same noise from configuration, e.g.::

    strategy:
      class_path: fl_lightning.strategies.fedbuff.FedBuff
      init_args:
        buffer_size: 10
        local_dp:
          class_path: fl_lightning.strategies.budgeted_uploads.BudgetedUploads
          init_args: {epsilon: 10.0, mechanism: gaussian, clip_norm: 1.0}

Everything is checkpointed through ``state_dict`` as tensors and plain values.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

import torch

from fl_lightning.records import ClientUpdate, RoundContext, RoundPlan
from fl_lightning.strategies.asynchronous.buffer import Arrival
from fl_lightning.strategies.asynchronous.buffer import update_from_state as _update_from_state
from fl_lightning.strategies.asynchronous.buffer import update_to_state as _update_to_state
from fl_lightning.strategies.asynchronous.clock import AsyncClock, DelayKind, DelayModel
from fl_lightning.strategies.base import Metrics, Strategy, Weighting
from fl_lightning.strategies.upload_privacy import UploadPrivacy
from fl_lightning.utils.rng import generator_for


class AsyncStrategy(Strategy):
    """Base class of asynchronous strategies driven by a simulated clock.

    Args:
        weighting: client weight in the default weighted mean (``num_examples`` or ``uniform``).
        delay_kind: ``constant``, ``exponential`` or ``lognormal`` compute times.
        delay_mean: delay scale (simulated seconds; the median for ``lognormal``).
        delay_sigma: log-normal shape.
        straggler_fraction: share of clients that are stragglers.
        straggler_slowdown: stragglers' delay multiplier.
        receive_window: length of each round's receive ("green") window.
        aggregation_window: length of each round's aggregation ("red") window.
        drop_late: drop updates that miss their dispatch round instead of buffering them.
        refill: top the cohort up with idle clients when busy/ineligible ones are removed.
        local_dp: a mechanism on every upload (``UploadPrivacy``, e.g. ``BudgetedUploads``:
            local DP within a per-client budget; ``None``: uploads as trained).
    """

    reduction = "gather"
    keeps_versions: ClassVar[bool] = False
    """True when ``aggregate_arrivals`` needs the global model each update started from."""

    def __init__(
        self,
        *,
        weighting: Weighting = "num_examples",
        delay_kind: DelayKind = "constant",
        delay_mean: float = 0.0,
        delay_sigma: float = 0.5,
        straggler_fraction: float = 0.0,
        straggler_slowdown: float = 1.0,
        receive_window: float = 1.0,
        aggregation_window: float = 0.0,
        drop_late: bool = False,
        refill: bool = True,
        local_dp: UploadPrivacy | None = None,
    ) -> None:
        super().__init__(weighting=weighting, local_dp=local_dp)
        self.delay = DelayModel(
            kind=delay_kind,
            mean=delay_mean,
            sigma=delay_sigma,
            straggler_fraction=straggler_fraction,
            straggler_slowdown=straggler_slowdown,
        )
        self.clock = AsyncClock(
            receive_window=receive_window,
            aggregation_window=aggregation_window,
            drop_late=drop_late,
        )
        self.refill = refill
        self.pending: dict[int, list[Arrival]] = {}
        self.busy_until: dict[int, float] = {}
        self.versions: dict[int, torch.Tensor] = {}
        self.model_version = 0
        self.dropped_total = 0
        self.client_time_total = 0.0
        self._mark = 0.0

    # -- dispatch ----------------------------------------------------------------------------
    def is_busy(self, client_id: int, round_idx: int) -> bool:
        return self.busy_until.get(client_id, -math.inf) > self.clock.dispatch_time(round_idx)

    def select_clients(self, ctx: RoundContext) -> list[int]:
        """The sampled clients that are idle and can afford their next upload (``local_dp``),
        topped up from the rest of the population in a keyed random order with ``refill``."""
        local_dp = self.local_dp
        if local_dp is not None:
            local_dp.start_selection(ctx)

        def available(c: int) -> bool:
            idle = not self.is_busy(c, ctx.round_idx)
            return idle and (local_dp is None or local_dp.eligible(c, ctx))

        chosen = [c for c in ctx.cohort if available(c)]
        if self.refill and len(chosen) < len(ctx.cohort):
            sampled = set(ctx.cohort)
            g = generator_for(ctx.seed, ctx.round_idx, "async_refill")
            for c in torch.randperm(ctx.num_clients, generator=g, device=g.device).tolist():
                if len(chosen) >= len(ctx.cohort):
                    break
                if c not in sampled and available(c):
                    chosen.append(c)
        return sorted(chosen)

    def configure_round(self, ctx: RoundContext) -> RoundPlan:
        """Charges the dispatched clients' upload budgets and starts the per-client clock."""
        plan = super().configure_round(ctx)
        self._mark = time.perf_counter()
        return plan

    def process_update(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        """Stamps the model version the update started from and privatises it (``local_dp``)."""
        update.extras["base_version"] = self.model_version
        update = super().process_update(update, ctx, generator=generator)
        # Per-client time (ADP-FL's Table 5 analogue): local training, clipping and noise.
        now = time.perf_counter()
        update.metrics["client_time_s"] = now - self._mark
        self._mark = now
        return update

    # -- arrival -----------------------------------------------------------------------------
    def aggregate(
        self, updates: Iterable[ClientUpdate], ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        t = ctx.round_idx
        late = dropped = 0
        arrived: list[Arrival] = []
        updates = list(updates)  # under DDP: every rank's clients
        self.client_time_total += sum(u.metrics.get("client_time_s", 0.0) for u in updates)
        for u in updates:
            d = self.delay.sample(ctx.seed, t, u.client_id)
            arrival_time = self.clock.arrival_time(t, d)
            r = self.clock.aggregation_round(t, d)
            self.busy_until[u.client_id] = arrival_time
            a = Arrival(u, t, arrival_time, int(u.extras.get("base_version", self.model_version)))
            if r == t:
                arrived.append(a)
            elif self.clock.drop_late:
                dropped += 1
            else:
                late += 1
                self.pending.setdefault(r, []).append(a)
                if self.keeps_versions and t not in self.versions:
                    self.versions[t] = ctx.global_params.detach().clone()
        arrived.extend(self.pending.pop(t, []))
        arrived.sort(key=lambda a: (a.arrival_time, a.update.client_id))
        for a in arrived:
            a.staleness = t - a.dispatch_round
        self.dropped_total += dropped
        aggregate, metrics = self.aggregate_arrivals(arrived, ctx, generator=generator)
        self._release_versions()
        stale = [a.staleness for a in arrived]
        return aggregate, metrics | {
            "async/arrived": float(len(arrived)),
            "async/late_buffered": float(late),
            "async/dropped": float(dropped),
            "async/dropped_total": float(self.dropped_total),
            "async/in_flight": float(sum(len(v) for v in self.pending.values())),
            "async/staleness_mean": sum(stale) / len(stale) if stale else 0.0,
            "async/staleness_max": float(max(stale, default=0)),
            "async/model_version": float(self.model_version),
            # The simulated wall clock at this round's aggregation point (end of its
            # receive window): the time axis of the clients' simulated compute.
            "async/sim_time": self.clock.dispatch_time(t) + self.clock.receive_window,
        }

    def base_params(self, arrival: Arrival, ctx: RoundContext) -> torch.Tensor:
        """The global model ``arrival`` was computed from (needs ``keeps_versions``)."""
        if arrival.dispatch_round == ctx.round_idx:
            return ctx.global_params
        return self.versions[arrival.dispatch_round]

    def _release_versions(self) -> None:
        needed = {a.dispatch_round for arrivals in self.pending.values() for a in arrivals}
        for r in [r for r in self.versions if r not in needed]:
            del self.versions[r]

    def aggregate_arrivals(
        self, arrivals: Sequence[Arrival], ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        """The global delta from this round's arrivals and what the policy observed. Default:
        weighted mean (FedAvg)."""
        result = super().aggregate([a.update for a in arrivals], ctx, generator=generator)
        if arrivals:
            self.model_version += 1
        return result

    def after_round(self, ctx: RoundContext, aggregate: torch.Tensor) -> Metrics:
        return {
            "dispatched": float(len(ctx.cohort)),
            "client_time_total_s": self.client_time_total,
        } | super().after_round(ctx, aggregate)

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() | {
            "pending": {
                r: [
                    {
                        "update": _update_to_state(a.update),
                        "dispatch_round": a.dispatch_round,
                        "arrival_time": a.arrival_time,
                        "base_version": a.base_version,
                    }
                    for a in arrivals
                ]
                for r, arrivals in self.pending.items()
            },
            "busy_until": dict(self.busy_until),
            "versions": {r: v.detach().cpu() for r, v in self.versions.items()},
            "model_version": self.model_version,
            "dropped_total": self.dropped_total,
            "client_time_total": self.client_time_total,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.pending = {
            int(r): [
                Arrival(
                    _update_from_state(a["update"]),
                    int(a["dispatch_round"]),
                    float(a["arrival_time"]),
                    int(a["base_version"]),
                )
                for a in arrivals
            ]
            for r, arrivals in state_dict["pending"].items()
        }
        self.busy_until = {int(c): float(t) for c, t in state_dict["busy_until"].items()}
        self.versions = {int(r): v for r, v in state_dict["versions"].items()}
        self.model_version = int(state_dict["model_version"])
        self.dropped_total = int(state_dict["dropped_total"])
        self.client_time_total = float(state_dict.get("client_time_total", 0.0))
        super().load_state_dict(state_dict)


__all__ = ["Arrival", "AsyncStrategy"]
