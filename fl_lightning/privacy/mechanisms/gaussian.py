"""The Gaussian mechanism (Dwork & Roth 2014, Thm. A.1; Mironov 2017 for its RDP)."""

from __future__ import annotations

import math

import torch

from fl_lightning.privacy.accounting.events import CohortSampling, SampledGaussian
from fl_lightning.privacy.mechanisms.base import Mechanism, PrivacyEvent
from fl_lightning.privacy.mechanisms.clipping import clip_by_l2_norm_
from fl_lightning.privacy.mechanisms.params import check_clip_norm, check_noise_multiplier


def classic_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float) -> float:
    """σ = √(2 ln(1.25/δ))·Δ/ε, the classic calibration (valid for ε < 1; Dwork & Roth A.1)."""
    if epsilon <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon


def analytic_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float) -> float:
    """The smallest σ for which one Gaussian release with L2 sensitivity Δ is (ε, δ)-DP, for
    every ε > 0 (the analytic Gaussian mechanism, Balle & Wang 2018, Thm. 8), computed by
    dp-accounting's exact Gaussian privacy-loss distribution (pessimistic discretisation)."""
    from dp_accounting.pld import accountant, common

    if epsilon <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    params = common.DifferentialPrivacyParameters(epsilon, delta)
    return float(
        accountant.get_smallest_gaussian_noise(params, num_queries=1, sensitivity=sensitivity)
    )


def sample_gaussian(
    shape: torch.Size | tuple[int, ...],
    *,
    std: float,
    generator: torch.Generator,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Draws N(0, std²) per entry on ``device`` (by default the generator's: a generator draws
    only on its own device type); the one Gaussian sampler of the package's mechanisms."""
    device = generator.device if device is None else device
    return torch.randn(shape, generator=generator, device=device, dtype=dtype).mul_(std)


class GaussianMechanism(Mechanism):
    """Adds N(0, (z·Δ)²) to every coordinate.

    Args:
        noise_multiplier: z, the noise standard deviation in units of the L2 sensitivity.
        sensitivity: Δ, the L2 sensitivity of the input (the clip norm for a clipped update).
        clip_norm: when set, :meth:`constrain` clips the input to this L2 norm first (a client's
            own clip; Δ = C for add/remove, 2C for two clipped vectors). ``None``: the input is
            already bounded (a sum of clipped deltas).
    """

    def __init__(
        self, *, noise_multiplier: float, sensitivity: float = 1.0, clip_norm: float | None = None
    ) -> None:
        check_noise_multiplier(noise_multiplier, "noise_multiplier")
        check_clip_norm(sensitivity, "sensitivity")
        if clip_norm is not None:
            check_clip_norm(clip_norm)
        self.noise_multiplier = float(noise_multiplier)
        self.sensitivity = float(sensitivity)
        self.clip_norm = clip_norm
        self._std: float | None = None

    @classmethod
    def with_std(
        cls, std: float, *, sensitivity: float = 1.0, clip_norm: float | None = None
    ) -> GaussianMechanism:
        """The mechanism that draws N(0, std²) exactly (a std fixed by a paper's formula, e.g.
        NbAFL's σ_U), with multiplier z = std/Δ for its event."""
        mechanism = cls(
            noise_multiplier=std / sensitivity, sensitivity=sensitivity, clip_norm=clip_norm
        )
        mechanism._std = float(std)
        return mechanism

    @property
    def std(self) -> float:
        """z·Δ (or the std given to :meth:`with_std`)."""
        if self._std is not None:
            return self._std
        return self.noise_multiplier * self.sensitivity

    def constrain(self, x: torch.Tensor) -> float:
        """x ← x·min(1, C/‖x‖₂) in place when ``clip_norm`` is set (returns ‖x‖₂ before)."""
        if self.clip_norm is None:
            return math.nan
        return clip_by_l2_norm_(x, self.clip_norm)

    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        """x + N(0, std²), the noise drawn on the generator's device (a generator draws only
        there) in x's dtype and moved to x's."""
        if self.std == 0:
            return x.clone()
        noise = sample_gaussian(x.shape, std=self.std, generator=generator, dtype=x.dtype)
        return x + noise.to(x.device)

    def event(self, dimension: int) -> PrivacyEvent | None:
        """One Gaussian of multiplier z, before any sampling (the placement adds it:
        :meth:`cohort_event`)."""
        return SampledGaussian(self.noise_multiplier, 1.0)

    def cohort_event(self, sampling: CohortSampling, steps: int = 1) -> SampledGaussian:
        """The client-level event of this mechanism on a sum over a cohort drawn by
        ``sampling`` (each client's contribution bounded by ``sensitivity``): the only way a
        strategy obtains one, so the sampling can never be misstated."""
        return SampledGaussian.for_cohort(self.noise_multiplier, sampling, steps)
