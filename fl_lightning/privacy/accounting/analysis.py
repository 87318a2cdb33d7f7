"""ε of a history of sampled-Gaussian events, by three maintained accountants.

* ``pld`` (default): dp-accounting's privacy-loss-distribution accountant (Meiser & Mohammadi
  2018; Koskela et al. 2020), connect-the-dots discretisation (Doroshenko et al. 2022),
  interval 1e-3: pessimistic, so an upper bound, and the tightest of the three.
* ``rdp``: Opacus' RDP accountant (Mironov 2017; Mironov, Talwar, Zhang 2019).
* ``prv``: Opacus' PRV accountant (Gopi, Lee, Wutschitz 2021).

Fixed-size cohorts (m of N drawn without replacement, replace-one adjacency) are accounted by
their dominating pair (Zhu, Dong & Wang 2022, "Optimal accounting of differential privacy via
characteristic function", Prop. for sampling without replacement): one round of a Gaussian of
multiplier σ on the sum is dominated by ((1−q)·N(0, σ²) + q·N(2, σ²), N(0, σ²)), q = m/N, and
the pair is attained (clients {C, …, C, −C} against {C, …, C}). Scaled by 1/2 it is the pair of
a Poisson-subsampled Gaussian of multiplier σ/2 at rate q under add/remove, so every accountant
here composes it as that event (``dominating_history``). dp-accounting's PLD ``REPLACE_ONE``
Poisson event is a different pair and is *not* valid for fixed-size sampling.
A history without sampling (q = 1) is a composition of Gaussians, which is exactly one Gaussian
of multiplier (Σ kᵢ/σᵢ²)^(−1/2) (Dong, Roth & Su 2019, Cor. 3.3); ``pld`` and ``prv`` give its
exact ε (Balle & Wang 2018, Thm. 8, dp-accounting's Gaussian privacy loss), ``rdp`` its RDP.
Local releases compose by the best of basic composition and dp-accounting's PLD of a generic
(ε, δ)-DP mechanism (the optimal homogeneous composition, Kairouz, Oh, Viswanath 2015).

Noise calibration is one function, :func:`calibrate_noise_multiplier`: the smallest σ under
which every given history stays within the target on the accountant that will report it.

Nothing here is hand-rolled: each function only translates our events to the library's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any, Literal

import numpy as np

from fl_lightning.privacy.accounting.events import SampledGaussian

AccountantName = Literal["rdp", "prv", "pld"]
ACCOUNTANTS: tuple[str, ...] = ("pld", "rdp", "prv")
DEFAULT_ACCOUNTANT = "pld"
PLD_INTERVAL = 1e-3
"""dp-accounting PLD value-discretisation interval (connect-the-dots, pessimistic)."""
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


def extend_history(history: History, events: Sequence[SampledGaussian]) -> History:
    """``as_history`` of the history's events followed by ``events``, without replaying the
    history (the accountant extends each client's history by a round's events)."""
    rows = [list(r) for r in history]
    for e in events:
        if e.steps <= 0:
            continue
        key = (float(e.noise_multiplier), float(e.sample_rate), int(e.population))
        if rows and (rows[-1][0], rows[-1][1], rows[-1][3]) == key:
            rows[-1][2] += int(e.steps)
        else:
            rows.append([key[0], key[1], int(e.steps), key[2]])
    return tuple((float(s), float(q), int(k), int(n)) for s, q, k, n in rows)


def dominating_history(history: History) -> History:
    """The history with every fixed-size row (σ, q = m/N, k, N) replaced by the Poisson row of
    its dominating pair, (σ/2, q, k, 0) (module docstring); Poisson rows unchanged. A history
    mixing the two is refused: their adjacencies (add/remove, replace-one) do not compose."""
    fixed = [n > 0 for _, _, _, n in history]
    if any(fixed) and not all(fixed):
        raise ValueError(
            "model.sampling: one history mixes Poisson and fixed-size sampling, whose "
            "adjacencies (add/remove vs replace-one) cannot be composed"
        )
    if not any(fixed):
        return history
    return tuple((s / 2.0, q, k, 0) for s, q, k, _ in history)


def _opacus_orders() -> tuple[float, ...]:
    from opacus.accountants import RDPAccountant

    return tuple(RDPAccountant.DEFAULT_ALPHAS)


@lru_cache(maxsize=1024)
def _rdp_per_step(sigma: float, q: float, orders: tuple[float, ...]) -> np.ndarray:
    """Opacus' RDP of one sampled-Gaussian step at ``orders`` (cached per (σ, q, orders))."""
    from opacus.accountants.analysis.rdp import compute_rdp

    return np.asarray(compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=list(orders)))


def _rdp_epsilon_at(history: History, delta: float, orders: tuple[float, ...]) -> float:
    """Opacus' RDP ε of the history at ``orders`` (RDP composes additively, so each (σ, q) is
    computed once and scaled by its steps)."""
    from opacus.accountants.analysis.rdp import get_privacy_spent

    rdp = sum(steps * _rdp_per_step(sigma, min(q, 1.0), orders) for sigma, q, steps, _ in history)
    eps, _ = get_privacy_spent(orders=list(orders), rdp=rdp, delta=delta)
    return float(eps)


@lru_cache(maxsize=4096)
def _epsilon_rdp(history: History, delta: float) -> float:
    """Same result as ``opacus.accountants.RDPAccountant`` with this history (its default
    orders)."""
    return _rdp_epsilon_at(history, delta, _opacus_orders())


@lru_cache(maxsize=4096)
def rdp_screen_epsilon(history: History, delta: float) -> float:
    """A quick upper bound on the ε of a (canonical) history, for screening which clients can
    be the worst (``PrivacyAccountant``): Opacus' RDP ε at its integer default orders only.
    RDP at a subset of orders is still a valid bound (Mironov 2017, Prop. 3, holds at every
    order), only looser than at all of them; an integer order's RDP is a finite binomial sum
    (Mironov, Talwar, Zhang 2019, §3.3), about 4 ms for a new (σ, q) on one core against
    10–120 ms for Opacus' 90 fractional orders, whose series is summed term by term."""
    if not history:
        return 0.0
    if any(sigma == 0 for sigma, _, _, _ in history):
        return math.inf
    integer_orders = tuple(a for a in _opacus_orders() if float(a).is_integer())
    return _rdp_epsilon_at(dominating_history(history), float(delta), integer_orders)


@lru_cache(maxsize=4096)
def _epsilon_prv(history: History, delta: float) -> float:
    """Opacus' PRV accountant's ε of the history (Gopi et al. 2021), its discretisation domain
    computed by :func:`_prv_domain` from the cached per-step RDP (the same domain, and so the
    same ε, to the last digit)."""
    acc = _prv_accountant_class()()
    acc.history = [(sigma, q, steps) for sigma, q, steps, _ in history]
    return float(acc.get_epsilon(delta))


@lru_cache(maxsize=1)
def _prv_accountant_class() -> type:
    from opacus.accountants import PRVAccountant

    class CachedDomainPRVAccountant(PRVAccountant):
        """Opacus' PRV accountant whose ``_get_domain`` is :func:`_prv_domain`."""

        def _get_domain(
            self,
            prvs: list[Any],
            num_self_compositions: list[int],
            eps_error: float,
            delta_error: float,
        ) -> Any:
            rows = tuple(
                (float(p.noise_multiplier), float(p.sample_rate), int(k))
                for p, k in zip(prvs, num_self_compositions, strict=True)
            )
            return _prv_domain(rows, float(eps_error), float(delta_error))

    return CachedDomainPRVAccountant


def _prv_domain(
    rows: tuple[tuple[float, float, int], ...], eps_error: float, delta_error: float
) -> Any:
    """The domain Opacus' PRV accountant discretises on, as Opacus computes it (Gopi et al.
    2021, Remark 5.6, in ``opacus.accountants.analysis.prv.domain.compute_safe_domain_size``):
    half-width L = max(RDP ε of the whole history at δ_err/4, RDP ε of each row's single step
    at δ_err/(8T), eps_error) + 3 over T steps, mesh eps_error / sqrt(T·ln(12/δ_err)/2).

    Opacus recomputes every row's RDP at its 151 default orders on each call, summing the 99
    fractional orders' series term by term (10–120 ms per row); here each (σ, q) is computed
    once (:func:`_rdp_per_step`) and scaled by its steps, as Opacus' own RDP accountant sums
    them, so L is Opacus' to the last digit (tests/privacy/test_analysis.py)."""
    from opacus.accountants.analysis.prv import Domain

    orders = _opacus_orders()
    history = tuple((sigma, q, steps, 0) for sigma, q, steps in rows)
    total = sum(steps for _, _, steps in rows)
    half_width = _rdp_epsilon_at(history, delta_error / 4, orders)
    for sigma, q, _ in rows:
        one_step = ((sigma, q, 1, 0),)
        half_width = max(half_width, _rdp_epsilon_at(one_step, delta_error / (8 * total), orders))
    half_width = max(half_width, eps_error) + 3
    mesh = eps_error / np.sqrt(total * np.log(12 / delta_error) / 2)
    return Domain.create_aligned(-half_width, half_width, mesh)


@lru_cache(maxsize=512)
def _history_pld(history: History) -> Any:
    """The composed PLD of ``history`` (dp-accounting, add/remove, connect-the-dots,
    pessimistic), one cache for every piece of it: a one-row history of one step is the PLD
    ``PLDAccountant.compose`` builds for that Poisson-subsampled Gaussian event; a row of k steps
    is that one-step PLD self-composed k times; a longer history is its prefix's PLD composed
    with its last row's, in order. One canonical composition per history, so the printed ε does
    not depend on which shorter histories were composed before (a resumed run prints the
    uninterrupted run's ε to the last digit); the cache keeps each prefix's and each row's PLD."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    *head, (sigma, q, k, n) = history
    if head:
        return _history_pld(tuple(head)).compose(_history_pld(((sigma, q, k, n),)))
    if k > 1:
        return _history_pld(((sigma, q, 1, n),)).self_compose(k)
    if q >= 1.0:
        return pld_lib.from_gaussian_mechanism(sigma, value_discretization_interval=PLD_INTERVAL)
    return pld_lib.from_gaussian_mechanism(
        sigma, sampling_prob=q, value_discretization_interval=PLD_INTERVAL
    )


@lru_cache(maxsize=4096)
def _epsilon_pld(history: History, delta: float) -> float:
    """dp-accounting's PLD accountant's ε of the history (:func:`_history_pld`)."""
    return float(_history_pld(history).get_epsilon_for_delta(delta))


def single_release_epsilon(loss: Any, delta: float) -> float:
    """The exact ε at ``delta`` of one release whose privacy loss is ``loss`` (a dp-accounting
    ``privacy_loss_mechanism.AdditiveNoisePrivacyLoss``, e.g. ``GaussianPrivacyLoss``,
    ``LaplacePrivacyLoss``): the root in ε of its closed-form hockey-stick divergence
    δ(ε) = ``loss.get_delta_for_epsilon(ε)`` (for the Gaussian, Balle & Wang 2018's analytic
    Gaussian, Thm. 8). δ(ε) decreases in ε, so the root is bracketed by doubling and found by
    Brent's method; 0 when δ(0) ≤ ``delta`` already."""
    from scipy.optimize import brentq

    def gap(eps: float) -> float:
        return float(loss.get_delta_for_epsilon(eps)) - delta

    if gap(0.0) <= 0.0:
        return 0.0
    hi = 1.0
    while gap(hi) > 0.0:
        hi *= 2.0
    return float(brentq(gap, hi / 2.0 if hi > 1.0 else 0.0, hi, xtol=1e-12, rtol=1e-10))


@lru_cache(maxsize=4096)
def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """The exact ε at ``delta`` of one Gaussian release of L2 sensitivity 1 and std
    ``noise_multiplier`` (:func:`single_release_epsilon` of dp-accounting's
    ``GaussianPrivacyLoss``, Balle & Wang 2018, Thm. 8)."""
    from dp_accounting.pld import privacy_loss_mechanism

    loss = privacy_loss_mechanism.GaussianPrivacyLoss(
        standard_deviation=noise_multiplier, sensitivity=1.0
    )
    return single_release_epsilon(loss, delta)


def effective_gaussian(history: History) -> float:
    """The multiplier of the one Gaussian that a composition of unsampled Gaussians equals:
    (Σ kᵢ/σᵢ²)^(−1/2) (Gaussian DP, Dong, Roth & Su 2019, Cor. 3.3)."""
    return float(sum(k / s**2 for s, _, k, _ in history) ** -0.5)


_BACKENDS: dict[str, Callable[[History, float], float]] = {
    "rdp": _epsilon_rdp,
    "prv": _epsilon_prv,
    "pld": _epsilon_pld,
}


def check_accountant(accountant: str) -> None:
    if accountant not in _BACKENDS:
        raise ValueError(f"privacy.accountant: unknown {accountant!r}; choose from {ACCOUNTANTS}")


def epsilon(events: Sequence[SampledGaussian] | History, delta: float, accountant: str) -> float:
    """ε at ``delta`` after the events; 0 for an empty history, ∞ when any σ is 0."""
    check_accountant(accountant)
    history = events if isinstance(events, tuple) else as_history(events)
    if not history:
        return 0.0
    if any(sigma == 0 for sigma, _, _, _ in history):
        return math.inf
    history = dominating_history(history)
    if accountant != "rdp" and all(q >= 1.0 for _, q, _, _ in history):
        return gaussian_epsilon(effective_gaussian(history), float(delta))
    return _BACKENDS[accountant](history, float(delta))


EXACT_GAUSSIAN = "exact Gaussian (no sampling; Balle & Wang 2018, Thm. 8)"
"""What computes the ε of an unsampled history on ``pld`` and ``prv`` (:func:`epsilon`): the
composition is one Gaussian (Dong, Roth & Su 2019, Cor. 3.3), whose ε is exact in closed form."""


def computed_by(events: Sequence[SampledGaussian] | History, accountant: str, name: str) -> str:
    """What computed the ε :func:`epsilon` returns for ``events`` on ``accountant``, in words:
    the closed-form exact Gaussian when no row is sampled and the accountant is not ``rdp``
    (:func:`epsilon` takes that path, whatever the backend's own figure would be), else
    ``name``, the accountant's own (e.g. "PRV accountant (Opacus)")."""
    history = events if isinstance(events, tuple) else as_history(events)
    if accountant != "rdp" and history and all(q >= 1.0 for _, q, _, _ in history):
        return EXACT_GAUSSIAN
    return name


def loss_tail(events: Sequence[SampledGaussian] | History, eps: float) -> float:
    """P[privacy loss > ``eps``] of the history's composed PLD (:func:`_history_pld`, the
    dominating pair of its rows), the larger over the two directions of adjacency, the mass at
    +∞ included: what (ε, δ)-DP does *not* bound by δ (δ bounds E[(1 − e^(ε−L))₊], which is at
    most this probability; Balle et al. 2020, Thm. 5). A connect-the-dots PLD is pessimistic,
    so this is an upper estimate on the discretisation's grid. 0 for an empty history."""
    history = events if isinstance(events, tuple) else as_history(events)
    if not history:
        return 0.0
    if any(sigma == 0 for sigma, _, _, _ in history):
        return 1.0
    pld = _history_pld(dominating_history(history))
    tails = []
    for pmf in (pld._pmf_remove, pld._pmf_add):
        dense = pmf.to_dense_pmf()
        losses = (dense._lower_loss + np.arange(dense._probs.size)) * dense._discretization
        tails.append(float(np.sum(dense._probs[losses > eps])) + float(dense._infinity_mass))
    return max(tails)


def scaled(history: Sequence[SampledGaussian], sigma: float) -> list[SampledGaussian]:
    """``history`` (given at noise multiplier 1) with every multiplier multiplied by σ."""
    return [replace(e, noise_multiplier=sigma * e.noise_multiplier) for e in history]


def calibrate_noise_multiplier(
    histories: Sequence[Sequence[SampledGaussian]],
    *,
    target_epsilon: float | None,
    delta: float,
    accountant: str,
    field: str = "strategy.noise_multiplier",
    tolerance: float = 0.01,
) -> float:
    """The one noise calibration of the package: the smallest σ (to ``tolerance``) under
    which *every* history in ``histories`` (each a list of events written at noise multiplier
    1, e.g. one per client, or the run's client-level rounds) stays within ``target_epsilon`` at
    ``delta`` on ``accountant`` — the accountant that will report the run, so the calibrated
    run reports at most the target. Any sampling (Poisson, fixed-size) on any accountant.

    Raises ``ValueError`` naming ``field`` when there is no target or it is unreachable.
    """
    if target_epsilon is None:
        raise ValueError(f"{field}: unset, so privacy.target_epsilon is needed to calibrate it")
    if target_epsilon <= 0:
        raise ValueError(f"privacy.target_epsilon: must be > 0, got {target_epsilon}")
    check_accountant(accountant)
    if not histories:
        raise ValueError(f"{field}: nothing to calibrate (no event would be released)")
    keys = list(dict.fromkeys(as_history(h) for h in histories))

    def exceeds(sigma: float) -> bool:
        """Whether some history's ε at ``sigma`` exceeds the target (the max over histories
        does): the first that does ends the search, and is asked first at the next σ, so a
        bisection step that fails costs about one composition instead of one per history."""
        for i, h in enumerate(keys):
            if epsilon(tuple((sigma * s, q, k, n) for s, q, k, n in h), delta, accountant) > (
                target_epsilon
            ):
                keys.insert(0, keys.pop(i))
                return True
        return False

    return smallest_sigma(exceeds, target_epsilon=target_epsilon, field=field, tolerance=tolerance)


def smallest_sigma(
    exceeds: Callable[[float], bool], *, target_epsilon: float, field: str, tolerance: float
) -> float:
    """The smallest σ (to ``tolerance``) at which ``exceeds(σ)`` is false, by doubling from 1
    and bisecting (ε falls as σ grows); ``ValueError`` naming ``field`` when σ would pass 1e4."""
    low, high = 0.05, 1.0
    while exceeds(high):
        low, high = high, high * 2
        if high > 1e4:
            raise ValueError(
                f"privacy.target_epsilon: {target_epsilon} is unreachable for this run "
                f"({field} would exceed 1e4)"
            )
    while high - low > tolerance:
        mid = (low + high) / 2
        if exceeds(mid):
            low = mid
        else:
            high = mid
    return high


@lru_cache(maxsize=4096)
def geometric_bisection(
    exceeds: Callable[[float], bool], low: float, high: float, steps: int
) -> float:
    """``steps`` bisections of [``low``, ``high``] at the geometric midpoint (the scale of a
    noise parameter spans decades): the upper end, at which ``exceeds`` is false."""
    for _ in range(steps):
        mid = math.sqrt(low * high)
        if exceeds(mid):
            low = mid
        else:
            high = mid
    return high


def calibrate_repeated_gaussian(
    steps: int,
    *,
    target_epsilon: float | None,
    delta: float,
    accountant: str,
    field: str = "strategy.noise_multiplier",
) -> float:
    """:func:`calibrate_noise_multiplier` for one history of ``steps`` Gaussian releases
    without sampling (each client's data exposed ``steps`` times, e.g. NbAFL's L uploads)."""
    return calibrate_noise_multiplier(
        [[SampledGaussian(1.0, 1.0, steps)]],
        target_epsilon=target_epsilon,
        delta=delta,
        accountant=accountant,
        field=field,
    )


@lru_cache(maxsize=1024)
def _optimal_composition(releases: tuple[tuple[float, float, int], ...], delta: float) -> float:
    """ε at ``delta`` of composing (ε_i, δ_i)-DP mechanisms k_i times each: dp-accounting's PLD
    of a generic (ε, δ)-DP mechanism (its dominating pair), self-composed and composed; ∞ when
    the mechanisms' own δ already exceeds ``delta``. Discretisation is pessimistic (an upper
    bound), with an interval scaled to the size of the result.

    Cached: every client of a cohort holding the same releases asks for the same composition
    (SPM-FL's clients each upload one release per weight), once per client and per report."""
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


def _approximate_epsilon(
    merged: dict[tuple[float, float], int], delta: float, max_distinct: int
) -> tuple[float, str]:
    """ε at ``delta`` of (ε, δ)-DP releases given as {(ε, δ): count}: the smaller of basic
    composition (valid at ``delta`` when Σkδ ≤ ``delta``) and the optimal composition."""
    basic_eps = sum(k * e for (e, _), k in merged.items())
    basic_delta = sum(k * d for (_, d), k in merged.items())
    best = (basic_eps, "basic composition") if basic_delta <= delta else (math.inf, "")
    # dp-accounting's PLD of an (ε, δ) mechanism evaluates e^ε: past ~700 it overflows, and for
    # per-release ε that large the optimal composition cannot improve on basic composition in
    # any way that matters, so basic composition is the answer there.
    if len(merged) <= max_distinct and max(e for e, _ in merged) <= 50.0:
        key = tuple(sorted((e, d, k) for (e, d), k in merged.items()))
        tight = _optimal_composition(key, float(delta))
        if tight < 0.99 * best[0]:
            best = (tight, "optimal composition (dp-accounting PLD)")
    if math.isinf(best[0]):
        return math.inf, (
            f"local releases have no ε at δ = {delta:g}: the releases' own δ sum to "
            f"{basic_delta:.3g}, past the run's δ (lower the mechanism's per-upload δ to at "
            "most δ / uploads)"
        )
    return best


def local_epsilon(
    releases: Sequence[tuple[float, float, int, float]],
    delta: float,
    accountant: str = DEFAULT_ACCOUNTANT,
    *,
    max_distinct: int = 16,
) -> tuple[float, str]:
    """(ε at ``delta``, theorem) of one client's local releases, given as (ε, δ, count,
    noise multiplier) per unit; the noise multiplier is σ/Δ for a Gaussian release, 0 else.

    * Gaussian releases compose as Gaussian events on ``accountant`` (exactly one Gaussian of
      multiplier (Σ k/z²)^(−1/2)), at ``delta`` itself;
    * pure and approximate releases compose by the smaller of basic and optimal composition,
      at ``delta`` (∞ when their own δ sum past it);
    * both: basic composition of the two parts, the Gaussian part at ``delta`` − the others' Σδ.
    """
    gaussian: dict[float, int] = {}
    merged: dict[tuple[float, float], int] = {}
    for eps, dlt, k, z in releases:
        if k <= 0:
            continue
        if z > 0:
            gaussian[float(z)] = gaussian.get(float(z), 0) + int(k)
        else:
            key = (float(eps), float(dlt))
            merged[key] = merged.get(key, 0) + int(k)
    if not gaussian and not merged:
        return 0.0, "nothing released"
    if not gaussian:
        return _approximate_epsilon(merged, delta, max_distinct)
    history = tuple((z, 1.0, k, 0) for z, k in sorted(gaussian.items()))
    how = f"Gaussian composition ({ACCOUNTANT_WORDS[accountant]})"
    if not merged:
        return epsilon(history, delta, accountant), how
    others_delta = sum(k * d for (_, d), k in merged.items())
    if others_delta >= delta:
        return math.inf, (
            f"local releases have no ε at δ = {delta:g}: the non-Gaussian releases' own δ sum to "
            f"{others_delta:.3g}, past the run's δ"
        )
    others = sum(k * e for (e, _), k in merged.items())
    gauss = epsilon(history, delta - others_delta, accountant)
    return gauss + others, f"{how} and basic composition with the other releases"


ACCOUNTANT_WORDS = {
    "pld": "dp-accounting PLD",
    "rdp": "Opacus RDP",
    "prv": "Opacus PRV",
}


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
