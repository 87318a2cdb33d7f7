"""Duchi et al.'s one-dimensional mechanism (Duchi, Jordan, Wainwright, JASA 2018; as stated
by Wang et al., ICDE 2019, §III-A).

Input t ∈ [−1, 1]; output +B with probability (e^ε−1)t/(2e^ε+2) + 1/2, else −B,
B = (e^ε+1)/(e^ε−1). Unbiased, Var = B² − t². ε-LDP (ratio of the two output probabilities).
"""

from __future__ import annotations

import math

import torch

from fl_lightning.privacy.mechanisms.ldp import LocalMechanism, as_tensor, uniform


def duchi_sample(t: torch.Tensor, *, epsilon: float, generator: torch.Generator) -> torch.Tensor:
    a = math.exp(epsilon)
    b = (a + 1.0) / (a - 1.0)
    u = uniform(t, generator)
    threshold = t * ((a - 1.0) / (2.0 * a + 2.0)) + 0.5
    pos = torch.full_like(t, b)
    return torch.where(u < threshold, pos, pos.neg())


class DuchiMechanism(LocalMechanism):
    """Duchi et al. two-point mechanism on [−1, 1]."""

    name = "duchi"

    @property
    def bound(self) -> float:
        a = math.exp(self.epsilon)
        return (a + 1.0) / (a - 1.0)

    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        return duchi_sample(x, epsilon=self.epsilon, generator=generator)

    def mean(self, w):
        return as_tensor(w) * 1.0

    def variance(self, w):
        return self.bound**2 - as_tensor(w) ** 2

    def support(self, w):
        w = as_tensor(w)
        return torch.full_like(w, -self.bound), torch.full_like(w, self.bound)
