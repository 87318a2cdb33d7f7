"""The Laplace sampler keeps the pure-DP promise: no point masses, no holes in the support
(Mironov 2012). The first test fails on the float32 inverse-CDF sampler this replaced (its
draws past ~5b sit on a sparse set of a few thousand values, so they repeat); the others pin
the discrete Laplace's full support, its law and the shared output lattice of neighbours."""

from __future__ import annotations

import math

import torch

from fl_lightning.privacy.mechanisms import laplace


def test_laplace_release_has_no_point_masses_in_its_tail() -> None:
    """2²¹ float32 releases of 0 at scale 1: the ones with |y| in [7, 11] (about 1,900) must
    be (nearly) all distinct, as draws of a continuous law rounded to float32 are (expected
    repeated pairs ≈ 0.3). An inverse-CDF sampler on 24-bit uniforms reaches only ~7,500
    values there per side, so hundreds repeat: outputs a neighbour (shifted by Δ) cannot hit."""
    n = 1 << 21
    g = torch.Generator().manual_seed(1234)
    y = laplace.LaplaceMechanism(epsilon=1.0, sensitivity=1.0).privatize(
        torch.zeros(n), generator=g
    )
    tail = y[(y.abs() >= 7) & (y.abs() <= 11)]
    assert 1_400 < tail.numel() < 2_500  # ≈ n·e⁻⁷: the tail is there at all
    _, counts = torch.unique(tail, return_counts=True)
    repeats = int((counts - 1).sum())
    assert repeats <= 3, f"{repeats} repeated values among {tail.numel()} tail draws"


def test_discrete_laplace_reaches_every_integer_and_has_its_law() -> None:
    """K ∝ e^{−|k|/t} on all of ℤ: every integer in [−4t, 4t] appears (no gap, also across the
    upper part's trusted bound 4t), the tail past 4t has its mass 2r^{4t+1}/(1 + r) within
    10 %, and E|K| = 2r/(1 − r²) (r = e^{−1/t}) within 1 %."""
    t, n = 256, 1 << 20
    g = torch.Generator().manual_seed(7)
    k = laplace.discrete_laplace((n,), steps=t, generator=g)
    assert k.dtype == torch.int64
    seen = torch.unique(k)
    window = seen[seen.abs() <= 4 * t]
    assert window.numel() == 8 * t + 1  # every integer of [-4t, 4t]
    r = math.exp(-1 / t)
    tail = float((k.abs() > 4 * t).double().mean())
    expected_tail = 2 * r ** (4 * t + 1) / (1 + r)
    assert abs(tail / expected_tail - 1) < 0.1
    assert int(k.abs().max()) > 6 * t  # past the bound: the memoryless redraw ran
    mean_abs = float(k.abs().double().mean())
    assert abs(mean_abs / (2 * r / (1 - r * r)) - 1) < 0.01
    _, counts = torch.unique(k, return_counts=True)
    p0 = (1 - r) / (1 + r)  # the largest point probability
    assert int(counts.max()) < n * p0 + 6 * math.sqrt(n * p0)


def test_neighbours_share_the_output_lattice() -> None:
    """Releases of x and of a neighbour x + Δ lie on the same grid Λℤ (float64 keeps it
    exact), on which the discrete Laplace gives every point positive probability: no output
    of one is impossible under the other. The scale used is ≥ the requested one."""
    g = torch.Generator().manual_seed(3)
    x = torch.rand(10_000, generator=g, dtype=torch.float64)
    x2 = x.clone()
    x2[0] += 0.7317
    scale = 0.37
    resolution, steps = laplace.laplace_grid(scale, x.numel())
    assert steps * resolution >= scale
    assert steps * resolution <= scale * (1 + 2.0**-20)
    for v in (x, x2):
        y = laplace.add_laplace(v, scale=scale, generator=g)
        assert torch.equal(torch.round(y / resolution) * resolution, y)
    assert laplace.grid_epsilon_excess(scale, x.numel()) <= 2.0**-20


def test_noise_is_generator_driven_and_scaled() -> None:
    def draw(seed: int) -> torch.Tensor:
        return laplace.sample_laplace(
            (50_000,), scale=2.0, generator=torch.Generator().manual_seed(seed)
        )

    a, b = draw(5), draw(5)
    assert torch.equal(a, b)
    assert not torch.equal(a, draw(6))
    assert abs(float(a.abs().mean()) / 2.0 - 1) < 0.03  # E|Lap(b)| = b
    assert a.dtype == torch.float32
