"""The Piecewise Mechanism (PM), Wang et al., "Collecting and Analyzing Multidimensional Data
with Local Differential Privacy", ICDE 2019, Algorithm 2 (one dimension).

Input t ∈ [−1, 1]; with s = e^{ε/2}, C = (s+1)/(s−1), l(t) = (C+1)t/2 − (C−1)/2,
r(t) = l(t) + C − 1: with probability s/(s+1) output U[l, r], else U([−C, l) ∪ (r, C]).
Unbiased; Var = t²/(s−1) + (s+3)/(3(s−1)²). ε-LDP (density ratio e^ε between the pieces).
One uniform per coordinate (:mod:`fast_random`, chunked) drives both the branch and the
position (conditionally uniform).
"""

from __future__ import annotations

import math

import torch

from fl_lightning.privacy.mechanisms.fast_random import (
    Chunk,
    ChunkedUniforms,
    grid_probability,
    scalar,
)
from fl_lightning.privacy.mechanisms.ldp import LocalMechanism, as_tensor


def pm_chunk(
    c: Chunk, t: torch.Tensor, u: torch.Tensor, out: torch.Tensor, *, epsilon: float
) -> None:
    """Writes PM(t) into ``out`` for one chunk; overwrites ``u``, ``c.tmp[0]``, ``c.tmp[1]``.

    The branch is selected with exact {0, 1} masks (out = inside·[u < p] + outside·[u ≥ p]);
    p is rounded down to the uniforms' grid (:func:`grid_probability`)."""
    s = math.exp(epsilon / 2.0)
    cb = (s + 1.0) / (s - 1.0)
    p = grid_probability(s / (s + 1.0), t.dtype)
    left, mask = c.tmp[0], c.tmp[1]
    torch.add(scalar(-(cb - 1.0) / 2.0, t), t, alpha=(cb + 1.0) / 2.0, out=left)
    torch.add(left, u, alpha=(cb - 1.0) / p, out=out)  # inside: U[l, r]
    torch.lt(u, scalar(p, t), out=mask)
    out.mul_(mask)
    torch.add(scalar(1.0, t), mask, alpha=-1.0, out=mask)  # [u ≥ p]
    # Outside: position v ∈ [0, C+1) on [−C, l) ∪ (r, C], skipping the interval of length C−1.
    k = (cb + 1.0) / (1.0 - p)
    torch.add(scalar(-cb - p * k, t), u, alpha=k, out=u)
    torch.ge(u, left, out=left)
    torch.add(u, left, alpha=cb - 1.0, out=u)
    torch.addcmul(out, u, mask, out=out)


def pm_sample(t: torch.Tensor, *, epsilon: float, generator: torch.Generator) -> torch.Tensor:
    run = ChunkedUniforms(t, generator=generator, draws=1, scratch=2)
    for c in run:
        pm_chunk(c, c.x, c.u[0], c.out, epsilon=epsilon)
    return run.result()


class PiecewiseMechanism(LocalMechanism):
    """Wang et al.'s PM on [−1, 1]."""

    name = "pm"

    @property
    def bound(self) -> float:
        s = math.exp(self.epsilon / 2.0)
        return (s + 1.0) / (s - 1.0)

    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        return pm_sample(x, epsilon=self.epsilon, generator=generator)

    def mean(self, w: torch.Tensor | float) -> torch.Tensor:
        return as_tensor(w) * 1.0

    def variance(self, w: torch.Tensor | float) -> torch.Tensor:
        s = math.exp(self.epsilon / 2.0)
        return as_tensor(w) ** 2 / (s - 1.0) + (s + 3.0) / (3.0 * (s - 1.0) ** 2)

    def support(self, w: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
        w = as_tensor(w)
        return torch.full_like(w, -self.bound), torch.full_like(w, self.bound)
