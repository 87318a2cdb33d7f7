"""ε of a history of sampled-Gaussian events, by three maintained accountants.

* ``rdp``: Opacus' RDP accountant (Mironov 2017; Mironov, Talwar, Zhang 2019).
* ``prv``: Opacus' PRV accountant (Gopi, Lee, Wutschitz 2021).
* ``pld``: dp-accounting's privacy-loss-distribution accountant (Meiser & Mohammadi 2018;
  Koskela et al. 2020), Poisson-subsampled Gaussian events.

Nothing here is hand-rolled: each function only translates our events to the library's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Literal

import dp_accounting
import numpy as np

from fl_lightning.privacy.events import SampledGaussian

AccountantName = Literal["rdp", "prv", "pld"]
ACCOUNTANTS: tuple[str, ...] = ("rdp", "prv", "pld")
History = tuple[tuple[float, float, int], ...]


def as_history(events: Sequence[SampledGaussian]) -> History:
    """Canonical hashable history: consecutive identical (σ, q) entries are merged."""
    merged: list[list[float]] = []
    for e in events:
        if e.steps <= 0:
            continue
        if merged and merged[-1][0] == e.noise_multiplier and merged[-1][1] == e.sample_rate:
            merged[-1][2] += e.steps
        else:
            merged.append([e.noise_multiplier, e.sample_rate, e.steps])
    return tuple((float(s), float(q), int(k)) for s, q, k in merged)


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

    rdp = sum(steps * _rdp_per_step(sigma, q) for sigma, q, steps in history)
    eps, _ = get_privacy_spent(orders=RDPAccountant.DEFAULT_ALPHAS, rdp=rdp, delta=delta)
    return float(eps)


@lru_cache(maxsize=256)
def _epsilon_prv(history: History, delta: float) -> float:
    from opacus.accountants import PRVAccountant

    acc = PRVAccountant()
    acc.history = list(history)
    return float(acc.get_epsilon(delta))


@lru_cache(maxsize=256)
def _epsilon_pld(history: History, delta: float) -> float:
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    for sigma, q, steps in history:
        event = dp_accounting.GaussianDpEvent(sigma)
        if q < 1.0:
            event = dp_accounting.PoissonSampledDpEvent(q, event)
        acc.compose(event, steps)
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
    if any(sigma == 0 for sigma, _, _ in history):
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
) -> float:
    """Smallest σ (to ``tolerance``) whose ``steps`` sampled-Gaussian steps stay within ε.

    Bisection on the same accountant that will report the run's ε, so the calibrated run
    reports at most ``target_epsilon``.
    """
    if target_epsilon <= 0:
        raise ValueError(f"privacy.target_epsilon: must be > 0, got {target_epsilon}")

    def eps(sigma: float) -> float:
        return epsilon([SampledGaussian(sigma, sample_rate, steps)], delta, accountant)

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
    )
