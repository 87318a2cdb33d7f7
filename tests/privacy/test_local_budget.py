"""Local upload mechanisms and per-client ledgers
(fl_lightning/privacy/mechanisms/local_budget.py)."""

import math

import pytest
import torch

from fl_lightning.privacy.mechanisms.local_budget import BudgetLedger, UploadMechanism


def test_gaussian_upload_uses_the_classic_sigma_on_the_clipped_delta():
    m = UploadMechanism(mechanism="gaussian", clip_norm=0.5, delta=1e-5)
    x = torch.full((20000,), 1.0)
    g = torch.Generator().manual_seed(0)
    out, norm = m.privatize(x, epsilon=2.0, generator=g)
    assert norm == pytest.approx(math.sqrt(20000))
    sigma = math.sqrt(2 * math.log(1.25 / 1e-5)) * (2 * 0.5) / 2.0
    clipped = 0.5 / math.sqrt(20000)
    assert float((out - clipped).std()) == pytest.approx(sigma, rel=0.03)


def test_laplace_upload_clips_in_l1_and_uses_scale_two_c_over_eps():
    m = UploadMechanism(mechanism="laplace", clip_norm=1.0, delta=1e-5)
    x = torch.full((20000,), 1.0)
    out, _ = m.privatize(x, epsilon=4.0, generator=torch.Generator().manual_seed(1))
    noise = out - 1.0 / 20000
    # Lap(b) has mean |X| = b = 2C/ε = 0.5.
    assert float(noise.abs().mean()) == pytest.approx(0.5, rel=0.03)


def test_clip_only_without_a_mechanism():
    m = UploadMechanism(mechanism="none", clip_norm=1.0, delta=1e-5)
    out, _ = m.privatize(torch.full((4,), 3.0), epsilon=None, generator=torch.Generator())
    assert float(out.norm()) == pytest.approx(1.0)


def test_charged_epsilon_is_the_paper_eps_where_the_classic_theorem_holds():
    m = UploadMechanism(mechanism="gaussian", clip_norm=1.0, delta=1e-5)
    assert m.charged_epsilon(epsilon=0.5) == 0.5
    # At ε_t = 10 the classic σ only certifies ≈ 10.4 (PLD): the ledger charges that.
    assert 10.2 < m.charged_epsilon(epsilon=10.0) < 10.6
    lap = UploadMechanism(mechanism="laplace", clip_norm=1.0, delta=1e-5)
    assert lap.charged_epsilon(epsilon=10.0) == 10.0


def test_tight_composition_beats_basic_for_many_uploads():
    m = UploadMechanism(mechanism="gaussian", clip_norm=1.0, delta=1e-5)
    ledger = BudgetLedger(mechanism=m, accountant="rdp")
    for _ in range(10):
        ledger.charge(3, 1.0)
    basic, delta = ledger.basic(3)
    assert basic == pytest.approx(10.0) and delta == pytest.approx(1e-4)
    assert ledger.tight(3, delta=1e-5) < 3.5  # RDP ≈ 2.9 at δ = 1e-5 (a single δ!)
    assert ledger.can_afford(3, 1.0, 11.0) and not ledger.can_afford(3, 1.0, 10.5)
    other = BudgetLedger(mechanism=m)
    other.load_state_dict(ledger.state_dict())
    assert other.basic(3) == ledger.basic(3)


def test_bad_mechanism_settings_name_the_field():
    with pytest.raises(ValueError, match="strategy.mechanism"):
        UploadMechanism(mechanism="exp", clip_norm=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="strategy.clip_norm"):
        UploadMechanism(mechanism="gaussian", clip_norm=-1.0, delta=1e-5)
    with pytest.raises(ValueError, match="strategy.delta"):
        UploadMechanism(mechanism="gaussian", clip_norm=1.0, delta=0.0)


# (ε_t, the classic σ/Δ of Thm. 1 at δ = 1e-5, ε of that noise by the previous implementation: a
# discretised dp-accounting PLD accountant, value_discretization_interval = 1e-3)
PLD_VALUES = [
    (0.5, 9.689610525210778, 0.35257689956006855),
    (2.0, 2.4224026313026945, 1.610317200732255),
    (10.0, 0.4844805262605389, 10.393882537628832),
    (40.0, 0.12112013156513472, 68.4904097411936),
]


@pytest.mark.parametrize(("eps_t", "z", "old"), PLD_VALUES)
def test_single_event_epsilon_keeps_the_pld_values(eps_t, z, old):
    """The closed form gives the values of the discretised PLD (which rounds pessimistically,
    so it may only be a hair above), and the charge of an upload is unchanged."""
    from fl_lightning.privacy.mechanisms.local_budget import _single_event_epsilon

    _single_event_epsilon.cache_clear()
    new = _single_event_epsilon("gaussian", z, 1e-5)
    assert new <= old and old - new < 1e-5 * max(1.0, old)
    up = UploadMechanism(mechanism="gaussian", clip_norm=1.0, delta=1e-5)
    assert up.noise_multiplier(epsilon=eps_t) == pytest.approx(z)
    assert up.charged_epsilon(epsilon=eps_t) == pytest.approx(max(eps_t, old), rel=1e-5)


def test_single_event_epsilon_of_laplace_is_one_over_the_scale_at_delta_zero_ish():
    from fl_lightning.privacy.mechanisms.local_budget import _single_event_epsilon

    # Laplace of scale b at sensitivity 1 is exactly (1/b)-DP; at δ > 0 the ε is a bit smaller
    assert _single_event_epsilon("laplace", 0.5, 1e-12) == pytest.approx(2.0, abs=1e-6)
    assert _single_event_epsilon("laplace", 0.5, 1e-3) < 2.0


def test_record_sensitivity_divides_the_noise_by_the_client_size():
    up = UploadMechanism(mechanism="gaussian", clip_norm=2.0, delta=1e-5, sensitivity="record")
    assert up.noise_sensitivity(800) == pytest.approx(4.0 / 800)
    with pytest.raises(ValueError, match="^strategy.sensitivity"):
        up.noise_sensitivity(None)
    # the sound ε of the 800 x smaller noise at the enforced Δ = 2C is enormous
    assert up.sound_epsilon(epsilon=1.0, num_examples=800) > 1e4
    client = UploadMechanism(mechanism="gaussian", clip_norm=2.0, delta=1e-5)
    assert client.sound_epsilon(epsilon=1.0, num_examples=800) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="^strategy.sensitivity"):
        UploadMechanism(mechanism="gaussian", clip_norm=1.0, delta=1e-5, sensitivity="sample")
