"""Privacy planning for DP-SGD clients: the event one client's local training produces, the
histories σ is calibrated on so that *every* client stays within the target (the calibration
itself is ``analysis.calibrate_noise_multiplier``), and the refusal of a budget that cannot pay
for one round.

The rule "what one DP-SGD client spends in a round" is written once, here
(:func:`dp_sgd_event`), and used by the local loop, the server's budget planning and the
vectorised executor: ``steps`` Poisson-subsampled Gaussian steps at rate q = min(1, B/n_i)
(Abadi et al. 2016, Alg. 1; add/remove one record).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fl_lightning.privacy.accounting.analysis import epsilon
from fl_lightning.privacy.accounting.events import SampledGaussian

PARTICIPATION_CONFIDENCE = 1e-3
"""Calibration covers the participation count that no client exceeds with probability at least
1 − this (union bound over clients); the exact budget stop guards the remaining tail."""


class BudgetError(ValueError):
    """The privacy target cannot pay for what the configuration asks (raised before training)."""


@dataclass(frozen=True)
class ClientCost:
    """What one client's DP-SGD participation costs: ``steps`` steps at ``rate`` a round."""

    client_id: int
    size: int
    rate: float
    steps: int


def dp_sgd_rate(*, batch_size: int, size: int) -> float:
    """Poisson rate min(1, B/n) of a client's DP-SGD batches."""
    return min(1.0, batch_size / max(size, 1))


def dp_sgd_event(
    noise_multiplier: float, *, batch_size: int, size: int, steps: int
) -> SampledGaussian:
    """The record-level event of ``steps`` DP-SGD steps of a client holding ``size`` examples
    with expected batch ``batch_size`` (Poisson rate :func:`dp_sgd_rate`)."""
    return SampledGaussian(
        float(noise_multiplier), dp_sgd_rate(batch_size=batch_size, size=size), steps
    )


def max_participations(rounds: int, rate: float, num_clients: int) -> int:
    """Rounds a client takes part in, at most, with probability ≥ 1 − PARTICIPATION_CONFIDENCE
    over all ``num_clients`` clients (Binomial(rounds, rate) quantile, scipy)."""
    if rate >= 1.0 or rounds <= 0:
        return max(rounds, 0)
    from scipy.stats import binom

    quantile = binom.ppf(1.0 - PARTICIPATION_CONFIDENCE / max(num_clients, 1), rounds, rate)
    return int(min(rounds, max(1, math.ceil(quantile))))


def pareto_front(costs: Sequence[ClientCost]) -> list[ClientCost]:
    """Clients no other client dominates (higher or equal rate *and* steps): the only ones
    that can be the most expensive, whatever σ."""
    by_key: dict[tuple[float, int], ClientCost] = {}
    for c in costs:
        by_key.setdefault((c.rate, c.steps), c)
    keys = sorted(by_key, key=lambda k: (-k[0], -k[1]))
    front, best_steps = [], -1
    for rate, steps in keys:
        if steps > best_steps:
            front.append(by_key[(rate, steps)])
            best_steps = steps
    return front


def dp_sgd_histories(
    costs: Sequence[ClientCost], *, participations: int
) -> list[list[SampledGaussian]]:
    """One history per client that can be the most expensive (:func:`pareto_front`), at noise
    multiplier 1: its steps over ``participations`` rounds, what
    :func:`~fl_lightning.privacy.accounting.analysis.calibrate_noise_multiplier` calibrates σ
    for."""
    return [[SampledGaussian(1.0, c.rate, c.steps * participations)] for c in pareto_front(costs)]


def most_expensive_round(
    costs: Sequence[ClientCost],
    *,
    noise_multiplier: float,
    delta: float,
    accountant: str,
    participations: int = 1,
) -> tuple[float, ClientCost]:
    """(ε, client) of the client whose ``participations`` rounds (default one) cost the most
    record-level ε."""
    worst: tuple[float, ClientCost] | None = None
    for c in pareto_front(costs):
        event = SampledGaussian(noise_multiplier, c.rate, c.steps * participations)
        eps = epsilon([event], delta, accountant)
        if worst is None or eps > worst[0]:
            worst = (eps, c)
    assert worst is not None
    return worst


def refuse_unaffordable_round(
    cost: float, target_epsilon: float | None, *, what: str, field: str
) -> None:
    """Raises :class:`BudgetError` when one round already costs more than the target."""
    if target_epsilon is not None and cost > target_epsilon:
        raise BudgetError(
            f"privacy.target_epsilon: {target_epsilon:g} cannot pay for a single round: {what} "
            f"costs ε = {cost:.4g} in one round; raise the target, or lower the cost "
            f"({field})"
        )
