"""Refusals, before round 0, of a distributed-DP run that can release nothing useful (issue 58):
rounds that cannot reach SecAgg's threshold, and a field too narrow for the planned noise.

* **Survivors.** A round aggregates only when at least ``min_survivors`` dispatched clients
  survive; its survivors are Binomial(trials, survive) (``distributed.accounting.
  survivor_distribution``: Poisson cohorts of rate q from N clients, each surviving with 1 − r,
  give Binomial(N, q(1 − r)); a fixed cohort of m gives Binomial(m, 1 − r)). A run whose rounds
  aggregate with probability below :data:`MIN_AGGREGATE_PROBABILITY` mostly trains on nothing
  and is refused, naming ``strategy.min_survivors`` (larger than any cohort, or than the
  cohorts drawn without dropouts) or ``strategy.dropout_rate`` (what makes it unreachable).
* **Bits.** Rounding to the 2^b grid inflates the sensitivity (Kairouz, Liu & Steinke 2021,
  Prop. 22; the scale s shrinks with b, Eq. 61), so few bits can multiply ε at the same σ: the
  planned ε at ``bits`` is compared with the same σ's in a field wide enough that rounding no
  longer matters (:data:`WIDE_BITS`); above :data:`MAX_ROUNDING_INFLATION` times that, or above
  the target where the wide field stays within it, the run is refused with both figures and
  the smallest ``bits`` that brings ε within :data:`MAX_ROUNDING_INFLATION` (and the target).
"""

from __future__ import annotations

from collections.abc import Callable

MIN_AGGREGATE_PROBABILITY = 0.5
"""A round must aggregate (reach ``min_survivors``) with at least this probability."""

MAX_ROUNDING_INFLATION = 1.5
"""The planned ε at ``strategy.bits`` may be at most this multiple of the same σ's ε in a
field wide enough for rounding not to matter."""

WIDE_BITS = 32
"""The field of the no-rounding reference (the encoding's scale grows as 2^b; at 32 bits the
rounding's share of the sensitivity is negligible for any model this project trains)."""


def aggregate_probability(trials: int, survive: float, min_survivors: int) -> float:
    """P(n ≥ ``min_survivors``) for n ~ Binomial(``trials``, ``survive``) (scipy)."""
    from scipy import stats

    if trials < min_survivors:
        return 0.0
    return float(stats.binom(int(trials), float(survive)).sf(int(min_survivors) - 1))


def survivors_problem(
    *,
    trials: int,
    survive: float,
    stays: float,
    min_survivors: int,
    dropout_rate: float,
    cohort: str,
) -> str | None:
    """Why rounds would (almost) never aggregate, as one line naming the field, or None.
    ``trials``/``survive``: the survivors' Binomial; ``stays`` = 1 − ``dropout_rate``;
    ``cohort``: the cohort in words (e.g. "Poisson cohorts of about 20 of 40 clients")."""
    if min_survivors > trials:
        return (
            f"strategy.min_survivors: {min_survivors} is more than any round can have "
            f"({cohort}: at most {trials}), so no round would ever aggregate; set "
            f"strategy.min_survivors <= {trials}"
        )
    p = aggregate_probability(trials, survive, min_survivors)
    if p >= MIN_AGGREGATE_PROBABILITY:
        return None
    undropped = aggregate_probability(trials, survive / stays, min_survivors) if stays else 0.0
    if dropout_rate > 0 and undropped >= MIN_AGGREGATE_PROBABILITY:
        field, value, fix = "dropout_rate", dropout_rate, "lower strategy.dropout_rate"
    else:
        field, value, fix = "min_survivors", min_survivors, "lower strategy.min_survivors"
    return (
        f"strategy.{field}: at {value:g}, a round reaches {min_survivors} survivors "
        f"(strategy.min_survivors) only with probability {p:.3g} ({cohort}, each surviving "
        f"with probability {stays:g}), below {MIN_AGGREGATE_PROBABILITY:g}: most rounds would "
        f"abort and release nothing; {fix}"
    )


def bits_problem(
    epsilon_at: Callable[[int], float],
    *,
    bits: int,
    target: float | None,
    rounds: int,
    wide_bits: int = WIDE_BITS,
) -> str | None:
    """Why ``bits`` is too few for the planned noise (one line naming ``strategy.bits``, with
    how far ε is off and the bits that would do), or None. ``epsilon_at(b)``: the ε of the
    run's rounds (each with the expected survivors) in a field of b bits at the configured σ
    (it may raise ``ValueError`` where no scale fits; such b do not do)."""
    if bits >= wide_bits:
        return None
    here, wide = epsilon_at(bits), epsilon_at(wide_bits)
    too_far = here > MAX_ROUNDING_INFLATION * wide
    over_target = target is not None and here > target >= wide
    if not (too_far or over_target):
        return None

    def fits(b: int) -> bool:
        try:
            eps = epsilon_at(b)
        except ValueError:
            return False
        return eps <= MAX_ROUNDING_INFLATION * wide and (target is None or eps <= target
                                                          or wide > target)  # fmt: skip

    enough = next((b for b in range(bits + 1, wide_bits + 1) if fits(b)), wide_bits)
    against = (
        f"{here / wide:.3g}× the {wide:.4g} the same σ gives without rounding"
        if too_far
        else f"above privacy.target_epsilon {target:g} (without rounding: {wide:.4g})"
    )
    return (
        f"strategy.bits: {bits} bits round the encoded updates so coarsely that {rounds} rounds "
        f"of the expected survivors spend ε = {here:.4g}, {against}; strategy.bits {enough} "
        f"would spend ε = {epsilon_at(enough):.4g}"
    )


__all__ = [
    "MAX_ROUNDING_INFLATION",
    "MIN_AGGREGATE_PROBABILITY",
    "WIDE_BITS",
    "aggregate_probability",
    "bits_problem",
    "survivors_problem",
]
