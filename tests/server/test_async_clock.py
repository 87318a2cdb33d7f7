"""The simulated clock and delay model (fl_lightning/strategies/asynchronous/clock.py)."""

import math

import pytest

from fl_lightning.strategies.asynchronous.clock import AsyncClock, DelayModel


@pytest.mark.parametrize("kind", ["constant", "exponential", "lognormal"])
def test_delays_are_deterministic_for_a_seed(kind):
    model = DelayModel(kind=kind, mean=1.0, straggler_fraction=0.3, straggler_slowdown=5.0)
    a = [model.sample(7, r, c) for r in range(5) for c in range(20)]
    b = [model.sample(7, r, c) for r in range(5) for c in range(20)]
    assert a == b
    other = [model.sample(8, r, c) for r in range(5) for c in range(20)]
    if kind != "constant":
        assert a != other
    assert all(d >= 0 for d in a)


def test_delay_distributions_have_the_configured_scale():
    exp = DelayModel(kind="exponential", mean=2.0)
    draws = [exp.sample(0, 0, c) for c in range(4000)]
    assert abs(sum(draws) / len(draws) - 2.0) < 0.15  # sd of the mean ≈ 0.032
    logn = DelayModel(kind="lognormal", mean=1.5, sigma=0.5)
    draws = sorted(logn.sample(0, 0, c) for c in range(4001))
    assert abs(draws[2000] - 1.5) < 0.1  # the median is ``mean``


def test_stragglers_are_a_fixed_fraction_and_slowed_down():
    model = DelayModel(kind="constant", mean=1.0, straggler_fraction=0.25, straggler_slowdown=4.0)
    stragglers = [c for c in range(2000) if model.is_straggler(3, c)]
    assert abs(len(stragglers) / 2000 - 0.25) < 0.04
    c = stragglers[0]
    assert all(model.sample(3, r, c) == 4.0 for r in range(3))
    normal = next(c for c in range(2000) if not model.is_straggler(3, c))
    assert model.sample(3, 0, normal) == 1.0


def test_aggregation_round_and_staleness():
    clock = AsyncClock(receive_window=1.0, aggregation_window=0.5)  # period 1.5
    assert clock.aggregation_round(0, 0.0) == 0
    assert clock.aggregation_round(0, 1.0) == 0  # arrives at the end of the receive window
    assert clock.aggregation_round(0, 1.2) == 1  # red window of round 0 → round 1
    assert clock.aggregation_round(0, 2.0) == 1  # receive window of round 1
    assert clock.aggregation_round(2, 3.6) == 4  # arrives at 6.6, in round 4's receive window
    assert clock.aggregation_round(2, 4.2) == 5  # arrives at 7.2, in round 4's red → round 5
    assert clock.aggregation_round(3, 0.3) == 3


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kind": "gamma"}, "delay.kind"),
        ({"kind": "exponential", "mean": 0.0}, "delay.mean"),
        ({"straggler_fraction": 1.5}, "straggler_fraction"),
        ({"straggler_slowdown": 0.5}, "straggler_slowdown"),
    ],
)
def test_bad_delay_settings_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        DelayModel(**kwargs)


def test_bad_windows_name_the_field():
    with pytest.raises(ValueError, match="receive_window"):
        AsyncClock(receive_window=0.0)
    with pytest.raises(ValueError, match="aggregation_window"):
        AsyncClock(aggregation_window=-1.0)
    assert math.isclose(AsyncClock(1.0, 0.25).period, 1.25)
