"""Laplace noise on each upload's high loss-impact coordinates (the DP-FedSNLC approximation):
a component, not a strategy.

An APPROXIMATION built from a one-line description; no public definition exists. The
DP-FedASGP paper (Zhang et al., IEEE TC 2024, Sec. V-A, ref. [10]) describes DP-FedSNLC as
introducing "sparse noise into gradients based on clipping losses and privacy budget costs",
ascertaining "the significance of a gradient by evaluating alterations in the loss function",
and adding noise only to significant gradients (``strategies/dp_fedsnlc.py`` says where the
reference leads). Read literally, on each upload:

* clip the delta Δ to L2 norm C; the accumulated gradient is g = −Δ/η, so the first-order loss
  change of coordinate j is |g_j·Δw_j| = Δ_j²/η;
* coordinates whose loss impact is among the top ``significant_fraction`` (threshold by
  ``torch.kthvalue``) get Lap(ΔS/ε) (the Laplace mechanism, Eq. 6 of Zhang et al.); the rest
  are uploaded as they are.

Privacy: the unselected coordinates are uploaded without noise, so the run reports no guarantee
(ε = ∞) unless ``noise_unselected: true``, in which case every coordinate gets the same Laplace
noise and the defensible per-round ε (2C√d / scale, basic composition) is reported.
"""

from __future__ import annotations

import torch

from fl_lightning.privacy.accounting.events import RoundPrivacy
from fl_lightning.privacy.mechanisms.params import check_clip_norm
from fl_lightning.privacy.mechanisms.upload import HighImpactLaplace
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.strategies.upload_privacy import UploadPrivacy

NO_NOISE_INSIGNIFICANT = (
    "coordinates with small loss impact are uploaded without noise (DP-FedSNLC approximation); "
    "set strategy.noise_unselected: true for a defensible ε"
)


class HighImpactNoise(UploadPrivacy):
    """Approximate DP-FedSNLC: Laplace noise only on the high loss-impact coordinates of each
    clipped upload.

    Args:
        epsilon: per-round ε of the Laplace noise (scale ΔS/ε).
        clip_norm: C.
        significant_fraction: share of coordinates treated as significant (default 0.1).
        sensitivity: ΔS; ``None`` = C.
        noise_unselected: noise every coordinate (the sound variant).
    """

    def __init__(
        self,
        *,
        epsilon: float = 0.5,
        clip_norm: float = 1.0,
        significant_fraction: float = 0.1,
        sensitivity: float | None = None,
        noise_unselected: bool = False,
    ) -> None:
        if epsilon <= 0:
            raise ValueError(f"strategy.epsilon: must be > 0, got {epsilon}")
        check_clip_norm(clip_norm)
        if not 0 < significant_fraction <= 1:
            raise ValueError(
                f"strategy.significant_fraction: must be in (0, 1], got {significant_fraction}"
            )
        if sensitivity is not None:
            check_clip_norm(sensitivity, "strategy.sensitivity")
        self.epsilon = float(epsilon)
        self.clip_norm = float(clip_norm)
        self.significant_fraction = float(significant_fraction)
        self.sensitivity = self.clip_norm if sensitivity is None else float(sensitivity)
        self.noise_unselected = noise_unselected
        self.num_parameters = 0

    @property
    def private(self) -> bool:
        """True: the upload is noised (the guarantee itself may be none; ``round_privacy``)."""
        return True

    @property
    def scale(self) -> float:
        """The Laplace scale ΔS/ε."""
        return self.sensitivity / self.epsilon

    def setup(self, spec: FederationSpec) -> None:
        """Keeps d (the sound variant's ε is 2C√d / scale)."""
        self.num_parameters = spec.num_parameters

    @property
    def mechanism(self) -> HighImpactLaplace:
        """The clip, the masked Laplace noise and the event of one upload
        (``privacy/mechanisms/upload.py``)."""
        return HighImpactLaplace(
            clip_norm=self.clip_norm,
            scale=self.scale,
            significant_fraction=self.significant_fraction,
            noise_unselected=self.noise_unselected,
            no_guarantee=NO_NOISE_INSIGNIFICANT,
        )

    def privatize(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        """Clip to C, then Lap(ΔS/ε) on the coordinates with the largest Δ_j² (∝ loss impact)."""
        out = self.mechanism.release(update.delta, generator=generator)
        update.delta = out.value
        update.metrics["delta_norm"] = out.norm
        update.metrics["selected_fraction"] = out.observed["selected_fraction"]
        return update

    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        """No guarantee (unnoised coordinates leave the client), or with ``noise_unselected``
        one local release per client at the defensible 2C√d / scale (the mechanism's event)."""
        mechanism = self.mechanism
        release = mechanism.event(self.num_parameters)
        if release is None:
            return RoundPrivacy(no_guarantee=mechanism.no_guarantee)
        return RoundPrivacy(local={cid: [release] for cid in ctx.cohort})


__all__ = ["NO_NOISE_INSIGNIFICANT", "HighImpactNoise"]
