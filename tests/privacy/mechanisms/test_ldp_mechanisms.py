"""Monte Carlo checks of the local-DP weight mechanisms (paper 003; notes §1.7, §2.5).

For every mechanism, ε ∈ {0.3, 0.6, 1.5, 3.9} and several w, 10⁶ seeded draws per w:
the sample variance matches ``variance(w)`` to 2% relative; the sample mean matches ``mean(w)``
to 2% relative, or to 5 Monte Carlo standard errors where that is wider (for the high-noise
mechanisms at small ε, 2% of w is below one standard error at n = 10⁶, so a 2%-only test would
be a coin flip). Outputs lie in ``support(w)``. The published SPM's mean is w·e^ε/(e^ε+1).
"""

from __future__ import annotations

import math
import zlib

import pytest
import torch

from fl_lightning.privacy.mechanisms.hm import EPSILON_STAR, HybridMechanism
from fl_lightning.privacy.mechanisms.ldp_fl import LDPFLMechanism
from fl_lightning.privacy.mechanisms.registry import make_local_mechanism
from fl_lightning.privacy.mechanisms.spm import SymmetricPiecewiseMechanism, paper_claimed_variance

EPSILONS = (0.3, 0.6, 1.5, 3.9)
N = 1_000_000
CASES = [
    ("spm", "published"),
    ("spm", "debiased"),
    ("spm", "unbiased_c"),
    ("pnpm", "published"),
    ("pm", "published"),
    ("duchi", "published"),
    ("hm", "published"),
    ("ldp_fl", "published"),
    ("laplace", "published"),
    ("gaussian", "published"),
]
UNIT_WS = (-1.0, -0.4, 0.25, 0.8)
RAW_WS = (-2.0, -0.05, 0.3, 1.7)  # SPM/PNPM need no range


def _draws(mech, ws, seed=0):
    w = torch.tensor(ws, dtype=torch.float64).repeat_interleave(N)
    g = torch.Generator().manual_seed(seed)
    return mech.privatize(w, generator=g).view(len(ws), N)


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize(("name", "variant"), CASES)
def test_monte_carlo_moments_and_support(name, variant, epsilon):
    mech = make_local_mechanism(name, epsilon=epsilon, variant=variant)
    ws = UNIT_WS if mech.unit_input else RAW_WS
    out = _draws(mech, ws, seed=zlib.crc32(f"{name}/{variant}/{epsilon}".encode()))
    for i, w in enumerate(ws):
        x = out[i]
        mean, var = float(mech.mean(w)), float(mech.variance(w))
        mc_mean, mc_var = float(x.mean()), float(x.var())
        se = math.sqrt(var / N)
        assert abs(mc_mean - mean) <= max(0.02 * abs(mean), 5 * se), (w, mc_mean, mean)
        assert abs(mc_var - var) <= 0.02 * var, (w, mc_var, var)
        lo, hi = mech.support(w)
        assert float(x.min()) >= float(lo) - 1e-9 and float(x.max()) <= float(hi) + 1e-9


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_published_spm_is_biased_by_keep_probability(epsilon):
    """Algorithm 2 as written: E[M(w)] = w·e^ε/(e^ε+1), not w (paper's Eq. A19 claims w)."""
    mech = SymmetricPiecewiseMechanism(epsilon=epsilon, variant="published")
    w = 0.7
    x = _draws(mech, (w,), seed=1)[0]
    shrink = math.exp(epsilon) / (math.exp(epsilon) + 1)
    se = math.sqrt(float(mech.variance(w)) / N)
    assert abs(float(x.mean()) - w * shrink) <= max(0.02 * w * shrink, 5 * se)
    assert abs(float(x.mean()) - w) > 10 * se  # the bias is real, not noise
    if epsilon < 1.5:  # the paper's variance formula (A18) is not Algorithm 2's variance
        assert abs(float(paper_claimed_variance(w, epsilon=epsilon)) / float(x.var()) - 1) > 0.2


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("variant", ["published", "debiased", "unbiased_c"])
def test_spm_magnitude_is_only_scaled(variant, epsilon):
    """Only the sign is random: |M(w)| ∈ [s|w|, sC|w|]; zeros stay zero."""
    mech = SymmetricPiecewiseMechanism(epsilon=epsilon, variant=variant)
    w = torch.tensor([0.0, 0.5, -0.5, 1.0], dtype=torch.float64).repeat_interleave(10_000)
    out = mech.privatize(w, generator=torch.Generator().manual_seed(2))
    lo, hi = mech.magnitude_support(w)
    assert torch.all(out.abs() >= lo - 1e-12) and torch.all(out.abs() <= hi + 1e-12)
    assert torch.all(out[w == 0] == 0)
    # |w| = 0.5 and |w| = 1 have different supports: no finite ε w.r.t. the magnitude.
    assert float(out[w == 1.0].abs().max()) > float(mech.magnitude_support(0.5)[1])


def _ratio_bound_holds(mech, w1, w2, edges, epsilon):
    x1 = _draws(mech, (w1,), seed=3)[0]
    x2 = _draws(mech, (w2,), seed=4)[0]
    h1 = torch.histogram(x1, bins=edges)[0]
    h2 = torch.histogram(x2, bins=edges)[0]
    ok = (h1 > 1000) & (h2 > 1000)
    assert ok.sum() >= 2
    ratio = torch.maximum(h1[ok] / h2[ok], h2[ok] / h1[ok])
    tol = 5 * torch.sqrt(1 / h1[ok] + 1 / h2[ok])
    bound = math.exp(epsilon)
    assert torch.all(ratio <= bound * (1 + tol)), (ratio.max(), bound)
    # The bound is attained (the mechanisms use their whole budget).
    assert float(ratio.max()) >= bound * (1 - float(tol.max()))


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize(
    "mech_factory",
    [
        lambda e: SymmetricPiecewiseMechanism(epsilon=e, variant="published"),
        lambda e: SymmetricPiecewiseMechanism(epsilon=e, variant="debiased"),
        lambda e: SymmetricPiecewiseMechanism(epsilon=e, variant="unbiased_c"),
        lambda e: make_local_mechanism("pnpm", epsilon=e),
    ],
    ids=["spm_published", "spm_debiased", "spm_unbiased_c", "pnpm"],
)
def test_sign_mechanisms_density_ratio(mech_factory, epsilon):
    """pdf(t*|w)/pdf(t*|−w) ≤ e^ε on a histogram (Theorem 2: the sign is ε-LDP)."""
    mech = mech_factory(epsilon)
    hi = float(mech.support(0.5)[1])
    edges = torch.linspace(-hi, hi, 41, dtype=torch.float64)
    _ratio_bound_holds(mech, 0.5, -0.5, edges, epsilon)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_duchi_and_pm_density_ratio(epsilon):
    for name in ("duchi", "pm"):
        mech = make_local_mechanism(name, epsilon=epsilon)
        b = float(mech.support(0.0)[1])
        edges = torch.linspace(-b - 1e-6, b + 1e-6, 41 if name == "pm" else 3, dtype=torch.float64)
        _ratio_bound_holds(mech, 1.0, -1.0, edges, epsilon)


def test_hm_switches_at_epsilon_star():
    assert abs(EPSILON_STAR - 0.6094) < 1e-3
    assert HybridMechanism(epsilon=0.6).alpha == 0.0
    assert HybridMechanism(epsilon=1.5).alpha == pytest.approx(1 - math.exp(-0.75))


def test_ldp_fl_centre_radius():
    mech = LDPFLMechanism(epsilon=0.6, centre=0.2, radius=0.1)
    w = torch.full((N,), 0.25, dtype=torch.float64)
    x = mech.privatize(w, generator=torch.Generator().manual_seed(5))
    assert set(torch.unique(x).tolist()) == pytest.approx(
        [0.2 - 0.1 * mech.bound, 0.2 + 0.1 * mech.bound]
    )
    assert float(x.var()) == pytest.approx(float(mech.variance(0.25)), rel=0.02)


def test_reference_values_of_notes_table():
    """Paper notes §2.4 Figure 2 reference values."""
    assert float(paper_claimed_variance(1.0, epsilon=1.5)) == pytest.approx(1.0603, abs=1e-4)
    assert float(make_local_mechanism("pm", epsilon=0.6).variance(0.5)) == pytest.approx(
        12.5605, abs=1e-3
    )
    assert float(make_local_mechanism("hm", epsilon=1.5).variance(0.25)) == pytest.approx(
        1.8922, abs=1e-3
    )
    assert float(make_local_mechanism("pnpm", epsilon=0.6).variance(1.0)) == pytest.approx(
        12.7564, abs=1e-3
    )
    spm = SymmetricPiecewiseMechanism(epsilon=0.3, variant="debiased")
    assert float(spm.variance(1.0)) == pytest.approx(52.3654, abs=1e-3)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_epsilon_rejected(bad):
    with pytest.raises(ValueError, match="strategy.epsilon"):
        make_local_mechanism("spm", epsilon=bad)


def test_registry_refuses_a_taken_name_and_builds_a_registered_one(monkeypatch):
    from fl_lightning.privacy.mechanisms import registry
    from fl_lightning.privacy.mechanisms.ldp import LocalLaplace
    from fl_lightning.privacy.mechanisms.registry import (
        local_mechanism_names,
        register_local_mechanism,
    )

    monkeypatch.setattr(registry, "_BUILDERS", dict(registry._BUILDERS))  # restored after

    assert local_mechanism_names()[:2] == ("spm", "pnpm") and "gaussian" in local_mechanism_names()
    with pytest.raises(ValueError, match="'pm' is already registered"):
        register_local_mechanism("pm", lambda *, epsilon, variant, delta: LocalLaplace(epsilon))
    register_local_mechanism(
        "test_laplace_x2", lambda *, epsilon, variant, delta: LocalLaplace(epsilon=2 * epsilon)
    )
    assert make_local_mechanism("test_laplace_x2", epsilon=0.5).epsilon == 1.0


def test_unknown_names_rejected():
    with pytest.raises(ValueError, match="strategy.mechanism"):
        make_local_mechanism("nope", epsilon=1.0)
    with pytest.raises(ValueError, match="strategy.variant"):
        make_local_mechanism("spm", epsilon=1.0, variant="nope")


SIGN_CASES = [c for c in CASES if c[0] not in ("laplace", "gaussian")]


@pytest.mark.parametrize("epsilon", [0.6, 3.9])
@pytest.mark.parametrize(("name", "variant"), SIGN_CASES)
def test_float32_fast_path_moments(name, variant, epsilon):
    """float32 inputs take the 23-bit SFC64 bit path (``fast_random``); same checks."""
    mech = make_local_mechanism(name, epsilon=epsilon, variant=variant)
    ws = UNIT_WS if mech.unit_input else RAW_WS
    w = torch.tensor(ws, dtype=torch.float32).repeat_interleave(N)
    g = torch.Generator().manual_seed(zlib.crc32(f"f32/{name}/{variant}/{epsilon}".encode()))
    out = mech.privatize(w, generator=g)
    assert out.dtype == torch.float32
    out = out.double().view(len(ws), N)
    for i, wi in enumerate(ws):
        x = out[i]
        mean, var = float(mech.mean(wi)), float(mech.variance(wi))
        se = math.sqrt(var / N)
        assert abs(float(x.mean()) - mean) <= max(0.02 * abs(mean), 5 * se), (wi, mean)
        assert abs(float(x.var()) - var) <= 0.02 * var, (wi, var)
        lo, hi = mech.support(wi)
        assert float(x.min()) >= float(lo) * (1 + 1e-6) - 1e-6
        assert float(x.max()) <= float(hi) * (1 + 1e-6) + 1e-6


@pytest.mark.parametrize("n", [1001, 200_001])  # torch.rand and SFC64 paths (fast_random)
@pytest.mark.parametrize(("name", "variant"), SIGN_CASES)
def test_same_generator_state_same_output_input_unchanged(name, variant, n):
    mech = make_local_mechanism(name, epsilon=1.5, variant=variant)
    x = torch.linspace(-1, 1, n).view(1, -1)
    before = x.clone()
    a = mech.privatize(x, generator=torch.Generator().manual_seed(11))
    b = mech.privatize(x, generator=torch.Generator().manual_seed(11))
    c = mech.privatize(x, generator=torch.Generator().manual_seed(12))
    assert a.shape == x.shape and torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(x, before)
