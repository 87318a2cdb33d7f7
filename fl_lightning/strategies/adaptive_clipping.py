"""DP-FedAvg with adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy, NeurIPS 2021).

Instead of a fixed clip C, the clip follows the γ-quantile of the clients' update norms, itself
estimated with DP from the same cohort (Alg. 1 / Alg. 2 of the paper):

* each client clips its delta to the current C and reports the bit b_i = 1[‖Δ_i‖ ≤ C], centred
  as b_i − ½ so that one client moves the count by at most ½;
* the server sums the clipped deltas with Gaussian noise of std σ_Δ·C, and the centred bits with
  noise of std σ_b, and divides both by the expected cohort size m = qN (the fixed-denominator
  estimator of McMahan et al. 2018): b̃ = (Σ(b_i − ½) + N(0, σ_b²))/m + ½;
* the clip moves geometrically towards the quantile (Sec. 2, Eq. 3):
  C ← C · exp(−η_C (b̃ − γ)).

Privacy (Sec. 3, Thm. 1): the two sums are one Gaussian query on the vector (ΣΔ/C, Σ(b−½)) with
unit-variance noise after scaling by (σ_Δ, 2σ_b), whose L2 sensitivity is
√(σ_Δ⁻² + (2σ_b)⁻²). So a round is one client-level Gaussian of effective multiplier
σ = (σ_Δ⁻² + (2σ_b)⁻²)^(−1/2): given the σ the user asks for (or the run's target calibrates)
and σ_b, the sum's multiplier is σ_Δ = (σ⁻² − (2σ_b)⁻²)^(−1/2), and the accountant sees
exactly the event of a fixed-clip DP-FedAvg round at σ. Under fixed-size cohorts (replace-one)
both sensitivities double, so the same holds. The paper's default σ_b = m/20 costs a few
percent more noise on the sum (σ_Δ ≈ 1.02·σ for σ = 1, m = 100).

Use it in place of ``CentralGaussian`` on any summing strategy::

    strategy:
      class_path: fl_lightning.strategies.FedAvg       # or DPFedProx, or a user's
      init_args:
        weighting: uniform
        central_dp:
          class_path: fl_lightning.strategies.adaptive_clipping.AdaptiveClipping
          init_args: {target_quantile: 0.5, noise_multiplier: 1.0}
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

from fl_lightning.privacy.accounting.events import RoundPrivacy
from fl_lightning.privacy.mechanisms.clipping import clip_by_l2_norm_
from fl_lightning.privacy.mechanisms.gaussian import GaussianMechanism
from fl_lightning.privacy.mechanisms.params import GaussianParams
from fl_lightning.records import ClientUpdate, Metrics, RoundContext
from fl_lightning.strategies.placement import CentralPrivacy, CohortSpec

COUNT_SENSITIVITY = 0.5
"""One client moves the centred count Σ(b_i − ½) by at most ½ (add/remove)."""


def sum_noise_multiplier(noise_multiplier: float, count_noise_std: float) -> float:
    """σ_Δ = (σ⁻² − (2σ_b)⁻²)^(−1/2), the multiplier left for the sum of clipped deltas when the
    round as a whole is a Gaussian of multiplier σ (Andrew et al. 2021, Sec. 3). Needs
    2σ_b > σ (else the count alone would spend the whole budget); σ = 0 gives 0."""
    if noise_multiplier == 0:
        return 0.0
    if 2.0 * count_noise_std <= noise_multiplier:
        raise ValueError(
            f"strategy.central_dp.count_noise_std: must be > noise_multiplier / 2 = "
            f"{noise_multiplier / 2:g} so that the count leaves budget for the sum, got "
            f"{count_noise_std:g}"
        )
    return (noise_multiplier**-2 - (2.0 * count_noise_std) ** -2) ** -0.5


class AdaptiveClipping(CentralPrivacy):
    """Clip to an adaptive estimate of the γ-quantile of update norms; one Gaussian a round.

    Args:
        clip_norm: C₀, the initial clip (the paper's default 0.1).
        target_quantile: γ, the fraction of clients whose update should be left unclipped.
        learning_rate: η_C of the geometric update C ← C·exp(−η_C (b̃ − γ)) (the paper's 0.2).
        noise_multiplier: σ, the effective multiplier of the whole round (the privacy cost is
            a DP-FedAvg round at σ). ``None``: calibrated from ``privacy.target_epsilon``.
        count_noise_std: σ_b, the std of the noise on the count of unclipped clients.
            ``None``: the paper's m/20 with m the expected cohort size, but at least σ (a small
            cohort's m/20 would leave the sum no budget; at σ_b = σ the sum's multiplier is
            σ/√(3/4) ≈ 1.15σ).
    """

    def __init__(
        self,
        *,
        clip_norm: float = 0.1,
        target_quantile: float = 0.5,
        learning_rate: float = 0.2,
        noise_multiplier: float | None = 1.0,
        count_noise_std: float | None = None,
    ) -> None:
        GaussianParams(clip_norm, noise_multiplier, prefix="strategy.central_dp")
        if not 0.0 < target_quantile < 1.0:
            raise ValueError(
                f"strategy.central_dp.target_quantile: must be in (0, 1), got {target_quantile}"
            )
        if learning_rate <= 0:
            raise ValueError(f"strategy.central_dp.learning_rate: must be > 0, got {learning_rate}")
        if count_noise_std is not None and count_noise_std <= 0:
            raise ValueError(
                f"strategy.central_dp.count_noise_std: must be > 0, got {count_noise_std}"
            )
        self.clip_norm = float(clip_norm)
        self.target_quantile = target_quantile
        self.learning_rate = learning_rate
        self.noise_multiplier = noise_multiplier
        self.count_noise_std = count_noise_std

    def setup(self, spec: CohortSpec) -> None:
        """Fixes an unset σ from the run's target (one client-level Gaussian a round) and an
        unset σ_b to max(m/20, σ); refuses a σ_b that leaves the sum no budget."""
        self.noise_multiplier = spec.cohort_noise_multiplier(self.noise_multiplier)
        if self.count_noise_std is None:
            sampling = spec.sampling
            m = sampling.rate * sampling.population
            self.count_noise_std = max(m / 20.0, self.noise_multiplier)
        sum_noise_multiplier(self.noise_multiplier, self.count_noise_std)

    @property
    def sum_noise_multiplier(self) -> float:
        """σ_Δ, the multiplier of the noise on the sum of clipped deltas (in units of C)."""
        assert self.noise_multiplier is not None, "noise multiplier not calibrated yet"
        assert self.count_noise_std is not None, "count noise not set yet"
        return sum_noise_multiplier(self.noise_multiplier, self.count_noise_std)

    def clip(self, update: ClientUpdate) -> ClientUpdate:
        """Δ ← Δ·min(1, C/‖Δ‖₂) in place; ``clipped`` = 1 − b_i."""
        norm = clip_by_l2_norm_(update.delta, self.clip_norm)
        update.metrics["delta_norm"] = norm
        update.metrics["clipped"] = float(norm > self.clip_norm)
        return update

    def partial(self, updates: Iterable[ClientUpdate], ctx: RoundContext) -> torch.Tensor:
        """[Σ Δ_k, Σ(b_k − ½)] of this process's clipped uploads (one all-reduce)."""
        d = ctx.global_params.numel()
        buf = torch.zeros(d + 1, dtype=ctx.global_params.dtype, device=ctx.global_params.device)
        for update in updates:
            buf[:d].add_(update.delta)
            buf[d] += 0.5 - update.metrics["clipped"]
        return buf

    def release(
        self, reduced: torch.Tensor, ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        """(ΣΔ + N(0, σ_Δ²C²))/m, then the clip's step from b̃ (noise drawn in that order)."""
        assert self.count_noise_std is not None, "count noise not set yet"
        d = reduced.numel() - 1
        m = ctx.expected_cohort_size
        used = self.clip_norm
        total = GaussianMechanism(noise_multiplier=self.sum_noise_multiplier, sensitivity=used)
        delta = total.privatize(reduced[:d], generator=generator).div_(m)
        count = GaussianMechanism(
            noise_multiplier=self.count_noise_std / COUNT_SENSITIVITY,
            sensitivity=COUNT_SENSITIVITY,
        )
        below = float(count.privatize(reduced[d:], generator=generator)) / m + 0.5
        self.clip_norm = used * math.exp(-self.learning_rate * (below - self.target_quantile))
        return delta, {"clip_norm": used, "unclipped_fraction": below}

    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        """One client-level Gaussian of the effective σ (Thm. 1), sampled as the cohort was."""
        assert self.noise_multiplier is not None, "noise multiplier not calibrated yet"
        joint = GaussianMechanism(noise_multiplier=self.noise_multiplier)
        return RoundPrivacy(client_level=[joint.cohort_event(ctx.cohort_sampling())])

    def state_dict(self) -> dict[str, Any]:
        return {
            "noise_multiplier": self.noise_multiplier,
            "count_noise_std": self.count_noise_std,
            "clip_norm": self.clip_norm,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.noise_multiplier = state_dict["noise_multiplier"]
        self.count_noise_std = state_dict["count_noise_std"]
        self.clip_norm = state_dict["clip_norm"]


__all__ = ["AdaptiveClipping", "sum_noise_multiplier"]
