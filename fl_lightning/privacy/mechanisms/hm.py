"""The Hybrid Mechanism (HM), Wang et al., ICDE 2019, §III-C (Eq. 5, Lemma 4).

With probability α run PM(ε), else Duchi(ε); α = 1 − e^{−ε/2} for ε > ε* ≈ 0.61, else α = 0
(ε* = ln((−5 + 2∛(6353 − 405√241) + 2∛(6353 + 405√241))/27)). Unbiased;
Var = α·Var_PM + (1−α)·Var_Duchi (constant in t when α > 0). ε-LDP as a mixture of two
ε-LDP mechanisms chosen independently of the input. Not compared in the SPM paper.
Sampling: two uniforms per coordinate (:mod:`fast_random`): one picks PM or Duchi, the other
drives both (only the chosen output is kept, so sharing it is exact).
"""

from __future__ import annotations

import math

import torch

from fl_lightning.privacy.mechanisms.duchi import DuchiMechanism, duchi_chunk, duchi_sample
from fl_lightning.privacy.mechanisms.fast_random import (
    ChunkedUniforms,
    grid_probability,
    scalar,
)
from fl_lightning.privacy.mechanisms.ldp import LocalMechanism, as_tensor
from fl_lightning.privacy.mechanisms.pm import PiecewiseMechanism, pm_chunk

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
        alpha_t = scalar(grid_probability(self.alpha, x.dtype), x)
        run = ChunkedUniforms(x, generator=generator, draws=2, scratch=3)
        for c in run:
            choice, u = c.u
            duchi = c.tmp[2]
            # PM and Duchi share u: only one of them is kept, chosen by the independent `choice`.
            duchi_chunk(c, c.x, u, duchi, epsilon=self.epsilon)
            pm_chunk(c, c.x, u, c.out, epsilon=self.epsilon)
            use_pm, use_duchi = c.tmp[0], c.tmp[1]
            torch.lt(choice, alpha_t, out=use_pm)
            torch.ge(choice, alpha_t, out=use_duchi)
            c.out.mul_(use_pm)
            torch.addcmul(c.out, duchi, use_duchi, out=c.out)
        return run.result()

    def mean(self, w: torch.Tensor | float) -> torch.Tensor:
        return as_tensor(w) * 1.0

    def variance(self, w: torch.Tensor | float) -> torch.Tensor:
        return self.alpha * self._pm.variance(w) + (1.0 - self.alpha) * self._duchi.variance(w)

    def support(self, w: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
        w = as_tensor(w)
        b = max(self._pm.bound, self._duchi.bound)
        return torch.full_like(w, -b), torch.full_like(w, b)
