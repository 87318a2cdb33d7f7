"""The Hybrid Mechanism (HM), Wang et al., ICDE 2019, §III-C (Eq. 5, Lemma 4).

With probability α run PM(ε), else Duchi(ε); α = 1 − e^{−ε/2} for ε > ε* ≈ 0.61, else α = 0
(ε* = ln((−5 + 2∛(6353 − 405√241) + 2∛(6353 + 405√241))/27)). Unbiased;
Var = α·Var_PM + (1−α)·Var_Duchi (constant in t when α > 0). ε-LDP as a mixture of two
ε-LDP mechanisms chosen independently of the input. Not compared in the SPM paper.
"""

from __future__ import annotations

import math

import torch

from fl_lightning.privacy.mechanisms.duchi import DuchiMechanism, duchi_sample
from fl_lightning.privacy.mechanisms.ldp import LocalMechanism, as_tensor, uniform
from fl_lightning.privacy.mechanisms.pm import PiecewiseMechanism, pm_sample

_R = math.sqrt(241.0)
EPSILON_STAR = math.log(
    (-5.0 + 2.0 * (6353.0 - 405.0 * _R) ** (1 / 3) + 2.0 * (6353.0 + 405.0 * _R) ** (1 / 3)) / 27.0
)


class HybridMechanism(LocalMechanism):
    """Wang et al.'s HM on [−1, 1]."""

    name = "hm"

    def __init__(self, *, epsilon: float) -> None:
        super().__init__(epsilon=epsilon)
        self.alpha = 1.0 - math.exp(-self.epsilon / 2.0) if self.epsilon > EPSILON_STAR else 0.0
        self._pm = PiecewiseMechanism(epsilon=self.epsilon)
        self._duchi = DuchiMechanism(epsilon=self.epsilon)

    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        if self.alpha == 0.0:
            return duchi_sample(x, epsilon=self.epsilon, generator=generator)
        use_pm = uniform(x, generator) < self.alpha
        a = pm_sample(x, epsilon=self.epsilon, generator=generator)
        b = duchi_sample(x, epsilon=self.epsilon, generator=generator)
        return torch.where(use_pm, a, b)

    def mean(self, w):
        return as_tensor(w) * 1.0

    def variance(self, w):
        return self.alpha * self._pm.variance(w) + (1.0 - self.alpha) * self._duchi.variance(w)

    def support(self, w):
        w = as_tensor(w)
        b = max(self._pm.bound, self._duchi.bound)
        return torch.full_like(w, -b), torch.full_like(w, b)
