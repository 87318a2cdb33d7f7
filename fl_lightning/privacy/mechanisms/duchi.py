"""Duchi et al.'s one-dimensional mechanism (Duchi, Jordan, Wainwright, JASA 2018; as stated
by Wang et al., ICDE 2019, §III-A).

Input t ∈ [−1, 1]; output +B with probability (e^ε−1)t/(2e^ε+2) + 1/2, else −B,
B = (e^ε+1)/(e^ε−1). Unbiased, Var = B² − t². ε-LDP (ratio of the two output probabilities).

Sampling: one uniform u per coordinate from :mod:`fast_random`, processed in chunks; the output
is c − rB + 2rB·[u < threshold] (a {0, 1} mask, no ``torch.where``), with c = 0, r = 1 here and
the layer centre/radius for LDP-FL.
"""

from __future__ import annotations

import math

import torch

from fl_lightning.privacy.mechanisms.fast_random import Chunk, ChunkedUniforms, scalar
from fl_lightning.privacy.mechanisms.ldp import LocalMechanism, as_tensor


def duchi_chunk(
    c: Chunk,
    t: torch.Tensor,
    u: torch.Tensor,
    out: torch.Tensor,
    *,
    epsilon: float,
    centre: float = 0.0,
    radius: float = 1.0,
) -> None:
    """Writes centre + radius·Duchi((t − centre)/radius) into ``out`` (``c.tmp[0]``: scratch).

    ``t`` must already lie in [centre − radius, centre + radius]."""
    a = math.exp(epsilon)
    b = (a + 1.0) / (a - 1.0)
    k = (a - 1.0) / (2.0 * a + 2.0) / radius
    thr = c.tmp[0]
    torch.add(scalar(0.5 - k * centre, t), t, alpha=k, out=thr)  # P(+B | t)
    torch.lt(u, thr, out=thr)
    torch.add(scalar(centre - radius * b, t), thr, alpha=2.0 * radius * b, out=out)


def duchi_sample(t: torch.Tensor, *, epsilon: float, generator: torch.Generator) -> torch.Tensor:
    run = ChunkedUniforms(t, generator=generator, draws=1, scratch=1)
    for c in run:
        duchi_chunk(c, c.x, c.u[0], c.out, epsilon=epsilon)
    return run.result()


class DuchiMechanism(LocalMechanism):
    """Duchi et al. two-point mechanism on [−1, 1]."""

    name = "duchi"

    @property
    def bound(self) -> float:
        a = math.exp(self.epsilon)
        return (a + 1.0) / (a - 1.0)

    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        return duchi_sample(x, epsilon=self.epsilon, generator=generator)

    def mean(self, w: torch.Tensor | float) -> torch.Tensor:
        return as_tensor(w) * 1.0

    def variance(self, w: torch.Tensor | float) -> torch.Tensor:
        return self.bound**2 - as_tensor(w) ** 2

    def support(self, w: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
        w = as_tensor(w)
        return torch.full_like(w, -self.bound), torch.full_like(w, self.bound)
