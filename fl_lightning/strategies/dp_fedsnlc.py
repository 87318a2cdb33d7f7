"""DP-FedSNLC — an APPROXIMATION built from a one-line description; no public definition exists.

The DP-FedASGP paper (Zhang et al., IEEE TC 2024, Sec. V-A, ref. [10]) describes DP-FedSNLC as
introducing "sparse noise into gradients based on clipping losses and privacy budget costs",
ascertaining "the significance of a gradient by evaluating alterations in the loss function",
and adding noise only to significant gradients. Ref. [10] (Ding et al., CIKM 2020) is a different
paper, and no paper defining DP-FedSNLC was found (notes §3). This module implements the
description literally and is labelled an approximation everywhere it appears: clip each delta to
C, Laplace noise on the top ``significant_fraction`` of coordinates by first-order loss impact
Δ_j²/η, FedAvg weights n_i/n.

That is FedAvg holding a :class:`~fl_lightning.strategies.high_impact_noise.HighImpactNoise`
as ``local_dp`` (where the selection, the noise and the privacy statement live: no guarantee,
ε = ∞, unless ``noise_unselected: true``). This class only takes its settings as flat
arguments, the form of the shipped and stored configs
(``configs/strategy/dp_fedasgp/dp_fedsnlc.yaml``); ``FedAvg`` with ``local_dp:
HighImpactNoise`` is the same run.
"""

from __future__ import annotations

from fl_lightning.strategies.base import Strategy
from fl_lightning.strategies.high_impact_noise import NO_NOISE_INSIGNIFICANT, HighImpactNoise


class DPFedSNLC(Strategy):
    """Approximate DP-FedSNLC: Laplace noise only on high loss-impact coordinates.

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
        noisy = HighImpactNoise(
            epsilon=epsilon,
            clip_norm=clip_norm,
            significant_fraction=significant_fraction,
            sensitivity=sensitivity,
            noise_unselected=noise_unselected,
        )
        super().__init__(weighting="num_examples", local_dp=noisy)

    @property
    def uploads(self) -> HighImpactNoise:
        """``local_dp``, always a ``HighImpactNoise`` here."""
        assert isinstance(self.local_dp, HighImpactNoise)
        return self.local_dp

    @property
    def scale(self) -> float:
        """The Laplace scale ΔS/ε."""
        return self.uploads.scale


__all__ = ["NO_NOISE_INSIGNIFICANT", "DPFedSNLC"]  # the reason re-exported for old imports
