"""Who the canary audit attacks: the observers a guarantee can name, and the ε to compare with.

Andrew et al. (ICLR 2024, Sec. 4) audit the same run against two adversaries, one who sees
only the final model and one who sees every model the server releases; Nasr et al. (USENIX
Security 2023) show that the adversary who sees every step is the one whose audit comes close
to the proof. An :class:`Observer` names what the adversary receives, whether it knows in which
rounds a canary took part, and how an "out" canary behaves so that the pair of runs it tells
apart is a pair the guarantee covers (:func:`insertion`):

* ``final`` — a third party holding the final model θ_T (and θ_0).
* ``all_models`` — a third party holding every released global model θ_0 … θ_T (what
  DP-FedAvg and DP-FTRL publish each round). It knows the public schedule (cyclic cohorts),
  not who a Poisson or fixed-size draw picked: sampling stays secret from it.
* ``server`` — the server: it draws the cohort (so it sees every canary that takes part, "in"
  or "out") and receives each round what its code receives: the modular sum under SecAgg
  (distributed DP), every processed upload otherwise (clipped under central DP, noised under
  local DP).

:func:`comparison_epsilon` returns the accountant ε a row of the audit is compared with and
the sentence saying which one it is. It reads the run's accountant report only; the
per-observer table of the privacy statement (issue 55, "an ε per observer") replaces its body
when it lands.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fl_lightning.privacy.accounting.events import CohortSampling
from fl_lightning.strategies.distributed_dp import SecAggDistributedDP


@dataclass(frozen=True)
class Observer:
    """One adversary of the audit.

    Attributes:
        name: ``final`` | ``all_models`` | ``server`` (``--observer``).
        sees: what it receives, in words (the threat model written beside the numbers).
        sees_cohort: it knows which clients took part in a round (the server draws them).
    """

    name: str
    sees: str
    sees_cohort: bool


OBSERVERS: dict[str, Observer] = {
    "final": Observer(
        "final",
        "a third party who sees only the final model (and the initial one)",
        sees_cohort=False,
    ),
    "all_models": Observer(
        "all_models",
        "a third party who sees every released global model, round by round, and the public "
        "schedule of cohorts, not who a random draw picked",
        sees_cohort=False,
    ),
    "server": Observer(
        "server",
        "the server: it draws the cohort and receives what its code receives each round (the "
        "modular sum under SecAgg, every processed upload otherwise)",
        sees_cohort=True,
    ),
}


def observer(name: str) -> Observer:
    """The observer called ``name``; one line naming the flag otherwise."""
    if name not in OBSERVERS:
        raise ValueError(f"audit.observer: one of {', '.join(OBSERVERS)}, got {name!r}")
    return OBSERVERS[name]


@dataclass(frozen=True)
class Insertion:
    """How canary i enters the run once its fair coin is drawn.

    Attributes:
        out: what an "out" canary does: ``absent`` (never takes part: add/remove one client),
            ``zero`` (takes part and uploads 0: the server sees the client, not its data) or
            ``negated`` (takes part with −C·uᵢ: replace-one, the two uploads 2C apart).
        adjacency: the adjacency the pair of runs probes, in the guarantee's words.
    """

    out: str
    adjacency: str


ADD_REMOVE = "add/remove one client"
REPLACE_ONE = "replace-one client"


def insertion(obs: Observer, sampling: CohortSampling | None) -> Insertion:
    """The worst case the guarantee covers for ``obs`` under ``sampling``: fixed-size cohorts
    smaller than the population are accounted replace-one (Wang, Balle & Kasiviswanathan 2019),
    so a canary substitutes +C·uᵢ by −C·uᵢ; otherwise add/remove, where a canary the observer
    would see take part (the server) uploads 0 when "out" instead of being absent."""
    if sampling is not None and sampling.without_replacement:
        return Insertion("negated", f"{REPLACE_ONE} (+C·u against −C·u)")
    if obs.sees_cohort:
        return Insertion("zero", f"{ADD_REMOVE} (its update against none; its presence seen)")
    return Insertion("absent", ADD_REMOVE)


def claimed_adjacency(sampling: CohortSampling | None) -> str:
    """The adjacency the run's guarantee claims under ``sampling``."""
    return REPLACE_ONE if sampling is not None and sampling.without_replacement else ADD_REMOVE


def secure_sum(strategy: Any) -> SecAggDistributedDP | None:
    """The strategy's SecAgg component when the server sees only sums (distributed DP)."""
    central = getattr(strategy, "central_dp", None)
    return central if isinstance(central, SecAggDistributedDP) else None


def comparison_epsilon(obs: Observer, report: dict[str, Any], strategy: Any) -> tuple[float, str]:
    """(the accountant ε a row for ``obs`` is compared with, which ε that is).

    The run's accountant prices what a third party receives: every released model (the final
    one is post-processing of them), with amplification by sampling where the cohort is secret
    from it. The server's row is the guarantee's own ε against the server
    (``privacy/epsilon_server``, ``privacy/guarantee/observers.py``): ∞ under central DP (it
    receives each clipped upload), under SecAgg the worst client's ε without amplification (it draws
    the cohort and learns the survivors), under local DP the ε of each upload it receives."""
    run_eps = float(report.get("privacy/epsilon", math.inf))
    if math.isinf(run_eps):
        return math.inf, "none: the run claims no finite ε"
    if obs.name != "server":
        return run_eps, "the run's ε (its accountant: every released model, a third party)"
    server_eps = float(report.get("privacy/epsilon_server", run_eps))
    if secure_sum(strategy) is not None:
        return server_eps, (
            "the run's ε against the server (no amplification: it draws the cohort; the worst "
            "client's, over the secure sums it was in)"
        )
    if getattr(strategy, "central_dp", None) is not None:
        return (
            math.inf,
            "∞: the server receives each clipped upload (central DP hides the "
            "released model, not the upload)",
        )
    return server_eps, "the run's ε against the server (each upload it receives)"


__all__ = [
    "ADD_REMOVE",
    "OBSERVERS",
    "REPLACE_ONE",
    "Insertion",
    "Observer",
    "claimed_adjacency",
    "comparison_epsilon",
    "insertion",
    "observer",
    "secure_sum",
]
