"""Privacy planning (server/privacy_plan.py): calibration returns a new local-training config
and never mutates the one it was given; the planned round is the strategy's events plus one
DP-SGD event per cohort client, the same rule the local loop records."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fl_lightning.client.config import DPSGDConfig, LocalTrainingConfig
from fl_lightning.privacy.accounting.analysis import epsilon
from fl_lightning.privacy.accounting.budget import BudgetError, dp_sgd_event
from fl_lightning.privacy.accounting.events import CohortSampling
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.server.privacy_plan import (
    calibrate_client_noise,
    planned_privacy,
    resolve_client_noise,
)
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.testing import round_context

SIZES = [40, 80, 120, 160]
SAMPLING = CohortSampling("poisson", 0.5, len(SIZES))


def dp_config(sigma: float | None) -> LocalTrainingConfig:
    return LocalTrainingConfig(
        local_steps=2, batch_size=8, dp_sgd=DPSGDConfig(noise_multiplier=sigma, max_grad_norm=1.0)
    )


def test_calibration_fixes_sigma_for_the_most_expensive_client_without_mutating():
    given = dp_config(None)
    acc = PrivacyAccountant("rdp", delta=1e-5, target_epsilon=4.0)
    out = calibrate_client_noise(
        given, client_sizes=SIZES, sampling=SAMPLING, rounds=10, accountant=acc
    )
    assert given.dp_sgd is not None and given.dp_sgd.noise_multiplier is None  # untouched
    assert out.dp_sgd is not None and out.dp_sgd.noise_multiplier is not None
    sigma = out.dp_sgd.noise_multiplier

    # The smallest client (rate B/n = 0.2) is the most expensive; over every one of the 10
    # rounds it stays within the target, and a 10 % smaller σ would not.
    # (max_participations: Binomial(10, 0.5) reaches 10 with probability 2^-10 > 10^-3 / 4.)
    def eps(s: float) -> float:
        return epsilon([dp_sgd_event(s, batch_size=8, size=40, steps=2)] * 10, 1e-5, "rdp")

    assert eps(sigma) <= 4.0 + 1e-6
    assert eps(0.9 * sigma) > 4.0


def test_the_dp_sgd_noise_is_resolved_once_as_one_frozen_value():
    acc = PrivacyAccountant("rdp", delta=1e-5, target_epsilon=4.0)
    kwargs = {"client_sizes": SIZES, "sampling": SAMPLING, "rounds": 10, "accountant": acc}
    params = resolve_client_noise(dp_config(None), **kwargs)
    assert params is not None and params.clip_norm == 1.0
    out = calibrate_client_noise(dp_config(None), **kwargs)
    assert out.dp_sgd is not None and out.dp_sgd.noise_multiplier == params.noise_multiplier
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.noise_multiplier = 2.0  # type: ignore[misc]
    given = resolve_client_noise(dp_config(1.7), **kwargs)
    assert given is not None and given.noise_multiplier == 1.7
    no_dp = LocalTrainingConfig(local_steps=2, batch_size=8)
    assert resolve_client_noise(no_dp, **kwargs) is None
    assert calibrate_client_noise(no_dp, **kwargs) is no_dp


def test_a_target_that_cannot_pay_for_one_round_is_refused_naming_the_client():
    acc = PrivacyAccountant("rdp", delta=1e-5, target_epsilon=0.5)
    with pytest.raises(BudgetError, match=r"client 0 \(40 examples"):
        calibrate_client_noise(
            dp_config(0.6), client_sizes=SIZES, sampling=SAMPLING, rounds=3, accountant=acc
        )


def test_planned_round_has_one_dp_sgd_event_per_cohort_client():
    ctx = round_context(3, [1, 3], total_rounds=3, sampling=SAMPLING)  # N=4, q=0.5, m=2
    plan = planned_privacy(FedAvg(), dp_config(1.3), torch.tensor(SIZES), ctx)
    assert sorted(plan.record_level) == [1, 3]
    assert plan.record_level[3] == [dp_sgd_event(1.3, batch_size=8, size=160, steps=2)]
    assert plan.client_level == [] and plan.local == {}


@pytest.mark.parametrize("accountant", ["pld", "prv"])
def test_adaptive_noise_is_refused_on_accountants_without_adaptive_composition(accountant):
    """DPFL-AGN's ANR chooses σ_t from released models: only RDP composes that (a Rényi filter
    per order, Feldman & Zrnic 2021); PLD/PRV assume the noise fixed in advance."""
    from fl_lightning.server.privacy_plan import check_strategy_target
    from fl_lightning.strategies.dpfl_agn import DPFLAGN
    from fl_lightning.strategies.spec import PrivacyTarget

    strategy = DPFLAGN(anr=True)
    assert strategy.traits.adaptive_noise
    with pytest.raises(ValueError, match=r"^privacy.accountant: .*Rényi filter.*use rdp"):
        check_strategy_target(strategy, PrivacyTarget(accountant=accountant, sampling=SAMPLING))
    check_strategy_target(strategy, PrivacyTarget(accountant="rdp", sampling=SAMPLING))
    check_strategy_target(DPFLAGN(anr=False), PrivacyTarget(accountant=accountant))


def test_adaptive_noise_is_named_in_the_guarantee():
    from fl_lightning.privacy.accounting.events import RoundPrivacy, SampledGaussian

    acc = PrivacyAccountant("rdp", delta=1e-5)
    acc.adaptive_noise = "DPFL-AGN's ANR chooses σ_t from the released models"
    acc.record(RoundPrivacy(record_level={0: [SampledGaussian(1.0, 0.1, 3)]}))
    assert "Rényi filter per order (Feldman & Zrnic 2021)" in acc.report()["privacy/guarantee"]
