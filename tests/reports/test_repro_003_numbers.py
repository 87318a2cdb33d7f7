"""The figures the paper-003 reproduction quotes in its notes
(``fl_lightning/reports/repro_specs/003.yaml``), recomputed from the mechanisms' closed-form
moments and checked against a Monte Carlo draw of the deployed sampler: the noise-to-signal
ratio of the averaged uploads, the sign-flip probability, the per-round growth of a weight's
second moment on the model, and the range-bounded mechanisms' noise."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from scipy.stats import norm

from fl_lightning.privacy.mechanisms.registry import make_local_mechanism
from fl_lightning.reports import repro

EPS = 0.3


def _moments(name: str, variant: str = "published") -> tuple[float, float]:
    m = make_local_mechanism(name, epsilon=EPS, variant=variant)
    return float(m.mean(1.0)), float(m.variance(1.0))


def _notes() -> str:
    raw = yaml.safe_load(repro.definition_path("003").read_text())
    return " ".join(raw["profiles"]["scaled"]["notes"])


def test_moments_quoted_in_the_notes():
    notes = _notes()
    mean, var = _moments("spm")
    assert (round(mean, 3), round(var, 2)) == (0.574, 17.28)
    assert round(_moments("spm", "debiased")[1], 2) == 52.37
    assert round(_moments("pnpm")[1], 2) == 55.01
    for text in ("0.574", "17.28", "52.37", "55.01", "7.24/sqrt(n)"):
        assert text in notes


@pytest.mark.parametrize(
    ("variant", "name"), [("published", "spm"), ("debiased", "spm"), ("-", "pnpm")]
)
def test_noise_to_signal_is_the_same_for_every_variant(variant: str, name: str):
    mean, var = _moments(name, variant if name == "spm" else "published")
    ratio = math.sqrt(var) / mean
    assert ratio == pytest.approx(7.24 if name == "spm" else 7.42, abs=0.01)


def test_per_client_count_figures():
    mean, var = _moments("spm")
    ratios, flips = [], []
    for c in (5, 10, 20, 30, 40, 50):
        n = round(0.6 * c)
        r = math.sqrt(var / n) / mean
        ratios.append(round(r, 2))
        flips.append(round(float(norm.cdf(-1 / r)), 2))
    assert ratios == [4.18, 2.95, 2.09, 1.71, 1.48, 1.32]
    assert (flips[0], flips[3], flips[5]) == (0.41, 0.28, 0.22)
    assert math.ceil((math.sqrt(var) / mean / 0.1) ** 2) == pytest.approx(5240, abs=5)
    notes = _notes()
    assert "4.18, 2.95, 2.09, 1.71, 1.48, 1.32" in notes and "5,240" in notes


def test_second_moment_growth_on_the_model():
    n = 18
    growth = {}
    for key, (name, variant) in {
        "published": ("spm", "published"),
        "debiased": ("spm", "debiased"),
        "pnpm": ("pnpm", "published"),
    }.items():
        mean, var = _moments(name, variant)
        growth[key] = mean**2 + var / n
    assert round(growth["published"], 2) == 1.29
    mean, var = _moments("spm")
    assert [round(mean**2 + var / n, 3) for n in (3, 24, 30)] == [6.09, 1.05, 0.906]
    assert "6.09" in _notes() and "(1.05)" in _notes() and "(0.906)" in _notes()
    assert round(growth["debiased"], 2) == 3.91 and round(growth["pnpm"], 2) == 4.06
    assert f"{growth['debiased'] ** 20:.0e}" == "7e+11"


def test_the_sampler_matches_the_closed_form_for_an_average_of_uploads():
    """18 uploads of the same weight w, averaged: mean 0.574 w, std 1.71 x 0.574 |w|."""
    m = make_local_mechanism("spm", epsilon=EPS, variant="published")
    g = torch.Generator().manual_seed(0)
    w = torch.full((40_000,), 0.05)
    avg = torch.stack([m.privatize(w, generator=g) for _ in range(18)]).mean(0)
    assert float(avg.mean()) == pytest.approx(0.574 * 0.05, rel=0.03)
    assert float(avg.std() / avg.mean()) == pytest.approx(1.71, rel=0.03)
    assert float((avg < 0).float().mean()) == pytest.approx(0.28, abs=0.02)


def test_range_bounded_noise():
    duchi = make_local_mechanism("duchi", epsilon=EPS)
    assert math.sqrt(float(duchi.variance(0.0))) == pytest.approx(6.72, abs=0.01)
    assert math.sqrt(float(duchi.variance(0.0)) / 18) == pytest.approx(1.58, abs=0.01)
    pm = make_local_mechanism("pm", epsilon=EPS)
    assert math.sqrt(float(pm.variance(0.0))) == pytest.approx(7.3, abs=0.05)
