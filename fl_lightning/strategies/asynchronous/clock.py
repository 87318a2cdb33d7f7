"""A simulated clock for asynchronous / semi-asynchronous federated learning.

No real concurrency: a client's local training runs when it is *dispatched* (from the global
model of that round, recorded as ``ClientUpdate.base_round``); the clock only decides *when*
its upload arrives at the server and therefore in which round it is aggregated.

Time model (ADP-FL, Wu et al. 2025, Sec. 4.2, Fig. 2; the window lengths are decision D4 of
``shared/papers/004-adp-fl-async.notes.md``): round r occupies ``[r·P, (r+1)·P)`` with period
``P = receive_window + aggregation_window``. Its first ``receive_window`` seconds are the
"green" receive window, the rest the "red" aggregation window. A client dispatched in round t
starts at ``t·P`` and uploads at ``t·P + d`` with compute time ``d`` from a seeded
:class:`DelayModel`. The update is aggregated at the first aggregation point
``r·P + receive_window`` (r ≥ t) not earlier than its arrival, so

* arriving in round t's receive window: aggregated in round t (staleness 0);
* arriving later (in t's red window or any later round): buffered and aggregated in the round
  it arrives in (the next one when it lands in a red window), staleness τ = r − t; or dropped
  when ``drop_late`` is set (decision D10).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from fl_lightning.utils.rng import derive_seed

DelayKind = Literal["constant", "exponential", "lognormal"]


@lru_cache(maxsize=1 << 16)
def _uniform(*keys: int | str) -> float:
    return random.Random(derive_seed(*keys)).random()


@dataclass(frozen=True)
class DelayModel:
    """Per-client compute time (simulated seconds), seeded by (seed, round, client).

    Attributes:
        kind: ``constant`` (always ``mean``), ``exponential`` (mean ``mean``) or ``lognormal``
            (median ``mean``, log-space standard deviation ``sigma``).
        mean: scale of the delay in simulated seconds (0 with ``constant``: no delay).
        sigma: log-normal shape.
        straggler_fraction: share of clients that are stragglers (chosen once per run, seeded
            by (seed, client)); their delays are multiplied by ``straggler_slowdown``.
        straggler_slowdown: slowdown factor of a straggler (≥ 1).
    """

    kind: DelayKind = "constant"
    mean: float = 0.0
    sigma: float = 0.5
    straggler_fraction: float = 0.0
    straggler_slowdown: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in ("constant", "exponential", "lognormal"):
            raise ValueError(
                f"strategy.delay.kind: expected constant, exponential or lognormal, "
                f"got {self.kind!r}"
            )
        if self.mean < 0:
            raise ValueError(f"strategy.delay.mean: must be >= 0, got {self.mean}")
        if self.kind != "constant" and self.mean == 0:
            raise ValueError(f"strategy.delay.mean: must be > 0 for {self.kind} delays")
        if self.sigma < 0:
            raise ValueError(f"strategy.delay.sigma: must be >= 0, got {self.sigma}")
        if not 0.0 <= self.straggler_fraction <= 1.0:
            raise ValueError(
                f"strategy.delay.straggler_fraction: must be in [0, 1], "
                f"got {self.straggler_fraction}"
            )
        if self.straggler_slowdown < 1.0:
            raise ValueError(
                f"strategy.delay.straggler_slowdown: must be >= 1, got {self.straggler_slowdown}"
            )

    def is_straggler(self, seed: int, client_id: int) -> bool:
        """Whether ``client_id`` is a straggler in this run (fixed for the whole run)."""
        if self.straggler_fraction <= 0.0:
            return False
        return _uniform(seed, client_id, "straggler") < self.straggler_fraction

    def sample(self, seed: int, round_idx: int, client_id: int) -> float:
        """Compute time of ``client_id`` dispatched in ``round_idx`` (a pure function)."""
        if self.kind == "constant":
            d = self.mean
        else:
            # Python's Mersenne Twister keyed by (seed, round, client): cheap to build per draw.
            rng = random.Random(derive_seed(seed, round_idx, client_id, "delay"))
            if self.kind == "exponential":
                d = rng.expovariate(1.0 / self.mean)
            else:
                d = self.mean * math.exp(self.sigma * rng.gauss(0.0, 1.0))
        if self.is_straggler(seed, client_id):
            d *= self.straggler_slowdown
        return d


@dataclass(frozen=True)
class AsyncClock:
    """Receive and aggregation windows of every round (simulated seconds).

    Attributes:
        receive_window: length of the "green" window in which uploads count for the round.
        aggregation_window: length of the "red" window in which the server aggregates.
        drop_late: drop updates that miss their dispatch round's receive window instead of
            buffering them.
    """

    receive_window: float = 1.0
    aggregation_window: float = 0.0
    drop_late: bool = False

    def __post_init__(self) -> None:
        if self.receive_window <= 0:
            raise ValueError(
                f"strategy.clock.receive_window: must be > 0, got {self.receive_window}"
            )
        if self.aggregation_window < 0:
            raise ValueError(
                f"strategy.clock.aggregation_window: must be >= 0, got {self.aggregation_window}"
            )

    @property
    def period(self) -> float:
        return self.receive_window + self.aggregation_window

    def dispatch_time(self, round_idx: int) -> float:
        return round_idx * self.period

    def arrival_time(self, round_idx: int, delay: float) -> float:
        return self.dispatch_time(round_idx) + delay

    def aggregation_round(self, dispatch_round: int, delay: float) -> int:
        """The round whose aggregation first sees an update dispatched in ``dispatch_round``."""
        arrival = self.arrival_time(dispatch_round, delay)
        # Smallest r with r·P + receive_window >= arrival (a tiny slack absorbs float error).
        r = math.ceil((arrival - self.receive_window) / self.period - 1e-9)
        return max(dispatch_round, r)


__all__ = ["AsyncClock", "DelayModel"]
