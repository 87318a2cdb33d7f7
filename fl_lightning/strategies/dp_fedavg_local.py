"""DP-FedAvg as the DP-FedASGP paper runs it: local noise on every coordinate.

Zhang et al. (IEEE TC 2024, Sec. V-A, baseline [24]): "each client uses a clipping threshold C
for gradient clipping, followed by adding noise N". Each client clips its delta to L2 norm C and
adds, to every coordinate, Laplace noise Lap(ΔS/ε) (Eq. 6) or Gaussian noise with the paper's
Eq. (2) σ; the server averages with FedAvg weights n_i/n.

That is FedAvg holding a
:class:`~fl_lightning.strategies.clipped_upload_noise.ClippedUploadNoise` as ``local_dp`` (where
the clip, the noise, the per-round ε reported to the accountant and
``strategy/paper_epsilon_round`` live). This class only takes the mechanism's settings as flat
arguments, the form of the shipped and stored configs
(``configs/strategy/dp_fedasgp/dp_fedavg_local.yaml``; the sweep store's run ids hash them);
``FedAvg`` with ``local_dp: ClippedUploadNoise`` is the same run.
"""

from __future__ import annotations

from fl_lightning.strategies.base import Strategy
from fl_lightning.strategies.clipped_upload_noise import (
    ClippedUploadNoise,
    NoiseKind,
    gaussian_release_epsilon,
    paper_gaussian_sigma,
)


class DPFedAvgLocal(Strategy):
    """Clip to C, then local Laplace or Gaussian noise on every coordinate; FedAvg weights.

    Args:
        epsilon: the paper's per-round budget ε.
        clip_norm: C.
        noise: ``laplace`` (default; the paper's mechanism is Laplace) or ``gaussian`` (Eq. 2).
        sensitivity: ΔS of the noise scale; ``None`` = C.
        delta: δ of the reported per-round (ε, δ) for Gaussian noise.
    """

    def __init__(
        self,
        *,
        epsilon: float = 0.5,
        clip_norm: float = 1.0,
        noise: NoiseKind = "laplace",
        sensitivity: float | None = None,
        delta: float = 1e-5,
    ) -> None:
        noisy = ClippedUploadNoise(
            epsilon=epsilon, clip_norm=clip_norm, noise=noise, sensitivity=sensitivity, delta=delta
        )
        super().__init__(weighting="num_examples", local_dp=noisy)

    @property
    def uploads(self) -> ClippedUploadNoise:
        """``local_dp``, always a ``ClippedUploadNoise`` here."""
        assert isinstance(self.local_dp, ClippedUploadNoise)
        return self.local_dp

    @property
    def scale(self) -> float:
        """Laplace scale b = ΔS/ε or Gaussian σ of Eq. (2)."""
        return self.uploads.scale

    def round_epsilon(self) -> float:
        return self.uploads.round_epsilon()


# the Eq. (2) helpers re-exported for old imports (tests, benchmarks)
__all__ = ["DPFedAvgLocal", "gaussian_release_epsilon", "paper_gaussian_sigma"]
