"""The mechanism contract (``privacy/mechanisms/base.py``): ``release`` constrains the input,
adds noise from the generator it is handed and returns the event of that noise, the same event
``event(dimension)`` prices a round with before it trains."""

from __future__ import annotations

import math

import dp_accounting
import pytest
import torch

from fl_lightning.privacy.accounting.events import LocalRelease, SampledGaussian
from fl_lightning.privacy.mechanisms.base import Mechanism
from fl_lightning.privacy.mechanisms.binomial import BinomialMechanism, random_signs
from fl_lightning.privacy.mechanisms.clipping import clip_by_norm_
from fl_lightning.privacy.mechanisms.gaussian import GaussianMechanism
from fl_lightning.privacy.mechanisms.ldp import LocalGaussian, LocalLaplace
from fl_lightning.privacy.mechanisms.sparse_vector import SparseVectorPerturbation, split_budget
from fl_lightning.privacy.mechanisms.upload import (
    ClippedGaussian,
    ClippedLaplace,
    ClippedUpload,
    HighImpactLaplace,
)

D = 64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _input(scale: float = 5.0) -> torch.Tensor:
    return torch.randn(D, generator=_gen(123)) * scale


def _mechanisms() -> dict[str, Mechanism]:
    return {
        "clipped_gaussian": ClippedGaussian(clip_norm=1.0, std=0.7, delta=1e-5),
        "clipped_gaussian_fused": ClippedGaussian(clip_norm=1.0, std=0.7, delta=1e-5, fused=True),
        "clipped_laplace_l2": ClippedLaplace(clip_norm=1.0, scale=0.5),
        "clipped_laplace_l1": ClippedLaplace(clip_norm=1.0, scale=0.5, p=1),
        "high_impact_sound": HighImpactLaplace(
            clip_norm=1.0,
            scale=0.5,
            significant_fraction=0.25,
            noise_unselected=True,
            no_guarantee="unused",
        ),
        "gaussian_clipping": GaussianMechanism(
            noise_multiplier=1.1, sensitivity=1.0, clip_norm=1.0
        ),
        "gaussian_with_std": GaussianMechanism.with_std(0.37, sensitivity=2.0, clip_norm=1.0),
        "binomial": BinomialMechanism(
            clip_norm=1.0,
            levels=16,
            bound=0.5,
            trials=2000,
            p=0.5,
            delta=1e-5,
            dimension=D,
            signs=random_signs(D, generator=_gen(5)),
        ),
        "local_gaussian": LocalGaussian(epsilon=1.0),
        "local_laplace": LocalLaplace(epsilon=1.0),
    }


@pytest.mark.parametrize("name", list(_mechanisms()))
def test_release_is_constrain_then_noise_from_the_handed_generator(name):
    mech = _mechanisms()[name]
    x = _input()
    out = mech.release(x.clone(), generator=_gen(7))
    y = x.clone()
    norm = mech.constrain(y)
    expected = mech.privatize(y, generator=_gen(7))
    assert torch.equal(out.value, expected)
    if math.isnan(norm):
        assert math.isnan(out.norm)
    else:
        p = mech.p if isinstance(mech, ClippedUpload) else 2  # the clip's norm
        assert out.norm == pytest.approx(float(x.norm(p=p)))
    again = mech.release(x.clone(), generator=_gen(7)).value
    other = mech.release(x.clone(), generator=_gen(8)).value
    assert torch.equal(again, out.value) and not torch.equal(other, out.value)


@pytest.mark.parametrize("name", list(_mechanisms()))
def test_the_released_event_is_the_priced_event(name):
    mech = _mechanisms()[name]
    out = mech.release(_input(), generator=_gen(1))
    assert out.event is not None
    assert out.event == mech.event(D)


def test_a_release_without_guarantee_has_no_event_and_says_why():
    mech = HighImpactLaplace(
        clip_norm=1.0,
        scale=0.5,
        significant_fraction=0.25,
        noise_unselected=False,
        no_guarantee="unselected coordinates leave unnoised",
    )
    x = _input()
    out = mech.release(x.clone(), generator=_gen(1))
    assert out.event is None and mech.no_guarantee == "unselected coordinates leave unnoised"
    assert out.observed["selected_fraction"] == pytest.approx(0.25, abs=1 / D)
    clipped = x.clone()
    clip_by_norm_(clipped, 1.0)
    kept = out.value == clipped  # the unselected coordinates are the clipped input itself
    assert kept.float().mean() >= 0.7


def test_clipped_gaussian_event_is_the_gaussian_of_multiplier_sigma_over_2c():
    mech = ClippedGaussian(clip_norm=2.0, std=3.0, delta=1e-6)
    event = mech.event(D)
    assert isinstance(event, LocalRelease)
    assert event.noise_multiplier == 3.0 / 4.0 and event.unit == "upload"
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(0.75))
    assert event.epsilon == pytest.approx(acc.get_epsilon(1e-6)) and event.delta == 1e-6


def test_clipped_laplace_epsilon_is_the_l1_diameter_over_the_scale():
    assert ClippedLaplace(clip_norm=1.0, scale=0.5).event(D).epsilon == pytest.approx(
        2.0 * math.sqrt(D) / 0.5
    )
    assert ClippedLaplace(clip_norm=1.0, scale=0.5, p=1).event(D).epsilon == pytest.approx(4.0)
    charged = LocalRelease(0.3, 0.0, "upload")
    assert ClippedLaplace(clip_norm=1.0, scale=0.5, charged=charged).event(D) is charged


def test_the_fused_gaussian_keeps_the_ledgers_arithmetic():
    """ADP-FL's golden run pins x.add_(unit, alpha=σ), which rounds differently from x + σ·n."""
    x = _input()
    got = ClippedGaussian(clip_norm=100.0, std=0.3711, delta=1e-5, fused=True).privatize(
        x.clone(), generator=_gen(3)
    )
    unit = torch.randn(D, generator=_gen(3))
    assert torch.equal(got, x.clone().add_(unit, alpha=0.3711))


def test_with_std_draws_the_given_std_exactly():
    mech = GaussianMechanism.with_std(0.1 + 0.2, sensitivity=3.0)
    assert mech.std == 0.1 + 0.2
    assert mech.noise_multiplier == (0.1 + 0.2) / 3.0
    x = torch.zeros(D)
    got = mech.privatize(x, generator=_gen(4))
    assert torch.equal(got, torch.randn(D, generator=_gen(4)).mul_(0.1 + 0.2))
    assert mech.event(D) == SampledGaussian((0.1 + 0.2) / 3.0, 1.0)


def test_sparse_vector_release_clips_selects_and_reports_its_event():
    split = split_budget(epsilon=1.0, q=1.0, perturb_share=0.9)
    sound = SparseVectorPerturbation(split=split, clip_norm=1.0, noise_unselected=True)
    out = sound.release_at(_input(), level=0.5, generator=_gen(2))
    assert out.norm == pytest.approx(float(_input().norm()))
    assert out.event == sound.event(D) and out.event is not None
    assert set(out.observed) == {"selected_fraction", "selection_recall", "threshold"}
    published = SparseVectorPerturbation(split=split, clip_norm=1.0, no_guarantee="why")
    assert published.release_at(_input(), level=0.5, generator=_gen(2)).event is None
    assert published.no_guarantee == "why"


def test_binomial_event_is_none_when_theorem_1_gives_nothing():
    mech = BinomialMechanism(
        clip_norm=1.0, levels=16, bound=0.5, trials=0, p=0.5, delta=1e-5, dimension=D
    )
    assert mech.event(D) is None and "Theorem 1" in (mech.no_guarantee or "")


def test_sampled_gaussian_state_round_trip():
    event = SampledGaussian(1.3, 0.02, 7)
    assert SampledGaussian.from_state(list(event.to_state())) == event
    with pytest.raises(AssertionError):
        SampledGaussian(1.0, 0.1, 1, population=100).to_state()
