"""Clip-then-noise mechanisms on one client's whole upload (local DP), each with its event.

Each follows the contract of ``base.py``: :meth:`~Mechanism.constrain` clips the upload to its
L2 (or L1) norm C by ``privacy/mechanisms/clipping.py``, :meth:`~Mechanism.privatize` adds the noise
in place from the client's generator, and :meth:`~Mechanism.event` is the
:class:`~fl_lightning.privacy.accounting.events.LocalRelease` of one upload, the unit being the
whole upload (any two clipped inputs of the client):

* :class:`ClippedLaplace`: Lap(b) on every coordinate (``laplace.py``'s hole-free sampler), pure
  ε = Δ₁/b with Δ₁ the L1 diameter of the clip ball: 2C√d for an L2 clip, 2C for an L1 clip;
* :class:`ClippedGaussian`: N(0, σ²) on every coordinate, a Gaussian release of multiplier
  σ/(2C) (L2 sensitivity 2C) that the accountant composes at the run's δ; its one-upload
  (ε, δ) at ``delta`` (dp-accounting RDP) is the figure logged;
* :class:`HighImpactLaplace`: the DP-FedSNLC approximation (``strategies/high_impact_noise.py``):
  Lap(b) only on the coordinates of largest Δ_j², which gives no guarantee unless every
  coordinate is noised.

A mechanism whose budget comes from a ledger (``privacy/mechanisms/local_budget.py``, ADP-FL) passes
the ledger's figures as ``charged``: the event is then that record, with the noise this mechanism
draws.
"""

from __future__ import annotations

import dataclasses

import dp_accounting
import torch

from fl_lightning.privacy.accounting.events import LocalRelease
from fl_lightning.privacy.mechanisms.base import Mechanism, Release
from fl_lightning.privacy.mechanisms.clipping import clip_by_norm_
from fl_lightning.privacy.mechanisms.gaussian import sample_gaussian
from fl_lightning.privacy.mechanisms.laplace import add_laplace
from fl_lightning.privacy.mechanisms.params import check_clip_norm
from fl_lightning.privacy.mechanisms.sparse_vector import defensible_epsilon, quantile_threshold


def gaussian_release_epsilon(*, noise_multiplier: float, delta: float) -> float:
    """ε at δ of one Gaussian release with std = noise_multiplier × L2 sensitivity (RDP)."""
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(dp_accounting.GaussianDpEvent(noise_multiplier))
    return float(accountant.get_epsilon(delta))


class ClippedUpload(Mechanism):
    """Clip the upload to Lp norm C in place (``p`` = 2, or 1 for an L1 Laplace budget)."""

    def __init__(
        self, *, clip_norm: float, p: int = 2, charged: LocalRelease | None = None
    ) -> None:
        self.clip_norm = check_clip_norm(float(clip_norm))
        self.p = p
        self.charged = charged

    def constrain(self, x: torch.Tensor) -> float:
        """x ← x·min(1, C/‖x‖_p) in place (McMahan et al. 2018, Alg. 1 ``ClipFn``)."""
        return clip_by_norm_(x, self.clip_norm, p=self.p)


class ClippedLaplace(ClippedUpload):
    """Clip to C, then x + Lap(b) on every coordinate (Dwork et al. 2006), in place.

    Args:
        clip_norm: C.
        scale: b.
        p: the clip's norm (2: Δ₁ = 2C√d; 1: Δ₁ = 2C).
        charged: the ledger's record of this upload (default: pure ε = Δ₁/b).
    """

    def __init__(
        self, *, clip_norm: float, scale: float, p: int = 2, charged: LocalRelease | None = None
    ) -> None:
        super().__init__(clip_norm=clip_norm, p=p, charged=charged)
        self.scale = float(scale)

    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        """x ← x + Lap(b), snapped to the sampler's grid (``laplace.py``); returns x."""
        return x.copy_(add_laplace(x, scale=self.scale, generator=generator))

    def epsilon(self, dimension: int) -> float:
        """Δ₁/b: 2C√d/b for an L2 clip (the L1 diameter of the L2 ball), 2C/b for an L1 clip."""
        if self.p == 1:
            return 2.0 * self.clip_norm / self.scale
        return defensible_epsilon(
            laplace_scale=self.scale, clip_norm=self.clip_norm, dimension=max(dimension, 1)
        )

    def event(self, dimension: int) -> LocalRelease | None:
        if self.charged is not None:
            return self.charged
        return LocalRelease(self.epsilon(dimension), 0.0, "upload")


class ClippedGaussian(ClippedUpload):
    """Clip to L2 norm C, then x + N(0, σ²) on every coordinate, in place.

    Args:
        clip_norm: C.
        std: σ, the noise standard deviation.
        delta: δ of the logged one-upload (ε, δ).
        charged: the ledger's record of this upload (default: the Gaussian release of
            multiplier σ/(2C), ε at ``delta`` by RDP).
        fused: add the noise as ``x.add_(unit_noise, alpha=σ)`` (one rounding per coordinate;
            the ADP-FL ledger's arithmetic, pinned by its golden run) instead of x + σ·noise.
    """

    def __init__(
        self,
        *,
        clip_norm: float,
        std: float,
        delta: float,
        charged: LocalRelease | None = None,
        fused: bool = False,
    ) -> None:
        super().__init__(clip_norm=clip_norm, charged=charged)
        self.std = float(std)
        self.delta = float(delta)
        self.fused = fused

    @property
    def noise_multiplier(self) -> float:
        """σ/(2C): two clipped uploads differ by at most 2C."""
        return self.std / (2.0 * self.clip_norm)

    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        """x ← x + N(0, σ²) on x's device; returns x."""
        if self.fused:
            noise = sample_gaussian(
                x.shape, std=1.0, generator=generator, device=x.device, dtype=x.dtype
            )
            return x.add_(noise, alpha=self.std)
        noise = sample_gaussian(x.shape, std=self.std, generator=generator, device=x.device)
        return x.add_(noise)

    def epsilon(self) -> float:
        """ε at ``delta`` of one upload (dp-accounting RDP)."""
        return gaussian_release_epsilon(noise_multiplier=self.noise_multiplier, delta=self.delta)

    def event(self, dimension: int) -> LocalRelease:
        if self.charged is not None:
            return self.charged
        return LocalRelease(self.epsilon(), self.delta, "upload", 1, self.noise_multiplier)


class HighImpactLaplace(ClippedLaplace):
    """Clip to L2 norm C, then Lap(b) on the coordinates whose loss impact Δ_j² (∝ |g_j·Δw_j|
    for plain local SGD) is in the top ``significant_fraction`` (threshold by
    ``torch.kthvalue``); the rest leave unnoised unless ``noise_unselected``.

    The Laplace noise is drawn for every coordinate (one draw, then masked), so the generator's
    draws do not depend on the selection.
    """

    def __init__(
        self,
        *,
        clip_norm: float,
        scale: float,
        significant_fraction: float,
        noise_unselected: bool,
        no_guarantee: str,
    ) -> None:
        super().__init__(clip_norm=clip_norm, scale=scale)
        self.significant_fraction = float(significant_fraction)
        self.noise_unselected = noise_unselected
        self.no_guarantee = None if noise_unselected else no_guarantee
        self.selected_fraction = float("nan")

    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        impact = x.square()
        threshold = quantile_threshold(impact, 1.0 - self.significant_fraction)
        mask = (
            impact > threshold
            if self.significant_fraction < 1
            else torch.ones_like(impact, dtype=torch.bool)
        )
        released = add_laplace(x, scale=self.scale, generator=generator)
        if not self.noise_unselected:
            released = torch.where(mask, released, x)
        self.selected_fraction = float(mask.float().mean())
        return x.copy_(released)

    def event(self, dimension: int) -> LocalRelease | None:
        """2C√d/b per upload with every coordinate noised; None (no guarantee) otherwise."""
        return super().event(dimension) if self.noise_unselected else None

    def release(self, x: torch.Tensor, *, generator: torch.Generator) -> Release:
        """As every mechanism's, with the share of coordinates selected."""
        out = super().release(x, generator=generator)
        return dataclasses.replace(out, observed={"selected_fraction": self.selected_fraction})


__all__ = [
    "ClippedGaussian",
    "ClippedLaplace",
    "ClippedUpload",
    "HighImpactLaplace",
    "gaussian_release_epsilon",
]
