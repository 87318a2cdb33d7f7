"""ε of distributed-DP rounds behind secure aggregation, by Rényi DP at integer orders.

One round (:class:`~fl_lightning.privacy.accounting.events.DistributedNoiseEvent`) is priced
as the server's view of it: the sum of the survivors' encoded updates plus the sum of their
noise shares. Its sensitivity is one client's encoded contribution, inflated by scaling and
rounding (Kairouz, Liu & Steinke 2021, Prop. 22: Δ₂ =
:func:`~fl_lightning.privacy.distributed.secagg.encoding.rounded_l2_bound` of sC, Δ₁ =
Δ₂·min(√d, Δ₂); the rotation is orthonormal and keeps ‖x‖₂, so it enters only through the
padded d); its noise is the survivors' (n shares), so a round with dropouts costs more than
planned. The mechanism's RDP (``privacy/distributed/ddg.py``: Prop. 14 with Thm. 1's τ;
``privacy/distributed/skellam.py``: Agarwal, Kairouz & Liu 2021) is then

* amplified by Poisson cohorts of rate q with the general upper bound of Zhu & Wang 2019
  ("Poisson Subsampled Rényi Differential Privacy", ICML; ``accounting_utils.py:
  _compute_rdp_subsampled(upper_bound=True)``), taking the smaller of it and the unsampled RDP
  at each order, as the reference implementation does:
  ε'(α) ≤ 1/(α−1)·log[(1−q)^(α−1)(αq − q + 1) + C(α,2) q² (1−q)^(α−2) e^{ε(2)}
  + 3 Σ_{l=3}^{α} C(α,l) (1−q)^(α−l) q^l e^{(l−1)ε(l)}];
* for fixed-size cohorts (replace-one adjacency) not amplified, with the sensitivity doubled
  (one client replaced moves the sum by at most twice its bound);
* composed over rounds by adding RDP order by order, and converted to (ε, δ) by
  ε = min_α [ε(α) + log((α−1)/α) − (log δ + log α)/(α−1)] (Balle et al. 2020, Thm. 21;
  Opacus' ``get_privacy_spent``, the project's RDP conversion).

Adjacency: the reference's: the other survivors' noise is present in both worlds and one
client's encoded update changes by at most its sensitivity (add/remove one client with Poisson
cohorts through the subsampling bound).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache

import numpy as np
from scipy import special

from fl_lightning.privacy.accounting.analysis import geometric_bisection, smallest_sigma
from fl_lightning.privacy.accounting.events import DistributedNoiseEvent
from fl_lightning.privacy.distributed.noise import EncodedSensitivity
from fl_lightning.privacy.distributed.registry import distributed_noise
from fl_lightning.privacy.distributed.secagg.encoding import rounded_l1_bound, rounded_l2_bound

ORDERS: tuple[int, ...] = (*range(2, 129), 256)
"""Integer RDP orders (the reference implementation's ``RDP_ORDERS``)."""


def encoded_sensitivity(event: DistributedNoiseEvent) -> EncodedSensitivity:
    """(Δ₂, Δ₁, d, σ², n) of one round on the integer grid (module docstring)."""
    l2 = rounded_l2_bound(event.clip_norm * event.scale, event.beta, event.dim)
    l1 = rounded_l1_bound(l2, event.dim)
    factor = 2.0 if event.replace_one else 1.0
    return EncodedSensitivity(
        factor * l2, factor * l1, event.dim, event.local_variance, event.survivors
    )


def subsampled_rdp(order: int, q: float, rdp: Sequence[float] | np.ndarray) -> float:
    """Zhu & Wang 2019's general upper bound at integer ``order`` for Poisson rate ``q``, from
    the unsampled RDP ``rdp[l]`` at l = 2..order (module docstring)."""
    a = order
    ls = np.arange(2, a + 1)
    eps = np.asarray(rdp, dtype=float)[2 : a + 1]
    log_binom = special.gammaln(a + 1) - special.gammaln(ls + 1) - special.gammaln(a - ls + 1)
    terms = (ls - 1) * eps + log_binom + (a - ls) * math.log1p(-q) + ls * math.log(q)
    weights = np.where(ls == 2, 1.0, 3.0)  # C(α,2)·… once, every higher term thrice
    first = (1 - q) ** (a - 1) * (a * q - q + 1)
    return float(special.logsumexp(np.append(terms, 0.0), b=np.append(weights, first))) / (a - 1)


@lru_cache(maxsize=4096)
def round_rdp(event: DistributedNoiseEvent) -> tuple[float, ...]:
    """RDP of one round at :data:`ORDERS` (sampling included)."""
    noise = distributed_noise(event.mechanism)
    sens = encoded_sensitivity(event)
    if event.survivors == 0:
        return tuple(0.0 for _ in ORDERS)
    q = 1.0 if event.replace_one else event.sample_rate
    if q >= 1.0:
        return tuple(noise.rdp(a, sens) for a in ORDERS)
    top = max(a for a in ORDERS if a <= 128)
    plain = [0.0, 0.0] + [noise.rdp(a, sens) for a in range(2, top + 1)]
    out = []
    for a in ORDERS:
        unsampled = noise.rdp(a, sens)
        if a > top or math.isinf(unsampled):
            out.append(unsampled)
            continue
        out.append(min(subsampled_rdp(a, q, plain), unsampled))
    return tuple(out)


def rdp_to_epsilon(rdp: Sequence[float] | np.ndarray, delta: float) -> float:
    """ε at ``delta`` of RDP ``rdp`` at :data:`ORDERS` (module docstring's conversion)."""
    orders = np.asarray(ORDERS, dtype=float)
    values = np.asarray(rdp, dtype=float)
    eps = values + np.log1p(-1.0 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
    eps = np.where(np.isnan(eps), np.inf, eps)
    return float(max(0.0, np.min(eps)))


def total_rdp(events: Sequence[DistributedNoiseEvent]) -> np.ndarray:
    """The rounds' RDP, added order by order."""
    total = np.zeros(len(ORDERS))
    for e in events:
        total = total + np.asarray(round_rdp(e))
    return total


def distributed_epsilon(events: Sequence[DistributedNoiseEvent], delta: float) -> float:
    """ε at ``delta`` after ``events`` (0 for none)."""
    if not events:
        return 0.0
    return rdp_to_epsilon(total_rdp(events), delta)


def local_std_for_epsilon(
    *,
    mechanism: str,
    epsilon: float,
    delta: float,
    clip_norm: float,
    bits: int,
    clients: int,
    dim: int,
    beta: float,
    k_stddevs: float,
    sample_rate: float = 1.0,
    rounds: int = 1,
) -> tuple[float, float]:
    """(s, σ_local): the scale and each client's noise std (in units of the update, before
    scaling) under which ``rounds`` rounds of ``clients`` survivors cost ``epsilon`` at
    ``delta``, with s the Eq. 61 heuristic for that σ (``encoding.heuristic_scale``). A fixed
    point of the two, by bisection on σ (the reference optimises both jointly,
    ``accounting_utils.ddgauss_params``); ``ValueError`` naming ``strategy.bits`` when no scale
    fits the bits."""
    from fl_lightning.privacy.distributed.secagg.encoding import heuristic_scale

    def scale_for(std: float) -> float:
        return heuristic_scale(
            local_std=std, clip_norm=clip_norm, bits=bits, clients=clients, dim=dim, k=k_stddevs
        )

    def eps_at(std: float, scale: float) -> float:
        event = DistributedNoiseEvent(
            mechanism, clip_norm, scale, (std * scale) ** 2, clients, dim, beta, bits, sample_rate
        )
        return distributed_epsilon([event] * rounds, delta)

    std = clip_norm  # start: σ = 1 on one client's share
    scale = scale_for(std)
    for _ in range(6):
        high = geometric_bisection(
            lambda std_, s=scale: eps_at(std_, s) > epsilon, 1e-6 * clip_norm, 1e3 * clip_norm, 60
        )
        if abs(high - std) <= 1e-4 * std:
            std = high
            break
        std = high
        scale = scale_for(std)
    return scale, std


PLANNING_QUANTILE_Z = 1.645
"""z of the one-sided 95 % quantile of a run's spend that a calibration plans for."""


def survivor_distribution(
    trials: int, survive: float, *, min_survivors: int = 1, tail: float = 1e-6
) -> list[tuple[int, float]]:
    """(n, P(n)) of a round's survivors n ~ Binomial(``trials``, ``survive``): Poisson cohorts
    of rate q from N clients, each surviving with 1 − r, give Binomial(N, q(1 − r)); a fixed
    cohort of m gives Binomial(m, 1 − r). A round with fewer than ``min_survivors`` is aborted
    (n = 0: nothing released, nothing spent). The ``tail`` mass below the smallest n kept
    is moved onto it (more noise shares never cost more, so the plan stays conservative)."""
    from scipy import stats

    trials = int(trials)
    if trials < int(min_survivors):  # every round aborts: nothing is ever released
        return [(0, 1.0)]
    dist = stats.binom(trials, float(survive))
    low = max(int(min_survivors), int(dist.ppf(tail)))
    high = max(low, int(dist.isf(tail)) + 1)
    ns = np.arange(low, min(high, trials) + 1)
    pmf = dist.pmf(ns)
    pmf[0] += dist.cdf(low - 1) - dist.cdf(int(min_survivors) - 1)  # the low tail: onto low
    pmf[-1] += dist.sf(ns[-1])  # the high tail (cheaper rounds) onto the highest n kept
    aborted = float(dist.cdf(int(min_survivors) - 1))
    pairs = [(int(n), float(p)) for n, p in zip(ns, pmf, strict=True) if p > 0.0]
    return [(0, aborted), *pairs] if aborted > 0.0 else pairs


def planned_rdp(
    event_at: Callable[[int], DistributedNoiseEvent],
    survivors: Sequence[tuple[int, float]],
    *,
    rounds: int,
    z: float = PLANNING_QUANTILE_Z,
) -> np.ndarray:
    """The RDP a run of ``rounds`` rounds plans for, order by order, when a round's survivors
    vary as ``survivors`` (:func:`survivor_distribution`): the mean of the sum, R·E[ε_n(α)],
    plus z standard deviations, z·√(R·Var[ε_n(α)]) (the normal approximation to a sum of R
    independent rounds). Planning with the expected survivors instead underestimates the
    spend (a round's RDP is convex in 1/n), and the budget stop then ends the run early:
    Poisson cohorts of 20 of 100 over 40 rounds stopped at 33. Only the plan: every round is
    priced with its actual survivors."""
    rdp = np.array([round_rdp(event_at(n)) if n > 0 else np.zeros(len(ORDERS))
                    for n, _ in survivors])  # fmt: skip
    weights = np.array([p for _, p in survivors])[:, None]
    mean = np.sum(weights * rdp, axis=0)
    var = np.maximum(np.sum(weights * rdp**2, axis=0) - mean**2, 0.0)
    return rounds * mean + z * np.sqrt(rounds * var)


def calibrate_distributed_sigma(
    event_at: Callable[[float], DistributedNoiseEvent],
    *,
    rounds: int,
    target_epsilon: float | None,
    delta: float,
    field: str = "strategy.noise_multiplier",
    tolerance: float = 0.01,
    survivors: Sequence[tuple[int, float]] | None = None,
) -> float:
    """The smallest σ (to ``tolerance``) whose ``rounds`` planned rounds ``event_at(σ)`` stay
    within ``target_epsilon`` at ``delta`` (bisection; the event's scale may depend on σ);
    with ``survivors`` (:func:`survivor_distribution`), rounds whose survivors vary so, planned
    by :func:`planned_rdp`. ``ValueError`` naming ``field`` when there is no target or it is
    unreachable."""
    if target_epsilon is None:
        raise ValueError(f"{field}: unset, so privacy.target_epsilon is needed to calibrate it")

    def epsilon_at(sigma: float) -> float:
        if survivors is None:
            return distributed_epsilon([event_at(sigma)] * rounds, delta)
        at = event_at(sigma)
        plan = planned_rdp(lambda n: replace(at, survivors=n), survivors, rounds=rounds)
        return rdp_to_epsilon(plan, delta)

    try:
        return smallest_sigma(
            lambda sigma: epsilon_at(sigma) > target_epsilon,
            target_epsilon=target_epsilon,
            field=field,
            tolerance=tolerance,
        )
    except ValueError:
        # More noise shrinks the scale that fits the sum in 2^b, and the rounding's inflated
        # sensitivity (about √d/2 on the grid) then grows with it: ε has a floor set by b.
        widest = event_at(1e4)
        raise ValueError(
            f"privacy.target_epsilon: {target_epsilon} is unreachable with strategy.bits "
            f"{widest.bits}: more noise shrinks the encoding's scale, whose rounding then "
            f"inflates the sensitivity, so {rounds} rounds spend more than the target at every σ "
            f"up to 1e4 ({epsilon_at(1e4):.3g} there); raise strategy.bits or the target"
        ) from None


__all__ = [
    "ORDERS",
    "calibrate_distributed_sigma",
    "local_std_for_epsilon",
    "planned_rdp",
    "survivor_distribution",
    "distributed_epsilon",
    "encoded_sensitivity",
    "rdp_to_epsilon",
    "round_rdp",
    "subsampled_rdp",
    "total_rdp",
]
