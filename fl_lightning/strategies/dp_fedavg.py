"""DP-FedAvg with client-level DP (McMahan, Ramage, Talwar, Zhang 2018, Alg. 1).

Each client's delta is clipped to L2 norm C (client side); the server sums the clipped deltas,
adds N(0, σ²C²) once and divides by the *expected* cohort size (the fixed-denominator estimator,
so one client changes the sum by at most C). Privacy: one subsampled Gaussian per round, built
by the Gaussian mechanism from the cohort sampler's sampling: Poisson cohorts at rate q
(add/remove one client, McMahan et al.'s analysis; the default under ``model.sampling: auto``)
or fixed-size cohorts of m of N without replacement (replace-one client, sensitivity 2C;
Wang, Balle, Kasiviswanathan 2019), never one accounted as the other.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from fl_lightning.privacy.clipping import clip_by_l2_norm_
from fl_lightning.privacy.events import RoundPrivacy
from fl_lightning.privacy.mechanisms.gaussian import GaussianMechanism
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.base import Metrics, Strategy
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.utils.rng import generator_for


class DPFedAvg(Strategy):
    amplified_by_sampling = True

    """Client-level DP-FedAvg.

    Args:
        clip_norm: C, the L2 bound on each client's delta.
        noise_multiplier: σ, noise std in units of C. ``None``: calibrated from
            ``privacy.target_epsilon`` over ``trainer.max_steps`` rounds.
    """

    def __init__(self, *, clip_norm: float = 1.0, noise_multiplier: float | None = 1.0) -> None:
        super().__init__(weighting="uniform")
        if clip_norm <= 0:
            raise ValueError(f"strategy.clip_norm: must be > 0, got {clip_norm}")
        if noise_multiplier is not None and noise_multiplier < 0:
            raise ValueError(f"strategy.noise_multiplier: must be >= 0, got {noise_multiplier}")
        self.clip_norm = clip_norm
        self.noise_multiplier = noise_multiplier

    def setup_federation(self, spec: FederationSpec) -> None:
        """Fixes an unset σ from the run's target: one subsampled Gaussian a round for
        ``spec.rounds`` rounds of the run's cohort sampling."""
        super().setup_federation(spec)
        self.noise_multiplier = spec.cohort_noise_multiplier(self.noise_multiplier)

    @property
    def is_private(self) -> bool:
        return True

    @property
    def mechanism(self) -> GaussianMechanism:
        """The central Gaussian on the sum of clipped deltas (sensitivity C)."""
        assert self.noise_multiplier is not None, "noise multiplier not calibrated yet"
        return GaussianMechanism(noise_multiplier=self.noise_multiplier, sensitivity=self.clip_norm)

    def process_update(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        norm = clip_by_l2_norm_(update.delta, self.clip_norm)
        update.metrics["delta_norm"] = norm
        update.metrics["clipped"] = float(norm > self.clip_norm)
        return update

    def partial_aggregate(self, updates: Iterable[ClientUpdate], ctx: RoundContext) -> torch.Tensor:
        """This process's sum of clipped deltas (Alg. 1's Σ Δ_k over its share of the cohort)."""
        total = torch.zeros_like(ctx.global_params)  # the sum alone: finalize divides by qN
        for update in updates:
            total.add_(update.delta)
        return total

    def finalize(
        self, reduced: torch.Tensor, ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        """(Σ Δ_k + N(0, σ²C²)) / qN: one central Gaussian, from the generator all ranks share."""
        noisy = self.mechanism.privatize(reduced, generator=generator)
        return noisy.div_(ctx.expected_cohort_size), {}

    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        return RoundPrivacy(client_level=[self.mechanism.cohort_event(ctx.cohort_sampling())])

    def state_dict(self) -> dict:
        return {"noise_multiplier": self.noise_multiplier}

    def load_state_dict(self, state_dict: dict) -> None:
        self.noise_multiplier = state_dict["noise_multiplier"]


__all__ = ["DPFedAvg", "clip_by_l2_norm_", "generator_for"]  # clip re-exported for old imports
