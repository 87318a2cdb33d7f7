"""The Laplace mechanism (Dwork et al. 2006): pure ε-DP for L1 sensitivity Δ at scale Δ/ε."""

from __future__ import annotations

import torch

from fl_lightning.privacy.mechanisms.base import Mechanism


def sample_laplace(
    shape: torch.Size | tuple[int, ...],
    *,
    scale: float,
    generator: torch.Generator,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Draws Lap(0, scale) by inverse CDF from one uniform draw per entry, on ``device`` (by
    default the generator's: a generator draws only on its own device type)."""
    device = generator.device if device is None else device
    u = torch.rand(shape, generator=generator, device=device, dtype=dtype) - 0.5
    # -b·sign(u)·ln(1 − 2|u|); clamp keeps ln finite when u is exactly ±0.5.
    return -scale * torch.sign(u) * torch.log1p(-2.0 * u.abs()).clamp(min=-80.0)


class LaplaceMechanism(Mechanism):
    """Adds Lap(0, Δ/ε) to every coordinate.

    Args:
        epsilon: ε of one application.
        sensitivity: Δ, the L1 sensitivity of what is released.
    """

    def __init__(self, *, epsilon: float, sensitivity: float = 1.0) -> None:
        if epsilon <= 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon}")
        if sensitivity <= 0:
            raise ValueError(f"sensitivity must be > 0, got {sensitivity}")
        self.epsilon = float(epsilon)
        self.sensitivity = float(sensitivity)

    @property
    def scale(self) -> float:
        return self.sensitivity / self.epsilon

    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        return x + sample_laplace(
            x.shape, scale=self.scale, generator=generator, device=x.device, dtype=x.dtype
        )
