"""Calibrating distributed DP's σ when a round's survivors vary (Poisson cohorts, dropouts):
the plan covers the spread of the run's spend, so a run calibrated to a target reaches its
planned rounds with high probability. Planning with the expected survivors (the negative
control) underestimates the spend, since a round's RDP is convex in 1/n: most runs would be
stopped early by the budget (Poisson cohorts of 20 of 100 over 40 rounds stopped at 33)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fl_lightning.privacy.accounting.events import DistributedNoiseEvent
from fl_lightning.privacy.distributed.accounting import (
    ORDERS,
    calibrate_distributed_sigma,
    distributed_epsilon,
    planned_rdp,
    rdp_to_epsilon,
    round_rdp,
    survivor_distribution,
)
from fl_lightning.privacy.distributed.secagg.encoding import heuristic_scale

N, Q, M, ROUNDS, TARGET, DELTA, DIM = 100, 0.2, 20, 40, 8.0, 1e-5, 1024


def event_at(sigma: float) -> DistributedNoiseEvent:
    """A round of DDG shares for σ on the expected cohort m (what the strategy plans)."""
    scale = heuristic_scale(local_std=sigma / M**0.5, clip_norm=1.0, bits=16, clients=M,
                            dim=DIM, k=4.0)  # fmt: skip
    return DistributedNoiseEvent(
        "ddg", 1.0, scale, (sigma * scale) ** 2 / M, M, DIM, 0.6065, 16, Q, False, M
    )


def test_the_survivor_distribution_is_the_binomial_with_aborted_rounds_at_zero():
    dist = survivor_distribution(N, Q, min_survivors=2)
    assert sum(p for _, p in dist) == pytest.approx(1.0, abs=1e-12)
    assert dist[0][0] == 0 and dist[0][1] == pytest.approx(0.8**100 + 100 * 0.2 * 0.8**99)
    assert all(n >= 2 for n, _ in dist[1:])
    assert survivor_distribution(20, 1.0) == [(20, 1.0)]  # nobody drops: exactly m
    assert survivor_distribution(1, 1.0, min_survivors=2) == [(0, 1.0)]  # always aborted


def test_a_fixed_number_of_survivors_plans_exactly_the_rounds():
    at = event_at(2.0)
    plan = planned_rdp(lambda n: replace(at, survivors=n), [(M, 1.0)], rounds=ROUNDS)
    assert np.allclose(plan, ROUNDS * np.asarray(round_rdp(at)))


def test_the_plan_covers_the_spread_of_the_spend():
    at = event_at(2.0)
    dist = survivor_distribution(N, Q, min_survivors=2)
    plan = planned_rdp(lambda n: replace(at, survivors=n), dist, rounds=ROUNDS)
    expected_n = ROUNDS * np.asarray(round_rdp(at))  # every round with m survivors
    assert np.all(plan >= expected_n - 1e-12)
    assert rdp_to_epsilon(plan, DELTA) > rdp_to_epsilon(expected_n, DELTA)
    assert len(ORDERS) == plan.shape[0]


@pytest.mark.parametrize(
    "plan", [pytest.param("distribution", marks=pytest.mark.heavy), "expected"]
)
def test_a_calibrated_run_reaches_its_rounds_with_high_probability(plan):
    """300 runs' survivor sequences (Binomial(N, q) a round): the fraction whose 40 rounds, each
    priced with its own survivors, stay within the target. Calibrated with the distribution:
    at least 90 % (nominally 95 %); with the expected survivors (negative control): fewer than
    half."""
    survivors = survivor_distribution(N, Q, min_survivors=2) if plan == "distribution" else None
    sigma = calibrate_distributed_sigma(
        event_at, rounds=ROUNDS, target_epsilon=TARGET, delta=DELTA, survivors=survivors
    )
    at = event_at(sigma)
    draws = np.random.default_rng(0).binomial(N, Q, size=(300, ROUNDS))
    within = [
        distributed_epsilon([replace(at, survivors=int(n) if n >= 2 else 0) for n in run], DELTA)
        <= TARGET
        for run in draws
    ]
    share = float(np.mean(within))
    if plan == "distribution":
        assert share >= 0.90, share
    else:
        assert share < 0.5, share
