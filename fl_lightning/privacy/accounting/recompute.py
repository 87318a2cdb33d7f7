"""An independent recomputation of a run's headline ε from its accountant's ledger.

It reads the checkpointed ledger (``PrivacyAccountant.state_dict()``: the events the
mechanisms produced) and composes them without ``privacy/accounting/analysis.py``: ``DpEvent``
objects built here, dp-accounting's RDP accountant for ``rdp`` (the run itself uses Opacus' RDP) and
its PLD accountant for ``pld`` and ``prv`` (PRV and PLD are both numerically tight; they agree to
well under 1 %). A fixed-size row (population N > 0) is built here as its dominating pair's
event, a Poisson-subsampled Gaussian of multiplier σ/2 at q = m/N (Zhu, Dong & Wang 2022).
Local ledgers: Gaussian releases by the closed-form hockey-stick divergence of the composed
Gaussian (μ² = Σ k/z², Dong, Roth & Su 2019) solved here with scipy for ``pld``/``prv``, and
dp-accounting's RDP for ``rdp``; the other releases by basic composition and dp-accounting's
PLD of a generic (ε, δ) mechanism. Every figure is at the ledger's δ. ``docs/privacy.md`` and
the tests compare the run's printed ε with it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import dp_accounting
import numpy as np
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld_lib

NR = dp_accounting.NeighboringRelation


@contextlib.contextmanager
def excluded_orders() -> Iterator[list[float]]:
    """Keeps dp-accounting's ``_compute_log_a_frac failed to converge ... Excluding this order``
    warnings (absl, one per order and event: 320 lines for the quickstart's ledger at Opacus'
    fractional orders) off the console; yields the list of the orders α it excluded.

    They do not matter to a guarantee: an excluded order is one candidate fewer in
    ε = min_α [...] (its RDP is taken as ∞), so the ε returned is still an upper bound, at worst
    looser; none is the run's own figure (the run uses Opacus' RDP or a PLD)."""
    import logging

    from absl import logging as absl_logging

    found: list[float] = []

    class Excluded(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if "failed to converge" not in str(record.msg):
                return True
            args = record.args if isinstance(record.args, tuple) else ()
            alpha = args[3] if len(args) > 3 else None  # (steps, q, σ, α)
            found.append(float(alpha) if isinstance(alpha, int | float) else math.nan)
            return False

    logger = absl_logging.get_absl_logger()
    keep = Excluded()
    logger.addFilter(keep)
    try:
        yield found
    finally:
        logger.removeFilter(keep)


def _event(sigma: float, q: float, population: int) -> dp_accounting.DpEvent:
    gaussian = dp_accounting.GaussianDpEvent(sigma / 2.0 if population else sigma)
    return gaussian if q >= 1.0 else dp_accounting.PoissonSampledDpEvent(q, gaussian)


def _accountant(accountant: str) -> dp_accounting.PrivacyAccountant:
    if accountant == "rdp":
        # Opacus' grid of orders (the run's RDP accountant), composed by dp-accounting's code
        orders = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))
        return dp_accounting.rdp.RdpAccountant(orders=orders)
    return dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)


def gaussian_history_epsilon(rows: list, delta: float, accountant: str) -> float:
    """ε of ledger rows (σ, q, steps[, population]) composed by dp-accounting."""
    rows = [(float(r[0]), float(r[1]), int(r[2]), int(r[3]) if len(r) > 3 else 0) for r in rows]
    rows = [r for r in rows if r[2] > 0]
    if not rows:
        return 0.0
    if any(sigma == 0 for sigma, *_ in rows):
        return math.inf
    acc = _accountant(accountant)
    with excluded_orders():  # they leave ε an upper bound (see there)
        for sigma, q, steps, n in rows:
            acc.compose(_event(sigma, q, n), steps)
        return float(acc.get_epsilon(delta))


def _composed_gaussian_epsilon(mu: float, delta: float) -> float:
    """ε at δ of μ-GDP: the root of δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth & Su
    2019, Cor. 2.13), in log space so that ε in the thousands does not overflow."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    def gap(eps: float) -> float:
        first = norm.logcdf(-eps / mu + mu / 2)
        second = eps + norm.logcdf(-eps / mu - mu / 2)
        return math.exp(first) * -math.expm1(second - first) - delta

    if gap(0.0) <= 0:
        return 0.0
    hi = 1.0
    while gap(hi) > 0:
        hi *= 2.0
    return float(brentq(gap, 0.0, hi, xtol=1e-10, rtol=1e-10))


def local_rows_epsilon(rows: list, delta: float, accountant: str = "pld") -> float:
    """ε at ``delta`` of one client's local rows (ε, δ, unit, units, uploads[, σ/Δ])."""
    gaussian = [(float(r[5]), int(r[3]) * int(r[4])) for r in rows if len(r) > 5 and r[5] > 0]
    counts = [
        (float(e), float(d), int(u) * int(n))
        for e, d, _unit, u, n, *z in rows
        if not (z and z[0] > 0)
    ]
    others_delta = sum(d * k for _, d, k in counts)
    others = 0.0
    if counts:
        basic = sum(e * k for e, _, k in counts) if others_delta <= delta else math.inf
        tight = math.inf
        if others_delta < delta and max(e for e, _, _ in counts) <= 50.0:
            total = None
            for e, d, k in counts:
                one = pld_lib.from_privacy_parameters(
                    common.DifferentialPrivacyParameters(e, d), value_discretization_interval=1e-3
                ).self_compose(k)
                total = one if total is None else total.compose(one)
            assert total is not None
            tight = float(total.get_epsilon_for_delta(delta))
        others = min(basic, tight)
        if not gaussian:
            return others
    if not gaussian:
        return 0.0
    if others_delta >= delta:
        return math.inf
    left = delta - others_delta
    if accountant == "rdp":
        acc = _accountant("rdp")
        for z, k in gaussian:
            acc.compose(dp_accounting.GaussianDpEvent(z), k)
        gauss = float(acc.get_epsilon(left))
    else:
        gauss = _composed_gaussian_epsilon(math.sqrt(sum(k / z**2 for z, k in gaussian)), left)
    if counts:  # basic composition of the two parts
        return gauss + sum(e * k for e, _, k in counts)
    return gauss


def distributed_rows_epsilon(rows: list, delta: float) -> float:
    """ε at ``delta`` of distributed-DP rounds (``DistributedNoiseEvent.to_state()`` rows),
    recomputed here from the papers' formulas with numpy (:func:`distributed_rows_rdp`);
    RDP → (ε, δ) by Balle et al. 2020."""
    orders, total = distributed_rows_rdp(rows)
    eps = total + np.log1p(-1 / orders) - (math.log(delta) + np.log(orders)) / (orders - 1)
    return float(max(0.0, np.nanmin(eps)))


def distributed_rows_rdp(rows: list) -> tuple[np.ndarray, np.ndarray]:
    """(orders, RDP) of distributed-DP rounds (``DistributedNoiseEvent.to_state()`` rows)
    composed, recomputed here from the papers' formulas with numpy, vectorised over orders (the
    run's code, ``privacy/distributed/accounting.py``, loops per order): Kairouz, Liu & Steinke
    2021 Prop. 22 (rounding), Thm. 1 (τ) and Prop. 14 (DDG); Agarwal, Kairouz & Liu 2021
    (Skellam); Zhu & Wang 2019's general Poisson-subsampling bound for rows with q < 1."""
    from scipy.special import gammaln, logsumexp

    orders = np.array([*range(2, 129), 256], dtype=float)
    total = np.zeros_like(orders)
    for mech, clip, scale, var, n, d, beta, _bits, q, replace_one, _k, *_members in rows:
        if int(n) == 0:
            continue
        x = float(clip) * float(scale)
        l2 = x + math.sqrt(d)
        if beta > 0:
            l2 = min(l2, math.sqrt(x * x + d / 4 + math.sqrt(2 * math.log(1 / beta)) *
                                   (x + math.sqrt(d) / 2)))  # fmt: skip
        l1 = l2 * min(math.sqrt(d), l2)
        if replace_one:
            l2, l1, q = 2 * l2, 2 * l1, 1.0

        def plain(a: np.ndarray, mech: str = mech, var: float = var, n: int = n,
                  d: int = d, l1: float = l1, l2: float = l2) -> np.ndarray:  # fmt: skip
            mu = n * var
            if mech == "skellam":
                return a * l2**2 / (2 * mu) + np.minimum(
                    ((2 * a - 1) * l2**2 + 6 * l1) / (4 * mu**2), 3 * l1 / (2 * mu)
                )
            k = np.arange(1, n)
            tau = 10 * float(np.sum(np.exp(-2 * math.pi**2 * var * k / (k + 1))))
            s2, s1 = l2 / math.sqrt(mu), l1 / math.sqrt(mu)
            return np.minimum.reduce([
                a / 2 * s2**2 + tau * d,
                a / 2 * (s2**2 + 2 * s1 * tau + tau**2 * d),
                a / 2 * (s2 + math.sqrt(d) * tau) ** 2,
            ])  # fmt: skip

        rdp = plain(orders)
        if q < 1.0:
            table = plain(np.arange(0, 129, dtype=float))
            for i, a in enumerate(orders.astype(int)):
                if a > 128:
                    continue
                ls = np.arange(2, a + 1)
                log_b = gammaln(a + 1) - gammaln(ls + 1) - gammaln(a - ls + 1)
                terms = (ls - 1) * table[ls] + log_b + (a - ls) * math.log1p(-q) + ls * math.log(q)
                weights = np.where(ls == 2, 1.0, 3.0)
                first = (1 - q) ** (a - 1) * (a * q - q + 1)
                sub = logsumexp(np.append(terms, 0.0), b=np.append(weights, first)) / (a - 1)
                rdp[i] = min(rdp[i], sub)
        total += rdp
    return orders, total


def headline_epsilon(state: dict[str, Any], *, delta: float, accountant: str) -> float:
    """The headline ε the ledger defends, by the accountant's own precedence (no guarantee →
    ∞; client level; record level, max over clients; local, max over clients; nothing
    released: 0, or ∞ for a run whose strategy is not private)."""
    if state.get("no_guarantee"):
        return math.inf
    if state.get("distributed"):
        return distributed_rows_epsilon(state["distributed"], delta)
    if state["client_level"]:
        return gaussian_history_epsilon(state["client_level"], delta, accountant)
    if state["record_level"]:
        return max(
            gaussian_history_epsilon(rows, delta, accountant)
            for rows in state["record_level"].values()
        )
    if state.get("local"):
        return max(local_rows_epsilon(rows, delta, accountant) for rows in state["local"].values())
    # Nothing released: ε = 0 for a private run, no guarantee (∞) for a non-private one.
    return 0.0 if state.get("private_run", True) or not state.get("rounds") else math.inf
