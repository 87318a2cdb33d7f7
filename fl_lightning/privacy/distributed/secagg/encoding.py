"""A clipped float update as integers mod 2^b, and back (Kairouz, Liu & Steinke 2021, §4,
"Algorithm 1/2": the client and server procedures of the distributed discrete Gaussian).

Client side, on a vector x with ‖x‖₂ ≤ C:

1. pad to d = the next power of two and **rotate**: x ↦ H D x / √d, D a diagonal of random
   signs from a seed every party shares, H the Walsh–Hadamard matrix (flattens the vector, so
   that the modular clipping of step 4 rarely bites; Lemma 29);
2. **scale** by s = 1/γ (the grid's resolution γ);
3. **round** to the integers by conditional randomized rounding: each coordinate up with
   probability its fractional part, the whole vector redrawn until ‖x̃‖₂ ≤ the bound of
   :func:`rounded_l2_bound` (Prop. 22: with β ∈ [0, 1) the bound holds for an unconditional
   draw with probability ≥ 1 − β, so the expected number of draws is ≤ 1/(1 − β));
4. (noise is added here, by the mechanism) and **wrap** mod 2^b.

Server side, on the modular sum: map [0, 2^b) to [−2^(b−1), 2^(b−1)), divide by s, rotate
back (D H y / √d), drop the padding. The sum is exact as long as no coordinate of the true
integer sum leaves [−2^(b−1), 2^(b−1)); :func:`heuristic_scale` picks s so that k standard
deviations of it fit (Kairouz et al., §4.4, Eq. 61).
"""

from __future__ import annotations

import math

import torch


def padded_dimension(d: int) -> int:
    """The next power of two ≥ d (the Hadamard transform's size)."""
    return 1 << max(0, (int(d) - 1).bit_length())


def walsh_hadamard(x: torch.Tensor) -> torch.Tensor:
    """H x / √d for a 1-D float tensor of power-of-two length: orthonormal and its own
    inverse (the fast transform, d log d additions)."""
    d = x.numel()
    y = x.reshape(1, d)
    h = 1
    while h < d:
        y = y.view(-1, 2, h)
        y = torch.stack((y[:, 0] + y[:, 1], y[:, 0] - y[:, 1]), dim=1)
        h *= 2
    return y.reshape(d) / math.sqrt(d)


def rotation_signs(d: int, *, generator: torch.Generator) -> torch.Tensor:
    """The diagonal D of random ±1 of the randomized Hadamard transform."""
    bits = torch.randint(0, 2, (d,), generator=generator, device=generator.device)
    return (bits * 2 - 1).to(torch.float64)


def rotate(x: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
    """H D x / √d of ``x`` zero-padded to ``signs``' length (float64)."""
    padded = torch.zeros(signs.numel(), dtype=torch.float64)
    padded[: x.numel()] = x.double()
    return walsh_hadamard(padded * signs)


def unrotate(y: torch.Tensor, signs: torch.Tensor, dim: int) -> torch.Tensor:
    """D H y / √d, the first ``dim`` coordinates: the inverse of :func:`rotate`."""
    return (walsh_hadamard(y.double()) * signs)[:dim]


def rounded_l2_bound(l2: float, beta: float, dim: int) -> float:
    """The L2 bound after conditional randomized rounding of a d-vector of L2 norm ≤ ``l2``
    (Kairouz et al. 2021, Thm. 1 of the arXiv version / Prop. 22):
    min(l2 + √d, √(l2² + d/4 + √(2 ln(1/β))·(l2 + √d/2))); β = 0: the first."""
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"strategy.beta: must be in [0, 1), got {beta}")
    bound = l2 + math.sqrt(dim)
    if beta == 0.0:
        return bound
    squared = (
        l2**2 + 0.25 * dim + math.sqrt(2.0 * math.log(1.0 / beta)) * (l2 + 0.5 * math.sqrt(dim))
    )
    return min(bound, math.sqrt(squared))


def rounded_l1_bound(rounded_l2: float, dim: int) -> float:
    """L1 ≤ √d·L2, and on integers also L1 ≤ L2²."""
    return rounded_l2 * min(math.sqrt(dim), rounded_l2)


def conditional_round(
    x: torch.Tensor, bound: float, *, generator: torch.Generator, max_tries: int = 1000
) -> torch.Tensor:
    """Randomized rounding of ``x`` (float64) to int64, redrawn until ‖x̃‖₂ ≤ ``bound``
    (Prop. 22; module docstring, step 3)."""
    floor = torch.floor(x)
    frac = x - floor
    for _ in range(max_tries):
        up = torch.rand(x.shape, dtype=torch.float64, generator=generator, device=x.device) < frac
        rounded = floor + up.double()
        if float(torch.linalg.vector_norm(rounded)) <= bound:
            return rounded.to(torch.int64)
    raise RuntimeError(
        f"conditional rounding: no draw within the bound {bound:.4g} in {max_tries} tries "
        "(the input exceeds the clip norm the bound assumes)"
    )


def wrap(x: torch.Tensor, bits: int) -> torch.Tensor:
    """x mod 2^b in [0, 2^b) (int64)."""
    return torch.remainder(x, 1 << bits)


def center(x: torch.Tensor, bits: int) -> torch.Tensor:
    """[0, 2^b) ↦ [−2^(b−1), 2^(b−1)) (int64): the representative a decoded sum is read as."""
    half = 1 << (bits - 1)
    return torch.remainder(x + half, 1 << bits) - half


def heuristic_scale(
    *, local_std: float, clip_norm: float, bits: int, clients: float, dim: int, k: float
) -> float:
    """s = 1/γ such that k standard deviations of the encoded, noisy sum fit in 2^b
    (Kairouz et al. 2021, §4.4, Eq. 61; ``accounting_utils.heuristic_scale_factor``, ρ = 1,
    the sum's norm bounded by nC): solves 2^b = 2k·√((nC)²/d + (γ²/4 + σ²)·n) / γ.

    Raises ``ValueError`` on ``strategy.bits`` when 2^(2b) < n k² (no scale fits)."""
    numer_sq = 2.0 ** (2 * bits) - clients * k**2
    if numer_sq <= 0:
        raise ValueError(
            f"strategy.bits: {bits} bits cannot hold {k:g} standard deviations of the sum of "
            f"{clients:g} clients' rounding (2^(2b) < n·k²); raise the bits"
        )
    denom = 2.0 * k * math.sqrt(clip_norm**2 * clients**2 / dim + clients * local_std**2)
    return math.sqrt(numer_sq) / denom


__all__ = [
    "center",
    "conditional_round",
    "heuristic_scale",
    "padded_dimension",
    "rotate",
    "rotation_signs",
    "rounded_l1_bound",
    "rounded_l2_bound",
    "unrotate",
    "walsh_hadamard",
    "wrap",
]
