"""Clip, then local noise on every coordinate of each upload: a component, not a strategy.

The DP-FedAvg baseline of the DP-FedASGP paper (Zhang et al., IEEE TC 2024, Sec. V-A, baseline
[24]): "each client uses a clipping threshold C for gradient clipping, followed by adding noise
N". Each client clips its delta to L2 norm C and adds, to every coordinate, Laplace noise
Lap(ΔS/ε) (the paper's Laplace mechanism, Eq. 6) or Gaussian noise with the paper's Eq. (2)
σ = (ΔS/ε)·sqrt(2 ln(1.25/ζ)), ζ = e^{−ε}.

Privacy reported to the accountant (local ledger, basic composition over rounds), per round:

* Laplace: pure ε = 2C√d / b, the L1 diameter of the L2 ball of radius C over the scale b
  (what the release defends for any two clipped updates; the paper's per-coordinate ε is
  logged as ``strategy/paper_epsilon_round``);
* Gaussian: a Gaussian release of noise multiplier σ/(2C) (L2 sensitivity 2C), composed over
  rounds as Gaussian events on the run's accountant at the run's δ; its one-upload (ε, δ) at
  ``strategy.delta`` (dp-accounting RDP) is what ``round_epsilon`` logs.

``DPFedAvgLocal`` is FedAvg (weights n_i/n) holding one; ``FedAvg`` given one as
``strategy.init_args.local_dp`` is the same run.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from fl_lightning.privacy.accounting.events import RoundPrivacy
from fl_lightning.privacy.mechanisms.params import check_clip_norm
from fl_lightning.privacy.mechanisms.upload import (
    ClippedGaussian,
    ClippedLaplace,
    gaussian_release_epsilon,
)
from fl_lightning.records import ClientUpdate, Metrics, RoundContext
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.strategies.upload_privacy import UploadPrivacy

NoiseKind = Literal["laplace", "gaussian"]


def paper_gaussian_sigma(*, epsilon: float, sensitivity: float) -> float:
    """Eq. (2) of Zhang et al.: σ = (ΔS/ε)·sqrt(2 ln(1.25/ζ)) with ζ = e^{−ε}."""
    return sensitivity / epsilon * math.sqrt(2.0 * (math.log(1.25) + epsilon))


class ClippedUploadNoise(UploadPrivacy):
    """Clip each upload to C, then Laplace or Gaussian noise on every coordinate.

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
        if epsilon <= 0:
            raise ValueError(f"strategy.epsilon: must be > 0, got {epsilon}")
        check_clip_norm(clip_norm)
        if noise not in ("laplace", "gaussian"):
            raise ValueError(f"strategy.noise: expected 'laplace' or 'gaussian', got {noise!r}")
        if sensitivity is not None:
            check_clip_norm(sensitivity, "strategy.sensitivity")
        if not 0 < delta < 1:
            raise ValueError(f"strategy.delta: must be in (0, 1), got {delta}")
        self.epsilon = float(epsilon)
        self.clip_norm = float(clip_norm)
        self.noise = noise
        self.sensitivity = self.clip_norm if sensitivity is None else float(sensitivity)
        self.delta = float(delta)
        self.num_parameters = 0

    @property
    def private(self) -> bool:
        return True

    @property
    def scale(self) -> float:
        """Laplace scale b = ΔS/ε or Gaussian σ of Eq. (2)."""
        if self.noise == "laplace":
            return self.sensitivity / self.epsilon
        return paper_gaussian_sigma(epsilon=self.epsilon, sensitivity=self.sensitivity)

    def setup(self, spec: FederationSpec) -> None:
        """Keeps d (the Laplace ε is 2C√d / b) and refuses DP-SGD clients: the noise is the
        upload's, not the local steps'."""
        self.num_parameters = spec.num_parameters
        spec.refuse_dp_sgd("dp_fedavg_local adds local noise")

    @property
    def mechanism(self) -> ClippedLaplace | ClippedGaussian:
        """The clip and the noise of one upload, with its event (``privacy/mechanisms/upload.py``):
        Lap(b) at the defensible 2C√d / b, or N(0, σ²) of multiplier σ/(2C)."""
        if self.noise == "laplace":
            return ClippedLaplace(clip_norm=self.clip_norm, scale=self.scale)
        return ClippedGaussian(clip_norm=self.clip_norm, std=self.scale, delta=self.delta)

    def privatize(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        """Δ ← Δ·min(1, C/‖Δ‖₂) + noise, every coordinate Lap(b) or N(0, σ²) (Eq. 6 / Eq. 2)."""
        out = self.mechanism.release(update.delta, generator=generator)
        update.delta = out.value
        update.metrics["delta_norm"] = out.norm
        update.metrics["clipped"] = float(out.norm > self.clip_norm)
        return update

    def round_epsilon(self) -> float:
        """The ε (at δ for Gaussian) one upload defends (module docstring)."""
        event = self.mechanism.event(self.num_parameters)
        assert event is not None
        return event.epsilon

    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        """One local release per dispatched client, the mechanism's event: Laplace at
        ``round_epsilon``; Gaussian with its σ/Δ, composed by the accountant as a Gaussian event
        at the run's δ."""
        release = self.mechanism.event(self.num_parameters)
        assert release is not None
        return RoundPrivacy(local={cid: [release] for cid in ctx.cohort})

    def metrics(self, ctx: RoundContext) -> Metrics:
        """The paper's per-round ε, beside the defensible one the accountant composes."""
        return {"paper_epsilon_round": self.epsilon}


__all__ = ["ClippedUploadNoise", "gaussian_release_epsilon", "paper_gaussian_sigma"]
