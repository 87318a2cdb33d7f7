"""The Piecewise Mechanism (PM), Wang et al., "Collecting and Analyzing Multidimensional Data
with Local Differential Privacy", ICDE 2019, Algorithm 2 (one dimension).

Input t ∈ [−1, 1]; with s = e^{ε/2}, C = (s+1)/(s−1), l(t) = (C+1)t/2 − (C−1)/2,
r(t) = l(t) + C − 1: with probability s/(s+1) output U[l, r], else U([−C, l) ∪ (r, C]).
Unbiased; Var = t²/(s−1) + (s+3)/(3(s−1)²). ε-LDP (density ratio e^ε between the pieces).
One uniform per coordinate drives both the branch and the position (conditionally uniform).
"""

from __future__ import annotations

import math

import torch

from fl_lightning.privacy.mechanisms.ldp import LocalMechanism, as_tensor, uniform


def pm_sample(t: torch.Tensor, *, epsilon: float, generator: torch.Generator) -> torch.Tensor:
    s = math.exp(epsilon / 2.0)
    c = (s + 1.0) / (s - 1.0)
    p = s / (s + 1.0)
    u = uniform(t, generator)
    left = t * ((c + 1.0) / 2.0) - (c - 1.0) / 2.0
    inside = left + u * ((c - 1.0) / p)
    # Outside: position v ∈ [0, C+1) on [−C, l) ∪ (r, C], skipping the interval of length C−1.
    outside = (u - p) * ((c + 1.0) / (1.0 - p)) - c
    outside = torch.where(outside >= left, outside + (c - 1.0), outside)
    return torch.where(u < p, inside, outside)


class PiecewiseMechanism(LocalMechanism):
    """Wang et al.'s PM on [−1, 1]."""

    name = "pm"

    @property
    def bound(self) -> float:
        s = math.exp(self.epsilon / 2.0)
        return (s + 1.0) / (s - 1.0)

    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        return pm_sample(x, epsilon=self.epsilon, generator=generator)

    def mean(self, w):
        return as_tensor(w) * 1.0

    def variance(self, w):
        s = math.exp(self.epsilon / 2.0)
        return as_tensor(w) ** 2 / (s - 1.0) + (s + 3.0) / (3.0 * (s - 1.0) ** 2)

    def support(self, w):
        w = as_tensor(w)
        return torch.full_like(w, -self.bound), torch.full_like(w, self.bound)
