"""The Laplace mechanism (Dwork et al. 2006): pure ε-DP for L1 sensitivity Δ at scale Δ/ε,
sampled without the holes of floating-point inverse-CDF samplers (Mironov 2012).

Why not ``-b·sign(u)·ln(1 − 2|u|)``: with a float32 uniform u (24 bits) that sampler reaches
only the values whose ``1 − 2|u|`` is a multiple of 2⁻²³, so its largest finite draw is
23·ln 2·b ≈ 15.9b, the draws past ~5b are sparse (a few hundred float32 values apart at 8b) and
a clamp of the logarithm put a point mass of probability 2⁻²⁴ at −80b. ``x + noise`` then takes
values that ``x' + noise`` can never take (a neighbour shifts the sparse set), so the released
vector can rule a neighbour out and the mechanism is not ε-DP for any ε (Mironov 2012, Sec. 3).
float64 does not cure it (53 bits: largest draw 36.7b, the same sparse tail).

How (the discrete Laplace at a stated resolution, with the input snapped to its grid):

* the grid: Λ = 2^⌊log₂ b⌋ · 2⁻ᵏ with k = ⌈log₂ d⌉ + 20 clamped to [28, 46] (d coordinates), and
  t = b/Λ rounded up to a multiple of 2⁸ grid steps per scale (t ≥ 2ᵏ; the scale actually used,
  tΛ ≤ b·(1 + 2⁻²⁰), is ≥ b: never less noise);
* the input is rounded to the grid, n = round(x/Λ) (a deterministic map; each coordinate moves
  by at most Λ/2, so the L1 distance of two rounded neighbours is at most Δ + dΛ);
* the noise is K = G₁ − G₂ with G ~ Geometric(1 − e^{−1/t}): K has P(K = k) ∝ e^{−|k|/t}, the
  discrete Laplace, whose support is **all of ℤ** (no point mass, no gap, no largest value);
* the release is (n + K)·Λ in float64 (n·Λ and K·Λ are exact and IEEE addition is correctly
  rounded, so it is a function of the integer n + K), then cast to x's dtype: post-processing.

So the release is (Δ + dΛ)/(tΛ) ≤ ε + d·2⁻ᵏ ≤ ε + 2⁻²⁰-DP for ε = Δ/b and d ≤ 2²⁶ coordinates
(above that, ≤ ε + d·2⁻⁴⁶), and no output is impossible under a neighbour. The geometric draws
follow Canonne, Kamath & Steinke 2020 (Alg. 2), on blocks of s = t/2⁸: G = s·Q + L with Q of
ratio e^{−1/2⁸} (⌊−2⁸·ln U⌋ below 4·2⁸, past it 4·2⁸ plus a fresh Q: memoryless, unbounded)
and L uniform on {0, …, s − 1} kept with probability e^{−L/t} (≥ e^{−1/2⁸}, so every L is
reachable). Every draw comes from the caller's generator (``torch.randint`` for L, float64
``torch.rand`` for the rest), so the probabilities are exact up to the 2⁻⁵³ grid of the
uniforms: a relative error of the pmf ratios below 10⁻¹¹ (the smallest probability read off
that grid is 7·10⁻⁵), which adds at most d·10⁻¹¹ to ε.
"""

from __future__ import annotations

import math

import torch

from fl_lightning.privacy.mechanisms.base import Mechanism
from fl_lightning.privacy.mechanisms.params import check_clip_norm

GRID_BITS_OVER_DIMENSION = 20
"""k = ⌈log₂ d⌉ + this: the grid adds at most 2⁻ᵏ·d ≤ 2⁻²⁰ to ε (for d ≤ 2²⁶ coordinates)."""
MIN_GRID_BITS, MAX_GRID_BITS = 28, 46
"""t = b/Λ lies in [2ᵏ, 2ᵏ⁺¹]; k ≤ 46 keeps |K| < 2⁵³ (exact in float64) for V < 2⁶."""
TABLE_BITS = 8
"""The geometric's upper part Q has ratio e^{−1/2⁸}; t is a multiple of 2⁸ (s = t/2⁸)."""
TRUSTED_BLOCKS = 4
"""Q = ⌊−2⁸·ln U⌋ is used below 4·2⁸ (each value there has probability ≥ 7·10⁻⁵, so the 2⁻⁵³
grid of U misstates it by < 2·10⁻¹² relative); past it, memorylessness: 4·2⁸ + a fresh Q."""


def laplace_grid(scale: float, dimension: int) -> tuple[float, int]:
    """(Λ, t): the resolution Λ (a power of two) the release is snapped to and the scale in grid
    steps t (a multiple of 2⁸, t·Λ ≥ scale), for a vector of ``dimension`` coordinates (module
    docstring)."""
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"Laplace scale must be finite and > 0, got {scale}")
    k = math.ceil(math.log2(max(int(dimension), 1))) + GRID_BITS_OVER_DIMENSION
    k = min(max(k, MIN_GRID_BITS), MAX_GRID_BITS)
    resolution = math.ldexp(1.0, math.floor(math.log2(scale)) - k)
    block = 1 << TABLE_BITS
    return resolution, block * math.ceil(scale / resolution / block)


def grid_epsilon_excess(scale: float, dimension: int) -> float:
    """What snapping the input to the grid can add to ε = Δ/scale: dΛ/scale (≤ 2⁻²⁰ for
    d ≤ 2²⁶)."""
    resolution, _ = laplace_grid(scale, dimension)
    return dimension * resolution / scale


def _upper(n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """n draws of Q on {0, 1, …} with P(Q ≥ q) = e^{−q/2⁸}: ⌊−2⁸·ln U⌋ while below
    :data:`TRUSTED_BLOCKS`·2⁸, else that bound plus a fresh Q (unbounded support)."""
    block = 1 << TABLE_BITS
    limit = TRUSTED_BLOCKS * block
    u = torch.rand(n, generator=generator, device=device, dtype=torch.float64)
    q = torch.floor(torch.log(u).mul_(-block)).clamp_(max=limit)
    out = q.to(torch.int64)
    redo = (out == limit).nonzero().squeeze(1)
    if redo.numel():
        out[redo] = limit + _upper(redo.numel(), generator, device)
    return out


def _geometric(
    n: int, steps: int, generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    """n draws of G on {0, 1, …} (int64) with P(G = g) ∝ e^{−g/steps}, every value reachable.

    With s = steps/2⁸: G = s·Q + L, where Q has ratio e^{−1/2⁸} (:func:`_upper`) and L is
    uniform on {0, …, s − 1}, kept with probability e^{−L/steps} ≥ e^{−1/2⁸} (the rejection of
    Canonne, Kamath & Steinke 2020, Alg. 2, on blocks of s so that 99.6 % of L draws are kept).
    The probabilities are exact up to the 2⁻⁵³ grid of the float64 uniforms."""
    s = steps // (1 << TABLE_BITS)
    low = torch.randint(0, s, (n,), generator=generator, device=device)
    u = torch.rand(n, generator=generator, device=device, dtype=torch.float64)
    redo = (u >= torch.exp(low.double().div_(-steps))).nonzero().squeeze(1)
    while redo.numel():  # the rejected L (0.4 % at most), drawn again
        m = redo.numel()
        cand = torch.randint(0, s, (m,), generator=generator, device=device)
        u = torch.rand(m, generator=generator, device=device, dtype=torch.float64)
        keep = u < torch.exp(cand.double().div_(-steps))
        low[redo[keep]] = cand[keep]
        redo = redo[~keep]
    return low.add_(_upper(n, generator, device), alpha=s)


def discrete_laplace(
    shape: torch.Size | tuple[int, ...],
    *,
    steps: int,
    generator: torch.Generator,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Integers K with P(K = k) ∝ e^{−|k|/steps} on all of ℤ (G₁ − G₂, two geometrics);
    ``steps`` a multiple of 2⁸."""
    if steps <= 0 or steps % (1 << TABLE_BITS):
        raise ValueError(f"steps must be a positive multiple of {1 << TABLE_BITS}, got {steps}")
    device = torch.device(generator.device if device is None else device)
    n = math.prod(shape)
    g = _geometric(2 * n, steps, generator, device)
    return (g[:n] - g[n:]).view(tuple(shape))


def add_laplace(x: torch.Tensor, *, scale: float, generator: torch.Generator) -> torch.Tensor:
    """The release x + Lap(scale) on every coordinate, snapped to the grid of
    :func:`laplace_grid` so that every output has positive probability under every input
    (module docstring). Returns a new tensor of x's dtype and device."""
    resolution, steps = laplace_grid(scale, x.numel())
    snapped = torch.round(x.detach().double() / resolution) * resolution
    k = discrete_laplace(x.shape, steps=steps, generator=generator, device=x.device)
    return (snapped + k.double() * resolution).to(x.dtype)


def sample_laplace(
    shape: torch.Size | tuple[int, ...],
    *,
    scale: float,
    generator: torch.Generator,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Lap(0, scale) noise on the grid Λℤ of :func:`laplace_grid` (the discrete Laplace of
    scale tΛ ≥ ``scale``, every grid point reachable), on ``device`` (by default the
    generator's). For a release ``x + noise`` use :func:`add_laplace`, which also snaps x."""
    resolution, steps = laplace_grid(scale, math.prod(shape))
    k = discrete_laplace(shape, steps=steps, generator=generator, device=device)
    return (k.double() * resolution).to(dtype)


class LaplaceMechanism(Mechanism):
    """Adds Lap(0, Δ/ε) to every coordinate (:func:`add_laplace`).

    Args:
        epsilon: ε of one application.
        sensitivity: Δ, the L1 sensitivity of what is released.
    """

    def __init__(self, *, epsilon: float, sensitivity: float = 1.0) -> None:
        if epsilon <= 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon}")
        check_clip_norm(sensitivity, "sensitivity")
        self.epsilon = float(epsilon)
        self.sensitivity = float(sensitivity)

    @property
    def scale(self) -> float:
        return self.sensitivity / self.epsilon

    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        return add_laplace(x, scale=self.scale, generator=generator)
