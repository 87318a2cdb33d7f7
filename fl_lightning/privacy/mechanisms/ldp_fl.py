"""LDP-FL's weight perturbation (Sun, Qian, Chen, "LDP-FL: Practical Private Aggregation in
Federated Learning with Local Differential Privacy", IJCAI 2021, Algorithm 1 / Eq. 2).

A weight w of a layer with centre c and radius r (w ∈ [c−r, c+r]) becomes
c + r·(e^ε+1)/(e^ε−1) with probability [(w−c)(e^ε−1) + r(e^ε+1)] / [2r(e^ε+1)], else
c − r·(e^ε+1)/(e^ε−1): Duchi's mechanism on (w−c)/r. Unbiased, Var = r²B² − (w−c)².
The per-layer c, r are chosen by the strategy (``ranges.py``: ``adaptive`` mode); here they are
constructor arguments (defaults c = 0, r = 1, i.e. plain Duchi on [−1, 1]). Inputs outside the
range are clamped first. Sampling as in ``duchi.py`` (chunked, :mod:`fast_random` uniforms).
Sun et al.'s parameter shuffling (splitting a report across anonymous uploads) is not
implemented: the guarantee here is per coordinate, composed over d and T.
"""

from __future__ import annotations

import torch

from fl_lightning.privacy.mechanisms.duchi import DuchiMechanism, duchi_chunk
from fl_lightning.privacy.mechanisms.fast_random import ChunkedUniforms
from fl_lightning.privacy.mechanisms.ldp import as_tensor


class LDPFLMechanism(DuchiMechanism):
    """Sun et al.'s two-point mechanism on [c − r, c + r].

    Args:
        epsilon: per-coordinate ε.
        centre: c.
        radius: r > 0.
    """

    name = "ldp_fl"

    def __init__(self, *, epsilon: float, centre: float = 0.0, radius: float = 1.0) -> None:
        super().__init__(epsilon=epsilon)
        if not radius > 0:
            raise ValueError(f"strategy.radius: must be > 0, got {radius}")
        self.centre = float(centre)
        self.radius = float(radius)

    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        lo, hi = self.centre - self.radius, self.centre + self.radius
        run = ChunkedUniforms(x, generator=generator, draws=1, scratch=1)
        for c in run:
            torch.clamp(c.x, lo, hi, out=c.out)
            duchi_chunk(
                c,
                c.out,
                c.u[0],
                c.out,
                epsilon=self.epsilon,
                centre=self.centre,
                radius=self.radius,
            )
        return run.result()

    def mean(self, w: torch.Tensor | float) -> torch.Tensor:
        return as_tensor(w) * 1.0

    def variance(self, w: torch.Tensor | float) -> torch.Tensor:
        return (self.radius * self.bound) ** 2 - (as_tensor(w) - self.centre) ** 2

    def support(self, w: torch.Tensor | float) -> tuple[torch.Tensor, torch.Tensor]:
        w = as_tensor(w)
        b = self.radius * self.bound
        return torch.full_like(w, self.centre - b), torch.full_like(w, self.centre + b)
