"""The accountant callback: ledgers, headline ε, budget stop, checkpoint round trip."""

from __future__ import annotations

import math

import pytest

from fl_lightning.privacy.accountant import PrivacyAccountant
from fl_lightning.privacy.analysis import epsilon
from fl_lightning.privacy.events import LocalRelease, RoundPrivacy, SampledGaussian


def test_record_level_is_max_over_clients_of_their_own_steps():
    acc = PrivacyAccountant(accountant="rdp", delta=1e-5)
    acc.record(RoundPrivacy(record_level={0: [SampledGaussian(1.0, 0.1, 10)]}))
    acc.record(RoundPrivacy(record_level={1: [SampledGaussian(1.0, 0.1, 10)]}))
    acc.record(RoundPrivacy(record_level={0: [SampledGaussian(1.0, 0.1, 10)]}))
    expected = epsilon([SampledGaussian(1.0, 0.1, 20)], 1e-5, "rdp")
    report = acc.report()
    assert report["privacy/epsilon"] == pytest.approx(expected)
    assert report["privacy/guarantee"].startswith("record-level")


def test_client_level_composes_rounds():
    acc = PrivacyAccountant(accountant="rdp", delta=1e-5)
    for _ in range(5):
        acc.record(RoundPrivacy(client_level=[SampledGaussian(1.0, 0.25, 1)]))
    expected = epsilon([SampledGaussian(1.0, 0.25, 5)], 1e-5, "rdp")
    assert acc.epsilon == pytest.approx(expected)


def test_local_upload_releases_compose_per_client():
    acc = PrivacyAccountant()
    acc.record(RoundPrivacy(local={3: [LocalRelease(0.5)]}))
    acc.record(RoundPrivacy(local={3: [LocalRelease(0.5)], 4: [LocalRelease(0.5)]}))
    assert acc.epsilon == pytest.approx(1.0, rel=1e-3)  # client 3: two 0.5-DP uploads
    assert "per client for its whole participation" in acc.report()["privacy/guarantee"]


def test_no_guarantee_is_reported_instead_of_a_number():
    acc = PrivacyAccountant()
    acc.record(
        RoundPrivacy(local={0: [LocalRelease(1.0)]}, no_guarantee="values sent in the clear")
    )
    report = acc.report()
    assert report["privacy/epsilon"] == math.inf
    assert report["privacy/guarantee"] == "none: values sent in the clear"


def test_budget_stop_is_before_exceeding():
    acc = PrivacyAccountant(delta=1e-5, target_epsilon=3.0)
    step = RoundPrivacy(client_level=[SampledGaussian(1.0, 0.2, 1)])
    rounds = 0
    while not acc.would_exceed(step):
        acc.record(step)
        rounds += 1
    assert acc.epsilon <= 3.0
    assert epsilon([SampledGaussian(1.0, 0.2, rounds + 1)], 1e-5, "rdp") > 3.0


def test_state_dict_round_trip():
    acc = PrivacyAccountant()
    acc.record(
        RoundPrivacy(
            client_level=[SampledGaussian(1.0, 0.2, 1)],
            local={1: [LocalRelease(0.3, 0.0, "coordinate", 7)]},
        )
    )
    acc.record(RoundPrivacy(client_level=[SampledGaussian(1.0, 0.2, 1)]))
    acc.record(RoundPrivacy(record_level={2: [SampledGaussian(0.9, 0.1, 4)]}))
    clone = PrivacyAccountant()
    clone.load_state_dict(acc.state_dict())
    assert clone.report() == acc.report()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"delta": 0.0}, "privacy.delta"),
        ({"delta": 1.0}, "privacy.delta"),
        ({"target_epsilon": 0.0}, "privacy.target_epsilon"),
        ({"accountant": "moments"}, "privacy.accountant"),
    ],
)
def test_bad_settings_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        PrivacyAccountant(**kwargs)
