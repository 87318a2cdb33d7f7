"""σ and C as one frozen type, validated in one place.

Every Gaussian-noise component of the package has a clip C (the L2 bound that is its
sensitivity) and a noise multiplier σ (noise std in units of C). Their checks live here, once:
:func:`check_clip_norm` (C > 0) and :func:`check_noise_multiplier` (σ ≥ 0, or ``None`` for "to
be calibrated to the run's target"). Config keys users already type keep their names
(``client.dp_sgd.max_grad_norm`` for DP-SGD, ``strategy.clip_norm`` elsewhere): the field named
in the error is the caller's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


def check_clip_norm(value: float, field: str = "strategy.clip_norm") -> float:
    """C itself; ``ValueError`` naming ``field`` unless C > 0."""
    if not value > 0:
        raise ValueError(f"{field}: must be > 0, got {value}")
    return value


def check_noise_multiplier(
    value: float | None, field: str = "strategy.noise_multiplier"
) -> float | None:
    """σ itself (``None``: not calibrated yet); ``ValueError`` naming ``field`` if σ < 0."""
    if value is not None and value < 0:
        raise ValueError(f"{field}: must be >= 0, got {value}")
    return value


@dataclass(frozen=True)
class GaussianParams:
    """The clip C and noise multiplier σ of one Gaussian component, checked when built.

    Attributes:
        clip_norm: C, the L2 bound on one contribution (the sum's sensitivity).
        noise_multiplier: σ, noise std in units of C (``None`` until calibrated).
        prefix: the config path the two fields sit under, named in errors.
    """

    clip_norm: float
    noise_multiplier: float | None
    prefix: str = dataclasses.field(default="strategy", compare=False)

    def __post_init__(self) -> None:
        check_clip_norm(self.clip_norm, f"{self.prefix}.clip_norm")
        check_noise_multiplier(self.noise_multiplier, f"{self.prefix}.noise_multiplier")

    def with_noise_multiplier(self, sigma: float) -> GaussianParams:
        """The same C with σ fixed (after calibration), checked again."""
        return dataclasses.replace(self, noise_multiplier=sigma)

    @property
    def std(self) -> float:
        """σ·C, the noise standard deviation on the sum (σ must be fixed)."""
        assert self.noise_multiplier is not None, "noise multiplier not calibrated yet"
        return self.noise_multiplier * self.clip_norm


__all__ = ["GaussianParams", "check_clip_norm", "check_noise_multiplier"]
