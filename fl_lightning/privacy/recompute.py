"""An independent recomputation of a run's headline ε from its accountant's ledger.

It reads the checkpointed ledger (``PrivacyAccountant.state_dict()``: the events the
mechanisms produced) and composes them with dp-accounting alone: ``DpEvent`` objects built here,
dp-accounting's RDP accountant for ``rdp`` (the run itself uses Opacus' RDP for Poisson events)
and its PLD accountant for ``pld`` and ``prv`` (PRV and PLD are both numerically tight; they
agree to well
under 1 %). Local ledgers are recomputed by basic composition and dp-accounting's PLD of a
generic (ε, δ) mechanism. ``docs/privacy.md`` and the tests compare the run's printed ε with it.
"""

from __future__ import annotations

import math
from typing import Any

import dp_accounting
from dp_accounting.pld import common
from dp_accounting.pld import privacy_loss_distribution as pld_lib

NR = dp_accounting.NeighboringRelation


def _event(sigma: float, q: float, population: int) -> dp_accounting.DpEvent:
    if population:
        m = round(q * population)
        return dp_accounting.SampledWithoutReplacementDpEvent(
            population, m, dp_accounting.GaussianDpEvent(sigma / 2.0)
        )
    gaussian = dp_accounting.GaussianDpEvent(sigma)
    return gaussian if q >= 1.0 else dp_accounting.PoissonSampledDpEvent(q, gaussian)


def gaussian_history_epsilon(rows: list, delta: float, accountant: str) -> float:
    """ε of ledger rows (σ, q, steps[, population]) composed by dp-accounting."""
    rows = [(float(r[0]), float(r[1]), int(r[2]), int(r[3]) if len(r) > 3 else 0) for r in rows]
    rows = [r for r in rows if r[2] > 0]
    if not rows:
        return 0.0
    if any(sigma == 0 for sigma, *_ in rows):
        return math.inf
    fixed = any(n for *_, n in rows)
    if accountant == "rdp" or fixed:
        relation = NR.REPLACE_ONE if fixed else NR.ADD_OR_REMOVE_ONE
        acc: dp_accounting.PrivacyAccountant = dp_accounting.rdp.RdpAccountant(
            neighboring_relation=relation
        )
    else:
        acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    for sigma, q, steps, n in rows:
        acc.compose(_event(sigma, q, n), steps)
    return float(acc.get_epsilon(delta))


def local_rows_epsilon(rows: list, delta: float) -> float:
    """min(basic, PLD composition) of rows (ε, δ, unit, units, uploads)."""
    counts = [(float(e), float(d), int(u) * int(n)) for e, d, _unit, u, n in rows]
    basic = sum(e * k for e, _, k in counts)
    if sum(d * k for _, d, k in counts) >= delta:
        return basic
    total = None
    for e, d, k in counts:
        one = pld_lib.from_privacy_parameters(
            common.DifferentialPrivacyParameters(e, d), value_discretization_interval=1e-3
        ).self_compose(k)
        total = one if total is None else total.compose(one)
    assert total is not None
    return min(basic, float(total.get_epsilon_for_delta(delta)))


def headline_epsilon(state: dict[str, Any], *, delta: float, accountant: str) -> float:
    """The headline ε the ledger defends, by the accountant's own precedence (no guarantee →
    ∞; client level; record level, max over clients; local, max over clients; nothing
    released: 0, or ∞ for a run whose strategy is not private)."""
    if state.get("no_guarantee"):
        return math.inf
    if state["client_level"]:
        return gaussian_history_epsilon(state["client_level"], delta, accountant)
    if state["record_level"]:
        return max(
            gaussian_history_epsilon(rows, delta, accountant)
            for rows in state["record_level"].values()
        )
    if state.get("local"):
        return max(local_rows_epsilon(rows, delta) for rows in state["local"].values())
    # Nothing released: ε = 0 for a private run, no guarantee (∞) for a non-private one.
    return 0.0 if state.get("private_run", True) or not state.get("rounds") else math.inf
