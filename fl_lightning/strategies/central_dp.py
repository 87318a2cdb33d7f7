"""Client-level DP placed on the aggregate: a component, not a strategy.

McMahan, Ramage, Talwar, Zhang 2018 (DP-FedAvg), Alg. 1: each client's delta is clipped to L2
norm C on the client; the server sums the clipped deltas, adds N(0, σ²C²) once and divides by
the *expected* cohort size qN (the fixed-denominator estimator, so one client changes the sum
by at most C). Privacy: one subsampled Gaussian per round, built by the Gaussian mechanism from
the cohort sampler's sampling: Poisson cohorts at rate q (add/remove one client, McMahan et al.'s
analysis; the default under ``model.sampling: auto``) or fixed-size cohorts of m of N without
replacement (replace-one client, sensitivity 2C; Wang, Balle, Kasiviswanathan 2019), never one
accounted as the other.

A :class:`CentralGaussian` sits beside the aggregation the way Flower's server-side DP
wrappers do: any strategy that sums (``Strategy(central_dp=...)``; FedAvg, DP-FedProx, or a
user's) clips each upload in ``process_update``, sums the clipped deltas in
``partial_aggregate`` (one all-reduce under DDP) and releases the noisy mean in ``finalize``,
with the noise drawn from the generator every rank shares. ``DPFedAvg`` is FedAvg holding one.
"""

from __future__ import annotations

import torch

from fl_lightning.privacy.accounting.events import RoundPrivacy
from fl_lightning.privacy.mechanisms.clipping import clip_by_l2_norm_
from fl_lightning.privacy.mechanisms.gaussian import GaussianMechanism
from fl_lightning.privacy.mechanisms.params import GaussianParams
from fl_lightning.records import ClientUpdate, Metrics, RoundContext
from fl_lightning.strategies.placement import CentralPrivacy, CohortSpec


class CentralGaussian(CentralPrivacy):
    """Clip every client's delta to C, add N(0, σ²C²) to their sum, divide by qN.

    Args:
        clip_norm: C, the L2 bound on each client's delta.
        noise_multiplier: σ, noise std in units of C. ``None``: calibrated from
            ``privacy.target_epsilon`` over ``trainer.max_steps`` rounds.
    """

    def __init__(self, *, clip_norm: float = 1.0, noise_multiplier: float | None = 1.0) -> None:
        params = GaussianParams(clip_norm, noise_multiplier)  # validated once, there
        self.clip_norm = params.clip_norm
        self.noise_multiplier = params.noise_multiplier

    def setup(self, spec: CohortSpec) -> None:
        """Fixes an unset σ from the run's target: one subsampled Gaussian a round for
        ``spec.rounds`` rounds of the run's cohort sampling."""
        self.noise_multiplier = spec.cohort_noise_multiplier(self.noise_multiplier)

    @property
    def mechanism(self) -> GaussianMechanism:
        """The Gaussian on the sum of clipped deltas (sensitivity C)."""
        assert self.noise_multiplier is not None, "noise multiplier not calibrated yet"
        return GaussianMechanism(noise_multiplier=self.noise_multiplier, sensitivity=self.clip_norm)

    def clip(self, update: ClientUpdate) -> ClientUpdate:
        """Alg. 1's client side: Δ ← Δ·min(1, C/‖Δ‖₂), in place."""
        norm = clip_by_l2_norm_(update.delta, self.clip_norm)
        update.metrics["delta_norm"] = norm
        update.metrics["clipped"] = float(norm > self.clip_norm)
        return update

    def release(
        self, total: torch.Tensor, ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        """(Σ Δ_k + N(0, σ²C²)) / qN from the all-process sum of clipped deltas."""
        noisy = self.mechanism.privatize(total, generator=generator)
        return noisy.div_(ctx.expected_cohort_size), {}

    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        """One client-level subsampled Gaussian, sampled as the cohort sampler did."""
        return RoundPrivacy(client_level=[self.mechanism.cohort_event(ctx.cohort_sampling())])


__all__ = ["CentralGaussian"]
