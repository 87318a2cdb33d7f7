"""The accountant callback: ledgers, headline ε, budget stop, checkpoint round trip."""

from __future__ import annotations

import math

import pytest

from fl_lightning.privacy.accounting.analysis import epsilon
from fl_lightning.privacy.accounting.events import LocalRelease, RoundPrivacy, SampledGaussian
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant


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


def test_local_gaussian_uploads_compose_as_gaussian_events_at_the_runs_delta():
    """Issue 33 §2: LocalGaussian at ε = 1 a coordinate, d = 1,000, 200 uploads printed
    `local (2e+05, 2)-DP` (basic composition, a δ of 2); composed as Gaussian events it is
    ε ≈ 7,700 at the run's δ = 1e-5, and the recomputation (closed-form GDP) agrees."""
    from fl_lightning.privacy.accounting.recompute import headline_epsilon
    from fl_lightning.privacy.mechanisms.ldp import LocalGaussian

    mech = LocalGaussian(epsilon=1.0, delta=1e-5)
    acc = PrivacyAccountant("pld", delta=1e-5)
    for _ in range(200):
        acc.record(RoundPrivacy(local={0: [mech.local_release(1000)]}))
    report = acc.report()
    assert report["privacy/epsilon"] == pytest.approx(7700, rel=0.02)
    assert report["privacy/delta"] == 1e-5
    assert f"({report['privacy/epsilon']:.3g}, 1e-05)-DP" in report["privacy/guarantee"]
    state = {"delta": 1e-5, **acc.state_dict()}
    assert headline_epsilon(state, delta=1e-5, accountant="pld") == pytest.approx(
        report["privacy/epsilon"], rel=0.01
    )
    rdp = PrivacyAccountant("rdp", delta=1e-5)
    rdp.load_state_dict(acc.state_dict())
    assert rdp.epsilon >= report["privacy/epsilon"]  # RDP is the looser bound


def test_adp_fl_gaussian_uploads_are_stated_at_the_runs_delta_not_the_summed_one():
    """The offline ADP-FL config printed "ε = 9.948 (δ = 1e-05); guarantee: local (9.95,
    3e-05)-DP": three Gaussian uploads at δ = 1e-5 each, basic composition at the summed δ."""
    from fl_lightning.privacy.mechanisms.local_budget import UploadMechanism

    mech = UploadMechanism(mechanism="gaussian", clip_norm=1.0, delta=1e-5)
    acc = PrivacyAccountant("pld", delta=1e-5, target_epsilon=9.0)
    upload = RoundPrivacy(local={0: [mech.release(epsilon=3.316)]})
    for _ in range(3):
        acc.record(upload)
    report = acc.report()
    assert "1e-05)-DP" in report["privacy/guarantee"] and "3e-05" not in report["privacy/guarantee"]
    assert report["privacy/epsilon"] < 3 * mech.charged_epsilon(epsilon=3.316)
    # the budget stop compares ε at the run's δ with the target
    assert acc.would_exceed(upload) == (_after(acc, upload) > 9.0)


def _after(acc: PrivacyAccountant, spent: RoundPrivacy) -> float:
    clone = PrivacyAccountant(acc.accountant, acc.delta)
    clone.load_state_dict(acc.state_dict())
    clone.record(spent)
    return clone.epsilon


def test_releases_whose_own_delta_sum_past_the_runs_delta_give_no_epsilon_at_it():
    acc = PrivacyAccountant("pld", delta=1e-5)
    for _ in range(3):
        acc.record(RoundPrivacy(local={0: [LocalRelease(1.0, 1e-5, "upload")]}))
    report = acc.report()
    assert report["privacy/epsilon"] == math.inf
    assert (
        report["privacy/guarantee"].startswith("none")
        and "past the run's δ" in (report["privacy/guarantee"])
    )


def test_budget_check_does_not_replay_the_ledger(monkeypatch):
    """would_exceed composes only the histories the round extends (cached per client)."""
    import fl_lightning.privacy.guarantee.accountant as module

    acc = PrivacyAccountant("pld", delta=1e-5, target_epsilon=50.0)
    sizes = [20 + 7 * c for c in range(30)]
    for r in range(20):
        cohort = [(r * 7 + j) % 30 for j in range(5)]
        acc.record(
            RoundPrivacy(record_level={c: [SampledGaussian(1.1, 8 / sizes[c], 3)] for c in cohort})
        )
    acc.report()

    def replay(*args, **kwargs):
        raise AssertionError("the ledger was replayed")

    monkeypatch.setattr(module, "as_history", replay)
    monkeypatch.setattr(PrivacyAccountant, "state_dict", replay)
    monkeypatch.setattr(PrivacyAccountant, "load_state_dict", replay)
    step = RoundPrivacy(record_level={3: [SampledGaussian(1.1, 8 / sizes[3], 3)]})
    assert acc.would_exceed(step) is False
    acc.target_epsilon = 0.5 * acc.epsilon
    assert acc.would_exceed(step) is True
