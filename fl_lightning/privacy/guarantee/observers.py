"""Who observes a run, what each observer receives, and its ε: the per-observer table every
guarantee carries.

A differential-privacy guarantee bounds what one adversary learns from what *it* receives; the
same run has a different ε against each party of its trust model:

* :attr:`Observer.THIRD_PARTY` sees only what the run releases (every round's global model and
  the final one). The cohorts are secret from it, so amplification by sampling holds against it
  (the sample must be hidden from the adversary: Balle, Barthe & Gaboardi 2018; Zhu & Wang 2019).
  This is the headline ε of every run (the "Finished" line names it).
* :attr:`Observer.SERVER` draws the cohorts and receives every object the server-side code
  receives, as the strategy declares it (``Strategy.server_view``, priced through
  :class:`ServerSees`):
  the clipped updates before the noise under central DP (no finite ε: central DP trusts the
  server), each client's own noised upload when the clients add the noise, the modular sums of
  the survivors' masked uploads and who survived under secure aggregation. It knows who took
  part, so nothing is amplified by sampling against it: under SecAgg each client is priced with
  q = 1 over the sums it was actually in (:func:`secure_sum_epsilons`, from the survivor sets
  the ledger records, ``DistributedNoiseEvent.members``); record-level DP-SGD and local DP are
  priced on the client, whose view it shares.
* :attr:`Observer.CLIENT`, another client, listed where it differs from the third party: under
  SecAgg a client learns the roster of the rounds it is in (the masking graph), so no
  amplification is claimed against it either; what it receives (the global models of its
  rounds and their rosters) is a function of the server's view, so the server's ε bounds it.

Each row names the observer, what it receives and how its ε is priced; docs/privacy.md
(Observers) explains the table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

import numpy as np

from fl_lightning.privacy.accounting.events import DistributedNoiseEvent
from fl_lightning.privacy.distributed.accounting import ORDERS, round_rdp
from fl_lightning.privacy.guarantee.server_view import ServerView


class Observer(StrEnum):
    """A party a guarantee can hold against (module docstring)."""

    THIRD_PARTY = "third_party"
    SERVER = "server"
    CLIENT = "client"

    @property
    def words(self) -> str:
        return {"third_party": "a third party", "server": "the server", "client": "another client"}[
            self.value
        ]


class ServerSees(StrEnum):
    """How the server's ε is priced, from what the server-side code of a strategy's
    client-level mechanism receives: read from the one declaration of that view,
    ``Strategy.server_view`` (``privacy/guarantee/server_view.py``), by :meth:`of`."""

    CLEAR = "clear"
    """Each client's clipped update before the noise: the server adds the noise (central DP,
    McMahan et al. 2018; DP-FTRL's tree/matrix noise)."""
    NOISED_UPLOADS = "noised_uploads"
    """Each client's upload with the noise its client added (FedSMP's rand-k, NbAFL's uplink)."""
    SECURE_SUM = "secure_sum"
    """Only the modular sum of the survivors' masked uploads, and who survived (SecAgg)."""

    @classmethod
    def of(cls, view: ServerView) -> ServerSees:
        """The pricing of a declared view: updates as trained or clipped → ``CLEAR`` (the
        server holds them before any noise), noised uploads → ``NOISED_UPLOADS``, secure sums
        → ``SECURE_SUM``."""
        return {
            "updates": cls.CLEAR,
            "clipped updates": cls.CLEAR,
            "noised uploads": cls.NOISED_UPLOADS,
            "secure sums": cls.SECURE_SUM,
        }[view.uploads]


RECEIVES: dict[str, str] = {
    "third_party": "the released models (every round's global model and the final one)",
    "clear": "the cohorts and each client's clipped update before the noise",
    "noised_uploads": "the cohorts and each client's upload with its own noise",
    "secure_sum": "the cohorts, who survived, and the modular sum of the survivors' masked "
    "uploads each round",
    "record": "the cohorts and each client's update trained by DP-SGD on the client",
    "local": "the cohorts and each client's privatised upload",
    "client_secure_sum": "the global models of the rounds it is in and their rosters (the "
    "masking graph)",
    "none": "everything the run uploads",
}
"""What each observer receives, by the run's level and ``ServerSees``."""


@dataclass(frozen=True)
class ObserverEpsilon:
    """One row of the table: an observer, what it receives, its ε and how that is priced.

    Attributes:
        observer: who.
        receives: what it receives, in words.
        epsilon: its ε at the run's δ (for the worst client where clients differ; ∞: no finite
            guarantee against it).
        priced: how the ε is computed against it (amplification, or why there is none).
        epsilon_mean: the mean over clients of each client's ε, where clients differ (the
            server's view under SecAgg); None otherwise.
        sums_mean: the mean number of sums a client was in (with ``epsilon_mean``).
        sums_worst: the sums the worst client was in (with ``epsilon_mean``).
    """

    observer: Observer
    receives: str
    epsilon: float
    priced: str
    epsilon_mean: float | None = None
    sums_mean: float | None = None
    sums_worst: int | None = None

    def to_state(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if v is not None}
        out["observer"] = self.observer.value
        return out

    def clause(self) -> str:
        """The row in one clause of the console line."""
        if math.isinf(self.epsilon):
            return f"against {self.observer.words}: ε = ∞ ({self.priced})"
        if self.epsilon_mean is not None:
            return (
                f"against {self.observer.words}: ε = {self.epsilon_mean:.3g} for the mean client "
                f"({self.sums_mean:.3g} sums), {self.epsilon:.3g} for the worst "
                f"({self.sums_worst} sums), {self.priced}"
            )
        return f"against {self.observer.words}: ε = {self.epsilon:.3g}, {self.priced}"


@dataclass(frozen=True)
class PerClient:
    """Each client's ε over the rounds it was in (:func:`secure_sum_epsilons`)."""

    epsilon: dict[int, float]
    sums: dict[int, int]

    @property
    def worst(self) -> int:
        return max(self.epsilon, key=lambda c: (self.epsilon[c], -c))

    @property
    def mean_epsilon(self) -> float:
        return float(np.mean(list(self.epsilon.values()))) if self.epsilon else 0.0

    @property
    def mean_sums(self) -> float:
        return float(np.mean(list(self.sums.values()))) if self.sums else 0.0


ANY_CLIENT = -1
"""The client of :func:`secure_sum_epsilons` for a ledger that recorded no survivor sets (one
written before they were): a client in every sum."""


def unamplified(event: DistributedNoiseEvent) -> DistributedNoiseEvent:
    """The round as an observer who knows the cohort sees it: no sampling (q = 1)."""
    return replace(event, sample_rate=1.0)


def secure_sum_epsilons(events: Sequence[DistributedNoiseEvent], delta: float) -> PerClient:
    """Each client's ε at ``delta`` against the server under SecAgg: the RDP of every sum it
    was in (``events[t].members``), each without amplification (q = 1, the round's survivors'
    noise), added order by order (Mironov 2017, Prop. 1) and converted as the run's
    distributed accountant does (``distributed.accounting.rdp_to_epsilon``). A round of a
    ledger that recorded no members counts for every client seen (the worst case); a ledger
    with none at all is priced for :data:`ANY_CLIENT`, in every sum."""
    from fl_lightning.privacy.distributed.accounting import rdp_to_epsilon

    clients = sorted({c for e in events for c in e.members})
    if not clients:  # a ledger without survivor sets: one client in every sum, the worst case
        clients = [ANY_CLIENT] if any(e.survivors for e in events) else []
    if not clients:
        return PerClient({}, {})
    index = {c: i for i, c in enumerate(clients)}
    rdp = np.zeros((len(clients), len(ORDERS)))
    sums = np.zeros(len(clients), dtype=int)
    for e in events:
        if e.survivors == 0:
            continue
        row = np.asarray(round_rdp(unamplified(e)))
        rows = [index[c] for c in e.members] if e.members else list(range(len(clients)))
        rdp[rows] += row
        sums[rows] += 1
    eps = {c: rdp_to_epsilon(rdp[index[c]], delta) for c in clients}
    return PerClient(eps, {c: int(sums[index[c]]) for c in clients})


def sampling_words(amplified: str | None) -> str:
    """How the third party's ε is priced: ``amplified`` names the sampling it is amplified by
    (None: no amplification, the cohorts are every client or fixed without a claim)."""
    if amplified is None:
        return "no amplification by sampling claimed"
    return f"amplified by {amplified}, secret from it"


def observer_table(
    *,
    level: str,
    headline: float,
    amplified: str | None,
    server_view: ServerSees,
    server_epsilon: float | None = None,
    secure_sum: PerClient | None = None,
) -> list[ObserverEpsilon]:
    """The rows of a run's guarantee (module docstring). ``level``: ``client``, ``distributed``,
    ``record``, ``local`` or ``none``; ``headline``: the third party's ε; ``server_epsilon``: the
    server's ε of client-side noise composed without amplification (``NOISED_UPLOADS``), or,
    at the local level, of each upload as the server receives it when that is more than the
    released sum shows (None: the headline's own releases);
    ``secure_sum``: the server's per-client ε under SecAgg."""
    third = ObserverEpsilon(
        Observer.THIRD_PARTY, RECEIVES["third_party"], headline, sampling_words(amplified)
    )
    if level == "none" or math.isinf(headline):
        return [replace(third, priced="no guarantee")] + [
            ObserverEpsilon(Observer.SERVER, RECEIVES["none"], math.inf, "no guarantee")
        ]
    if level in ("record", "local"):
        priced = (
            "the clients' own DP-SGD, whose batches it does not see; no client sampling claimed"
            if level == "record"
            else "each upload's own noise, no amplification"
        )
        seen = headline
        if level == "local" and server_epsilon is not None:
            seen = server_epsilon  # it receives each upload, the third party only their sum
            priced = (
                "each upload with only its own client's noise (the third party's ε counts every "
                "client's noise in the sum), no amplification"
            )
        return [third, ObserverEpsilon(Observer.SERVER, RECEIVES[level], seen, priced)]
    if level == "distributed":
        assert secure_sum is not None
        worst = secure_sum.worst if secure_sum.epsilon else None
        server = ObserverEpsilon(
            Observer.SERVER,
            RECEIVES["secure_sum"],
            secure_sum.epsilon[worst] if worst is not None else 0.0,
            "no amplification (it draws the cohorts and learns the survivors): q = 1 over the "
            "sums each client was in",
            epsilon_mean=secure_sum.mean_epsilon,
            sums_mean=secure_sum.mean_sums,
            sums_worst=secure_sum.sums[worst] if worst is not None else 0,
        )
        client = replace(
            server,
            observer=Observer.CLIENT,
            receives=RECEIVES["client_secure_sum"],
            priced="at most the server's (its view is a function of the server's; it knows "
            "the rosters of its rounds, so no amplification is claimed)",
        )
        return [third, server, client]
    if server_view == ServerSees.NOISED_UPLOADS:
        assert server_epsilon is not None
        priced = (
            "each client's own noise, no amplification (it knows who uploaded), for a client "
            "in every round"
        )
        return [
            third,
            ObserverEpsilon(Observer.SERVER, RECEIVES["noised_uploads"], server_epsilon, priced),
        ]
    return [
        third,
        ObserverEpsilon(
            Observer.SERVER,
            RECEIVES["clear"],
            math.inf,
            "central DP: it receives the clipped updates and adds the noise itself",
        ),
    ]


def from_state(rows: Sequence[dict[str, Any]]) -> list[ObserverEpsilon]:
    """The rows :meth:`ObserverEpsilon.to_state` wrote (``privacy_ledger.json``)."""
    return [ObserverEpsilon(**{**row, "observer": Observer(row["observer"])}) for row in rows or ()]


__all__ = [
    "RECEIVES",
    "Observer",
    "ObserverEpsilon",
    "PerClient",
    "ServerSees",
    "from_state",
    "observer_table",
    "sampling_words",
    "secure_sum_epsilons",
    "unamplified",
]
