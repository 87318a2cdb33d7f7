"""ε of a history of sampled-Gaussian events, by three maintained accountants.

* ``rdp``: Opacus' RDP accountant (Mironov 2017; Mironov, Talwar, Zhang 2019).
* ``prv``: Opacus' PRV accountant (Gopi, Lee, Wutschitz 2021).
* ``pld``: dp-accounting's privacy-loss-distribution accountant (Meiser & Mohammadi 2018;
  Koskela et al. 2020), Poisson-subsampled Gaussian events.

Fixed-size cohorts drawn without replacement (replace-one adjacency) are accounted by
dp-accounting's RDP accountant (Wang, Balle, Kasiviswanathan 2019); neither Opacus' PRV nor
dp-accounting's PLD supports that event, so those accountants refuse it instead of guessing.
Local releases compose by the best of basic composition and dp-accounting's PLD of a generic
(ε, δ)-DP mechanism (the optimal homogeneous composition, Kairouz, Oh, Viswanath 2015).

Nothing here is hand-rolled: each function only translates our events to the library's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Literal

import dp_accounting
import numpy as np

from fl_lightning.privacy.events import CohortSampling, SampledGaussian

AccountantName = Literal["rdp", "prv", "pld"]
ACCOUNTANTS: tuple[str, ...] = ("rdp", "prv", "pld")
History = tuple[tuple[float, float, int, int], ...]
"""(σ, q, steps, population) rows; population 0 is Poisson sampling."""


def as_history(events: Sequence[SampledGaussian]) -> History:
    """Canonical hashable history: consecutive identical (σ, q, N) entries are merged."""
    merged: list[list[float]] = []
    for e in events:
        if e.steps <= 0:
            continue
        key = [e.noise_multiplier, e.sample_rate, e.population]
        if merged and [merged[-1][0], merged[-1][1], merged[-1][3]] == key:
            merged[-1][2] += e.steps
        else:
            merged.append([e.noise_multiplier, e.sample_rate, e.steps, e.population])
    return tuple((float(s), float(q), int(k), int(n)) for s, q, k, n in merged)


@lru_cache(maxsize=1024)
def _rdp_per_step(sigma: float, q: float) -> np.ndarray:
    """Opacus' RDP of one sampled-Gaussian step at its default orders (cached per (σ, q))."""
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import compute_rdp

    return np.asarray(
        compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=RDPAccountant.DEFAULT_ALPHAS)
    )


@lru_cache(maxsize=4096)
def _epsilon_rdp(history: History, delta: float) -> float:
    """Same result as ``opacus.accountants.RDPAccountant`` with this history (RDP composes
    additively, so each (σ, q) is computed once and scaled by its steps)."""
    from opacus.accountants import RDPAccountant
    from opacus.accountants.analysis.rdp import get_privacy_spent

    if any(n for _, _, _, n in history):
        return _epsilon_rdp_without_replacement(history, delta)
    rdp = sum(steps * _rdp_per_step(sigma, q) for sigma, q, steps, _ in history)
    eps, _ = get_privacy_spent(orders=RDPAccountant.DEFAULT_ALPHAS, rdp=rdp, delta=delta)
    return float(eps)


def _epsilon_rdp_without_replacement(history: History, delta: float) -> float:
    """dp-accounting's RDP accountant, replace-one adjacency (fixed-size cohorts)."""
    if not all(n for _, _, _, n in history):
        raise ValueError(
            "model.sampling: one history mixes Poisson and fixed-size sampling, whose "
            "adjacencies (add/remove vs replace-one) cannot be composed"
        )
    acc = dp_accounting.rdp.RdpAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE
    )
    for sigma, q, steps, n in history:
        acc.compose(SampledGaussian(sigma, q, steps, n).dp_event(), steps)
    return float(acc.get_epsilon(delta))


def refuse_without_replacement(accountant: str, *, what: str = "fixed-size cohorts") -> None:
    """Raises unless ``accountant`` can compose sampling-without-replacement events (only
    dp-accounting's RDP accountant can; neither Opacus PRV nor dp-accounting PLD)."""
    if accountant != "rdp":
        raise ValueError(
            f"privacy.accountant: {accountant!r} cannot account {what} drawn without "
            "replacement (neither Opacus PRV nor dp-accounting PLD supports that event); "
            "use model.sampling: poisson, or privacy.accountant: rdp"
        )


def _refuse_without_replacement(history: History, accountant: str) -> None:
    if any(n for _, _, _, n in history):
        refuse_without_replacement(accountant)


@lru_cache(maxsize=256)
def _epsilon_prv(history: History, delta: float) -> float:
    from opacus.accountants import PRVAccountant

    _refuse_without_replacement(history, "prv")
    acc = PRVAccountant()
    acc.history = [(sigma, q, steps) for sigma, q, steps, _ in history]
    return float(acc.get_epsilon(delta))


@lru_cache(maxsize=256)
def _epsilon_pld(history: History, delta: float) -> float:
    _refuse_without_replacement(history, "pld")
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    for sigma, q, steps, n in history:
        acc.compose(SampledGaussian(sigma, q, steps, n).dp_event(), steps)
    return float(acc.get_epsilon(delta))


_BACKENDS: dict[str, Callable[[History, float], float]] = {
    "rdp": _epsilon_rdp,
    "prv": _epsilon_prv,
    "pld": _epsilon_pld,
}


def epsilon(events: Sequence[SampledGaussian] | History, delta: float, accountant: str) -> float:
    """ε at ``delta`` after the events; 0 for an empty history, ∞ when any σ is 0."""
    if accountant not in _BACKENDS:
        raise ValueError(f"privacy.accountant: unknown {accountant!r}; choose from {ACCOUNTANTS}")
    history = events if isinstance(events, tuple) else as_history(events)
    if not history:
        return 0.0
    if any(sigma == 0 for sigma, _, _, _ in history):
        return math.inf
    return _BACKENDS[accountant](history, float(delta))


def calibrate_noise_multiplier(
    *,
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str = "rdp",
    tolerance: float = 0.01,
    population: int = 0,
) -> float:
    """Smallest σ (to ``tolerance``) whose ``steps`` sampled-Gaussian steps stay within ε.

    Bisection on the same accountant that will report the run's ε, so the calibrated run
    reports at most ``target_epsilon``. ``population`` > 0: fixed-size sampling of
    round(q·N) of N without replacement (see :class:`SampledGaussian`).
    """
    if target_epsilon <= 0:
        raise ValueError(f"privacy.target_epsilon: must be > 0, got {target_epsilon}")

    def eps(sigma: float) -> float:
        event = SampledGaussian(sigma, sample_rate, steps, population)
        return epsilon([event], delta, accountant)

    low, high = 0.05, 1.0
    while eps(high) > target_epsilon:
        low, high = high, high * 2
        if high > 1e4:
            raise ValueError(
                f"privacy.target_epsilon: {target_epsilon} is unreachable for {steps} steps"
            )
    while high - low > tolerance:
        mid = (low + high) / 2
        if eps(mid) > target_epsilon:
            low = mid
        else:
            high = mid
    return high


def resolve_noise_multiplier(
    noise_multiplier: float | None,
    *,
    target_epsilon: float | None,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str,
    field: str = "strategy.noise_multiplier",
    population: int = 0,
) -> float:
    """``noise_multiplier`` when set, else σ calibrated to ``target_epsilon`` over ``steps``.

    Raises ``ValueError`` naming ``field`` when neither is given.
    """
    if noise_multiplier is not None:
        return noise_multiplier
    if target_epsilon is None:
        raise ValueError(f"{field}: unset, so privacy.target_epsilon is needed to calibrate it")
    return calibrate_noise_multiplier(
        target_epsilon=target_epsilon,
        delta=delta,
        sample_rate=sample_rate,
        steps=steps,
        accountant=accountant,
        population=population,
    )


@lru_cache(maxsize=4096)
def _optimal_composition(releases: tuple[tuple[float, float, int], ...], delta: float) -> float:
    """ε at ``delta`` of composing (ε_i, δ_i)-DP mechanisms k_i times each: dp-accounting's PLD
    of a generic (ε, δ)-DP mechanism (its dominating pair), self-composed and composed; ∞ when
    the mechanisms' own δ already exceeds ``delta``. Discretisation is pessimistic (an upper
    bound), with an interval scaled to the size of the result."""
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    if sum(k * d for _, d, k in releases) >= delta:
        return math.inf
    scale = sum(k * e for e, _, k in releases)
    interval = max(1e-3, scale * 1e-6)  # ~0.5 s for 26,000 compositions; ≤ 1 % loose
    total = None
    for eps, dlt, k in releases:
        params = common.DifferentialPrivacyParameters(eps, dlt)
        one = pld_lib.from_privacy_parameters(params, value_discretization_interval=interval)
        composed = one.self_compose(k)
        total = composed if total is None else total.compose(composed)
    assert total is not None
    return float(total.get_epsilon_for_delta(delta))


def local_epsilon(
    releases: Sequence[tuple[float, float, int]], delta: float, *, max_distinct: int = 16
) -> tuple[float, float, str]:
    """(ε, δ, theorem) of one client's local releases, given as (ε, δ, count) per unit.

    The smaller of basic composition ((Σ kε, Σ kδ)-DP) and the optimal composition at
    ``delta`` (only for at most ``max_distinct`` distinct (ε, δ), which keeps it fast)."""
    merged: dict[tuple[float, float], int] = {}
    for eps, dlt, k in releases:
        if k > 0:
            merged[(float(eps), float(dlt))] = merged.get((float(eps), float(dlt)), 0) + int(k)
    if not merged:
        return 0.0, 0.0, "nothing released"
    basic_eps = sum(k * e for (e, _), k in merged.items())
    basic_delta = sum(k * d for (_, d), k in merged.items())
    best = (basic_eps, basic_delta, "basic composition")
    # dp-accounting's PLD of an (ε, δ) mechanism evaluates e^ε: past ~700 it overflows, and for
    # per-release ε that large the optimal composition cannot improve on basic composition in
    # any way that matters, so basic composition is the answer there.
    if len(merged) <= max_distinct and max(e for e, _ in merged) <= 50.0:
        key = tuple(sorted((e, d, k) for (e, d), k in merged.items()))
        tight = _optimal_composition(key, float(delta))
        if tight < 0.99 * basic_eps:  # else pure ε-DP (δ = Σδ_i) is the stronger statement
            best = (tight, float(delta), "optimal composition (dp-accounting PLD)")
    return best


def refuse_sigma_and_epsilon(
    noise_multiplier: float | None,
    epsilon_target: float | None,
    *,
    sigma_field: str = "strategy.noise_multiplier",
    epsilon_field: str = "strategy.epsilon",
) -> None:
    """Refuses a configuration that sets both a noise multiplier and an ε target for it: the σ
    would win and the ε the user asked for would be silently ignored. (jsonargparse carries
    init args whose names match over when ``--strategy`` changes class, so either value may
    come from another config file than the one the user edited.)"""
    if noise_multiplier is not None and epsilon_target is not None:
        raise ValueError(
            f"{sigma_field} and {epsilon_field}: both set (σ = {noise_multiplier:g}, "
            f"ε = {epsilon_target:g}); a given σ would ignore the ε target. Set "
            f"{sigma_field}: null to calibrate σ to ε, or {epsilon_field}: null to use σ "
            "(a value may have been carried over from an earlier --strategy/--config)"
        )


def resolve_cohort_noise_multiplier(
    noise_multiplier: float | None,
    *,
    target_epsilon: float | None,
    delta: float,
    accountant: str,
    rounds: int,
    sampling: CohortSampling,
) -> float:
    """:func:`resolve_noise_multiplier` for one client-level Gaussian a round on a cohort drawn
    by ``sampling`` (Poisson, or without replacement: the event the mechanism will report)."""
    event = SampledGaussian.for_cohort(1.0, sampling)
    return resolve_noise_multiplier(
        noise_multiplier,
        target_epsilon=target_epsilon,
        delta=delta,
        sample_rate=event.sample_rate,
        steps=rounds,
        accountant=accountant,
        population=event.population,
    )
