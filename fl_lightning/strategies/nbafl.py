"""NbAFL, noising before model aggregation (Wei, Li, Ding, Ma, Yang, Farokhi, Jin, Quek, Poor
2020, "Federated Learning with Differential Privacy: Algorithms and Performance Analysis",
IEEE TIFS 15; Algorithm 1, Theorems 1–2). The Fig. 8 baseline of DPFL-AGN.

Each client trains locally (plain SGD), clips its *parameters* w ← w / max(1, ‖w‖/C), adds
uplink noise N(0, σ_U² I) and uploads; the server averages with p_i = |D_i|/|D| and adds
downlink noise N(0, σ_D² I) before broadcasting.

* Theorem 1 (uplink): σ_U = c·L·Δs_U/ε, c = √(2 ln(1.25/δ)), Δs_U = 2C/m, m = the smallest
  local dataset size.
* Theorem 2 (downlink): σ_D = 2cC·√(T² − L²N)/(m·N·ε) if T > L√N, else 0.

**Reading of L.** L is the number of exposures of a client's parameters, i.e. how many times
it uploads. With all N clients in every round (as in DPFL-AGN) L = T (the planned rounds,
``trainer.max_steps``), so T > L√N never holds and σ_D = 0. ``exposures`` overrides L (e.g.
FederatedScope / FedML substitute the clients per round, which makes downlink noise appear).

**Guarantee.** ``variant: published`` reports what the paper claims: local (ε, δ)-DP per client
after L exposures, recorded as ε/L and δ/L per upload (basic composition sums them back to
(ε, δ)). Two gaps, stated in the run's metrics and ``docs/dpfl_agn.md``: (i) Δs_U = 2C/m holds
for an average of m clipped per-sample terms, not for parameters after many local SGD steps on
a non-convex model; the only sensitivity the algorithm enforces is 2C (two clipped parameter
vectors); ``strategy/epsilon_sound`` logs the RDP ε of the same noise at sensitivity 2C; (ii)
the classic Gaussian bound gives (ε/L, δ) per upload, so basic composition gives δ·L, not δ.
``variant: corrected`` calibrates σ_U = z·2C with z chosen by the RDP accountant so that L
uploads of the un-subsampled Gaussian give (ε, δ); that is client-level DP (a client's whole
dataset) and is what the accountant reports.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import torch

from fl_lightning.privacy.accounting.analysis import calibrate_repeated_gaussian, epsilon
from fl_lightning.privacy.accounting.events import CohortSampling, RoundPrivacy
from fl_lightning.privacy.guarantee.server_view import ServerView
from fl_lightning.privacy.mechanisms.gaussian import GaussianMechanism
from fl_lightning.privacy.mechanisms.params import check_clip_norm
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.base import Metrics, Strategy, StrategyTraits
from fl_lightning.strategies.spec import FederationSpec

EVERY_CLIENT = CohortSampling("poisson", 1.0, 1)
"""NbAFL's clients all upload in every round: no sampling, no amplification."""

PUBLISHED_GAP = (
    "NbAFL as published: Theorem 1 calibrates to sensitivity 2C/m, which the algorithm does "
    "not enforce (only ||w|| <= C is: sensitivity 2C), and its classic Gaussian bound composed "
    "over L uploads gives delta*L, not delta; the sound epsilon of the same noise is logged as "
    "strategy/epsilon_sound (variant: corrected reports it as the guarantee)"
)


def nbafl_c(delta: float) -> float:
    """c = √(2 ln(1.25/δ)) (Wei et al. 2020, Theorem 1)."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"strategy.delta: must be in (0, 1), got {delta}")
    return math.sqrt(2.0 * math.log(1.25 / delta))


def uplink_sigma(*, c: float, exposures: int, clip_norm: float, min_size: int, eps: float) -> float:
    """σ_U = c·L·Δs_U/ε with Δs_U = 2C/m (Theorem 1)."""
    return c * exposures * (2.0 * clip_norm / min_size) / eps


def downlink_sigma(
    *,
    c: float,
    rounds: int,
    exposures: int,
    num_clients: int,
    clip_norm: float,
    min_size: int,
    eps: float,
) -> float:
    """σ_D = 2cC·√(T² − L²N)/(m·N·ε) when T > L√N, else 0 (Theorem 2)."""
    if rounds <= exposures * math.sqrt(num_clients):
        return 0.0
    return (
        2.0
        * c
        * clip_norm
        * math.sqrt(rounds**2 - exposures**2 * num_clients)
        / (min_size * num_clients * eps)
    )


class NbAFL(Strategy):
    """Noising before model aggregation.

    Args:
        clip_norm: C, the bound on each uploaded parameter vector's L2 norm.
        epsilon: ε of the whole run (None: ``privacy.target_epsilon``).
        delta: δ (fixes c = √(2 ln(1.25/δ))).
        exposures: L (None: the planned rounds T = ``trainer.max_steps``; see module doc).
        variant: ``published`` (Theorem 1's σ_U, the paper's claimed local (ε, δ)) or
            ``corrected`` (σ_U calibrated by RDP for sensitivity 2C, client-level DP).
    """

    def __init__(
        self,
        *,
        clip_norm: float,
        epsilon: float | None = None,
        delta: float = 1e-5,
        exposures: int | None = None,
        variant: Literal["published", "corrected"] = "published",
    ) -> None:
        super().__init__(weighting="num_examples")
        check_clip_norm(clip_norm)
        if epsilon is not None and epsilon <= 0:
            raise ValueError(f"strategy.epsilon: must be > 0, got {epsilon}")
        if exposures is not None and exposures < 1:
            raise ValueError(f"strategy.exposures: must be >= 1, got {exposures}")
        if variant not in ("published", "corrected"):
            raise ValueError(
                f"strategy.variant: expected 'published' or 'corrected', got {variant!r}"
            )
        self.clip_norm = clip_norm
        self.epsilon = epsilon
        self.delta = delta
        self.c = nbafl_c(delta)
        self.exposures = exposures
        self.variant = variant
        self.accountant = "rdp"
        self.run_delta = delta
        self.sigma_u: float | None = None
        self.sigma_d: float = 0.0
        self.L: int | None = None
        self.uploads = 0

    # -- set-up ------------------------------------------------------------------------------
    def setup_federation(self, spec: FederationSpec) -> None:
        super().setup_federation(spec)
        spec.refuse_dp_sgd("NbAFL perturbs the uploaded parameters, not the gradients")
        spec.server.require_model_averaging("NbAFL")
        if self.epsilon is None:
            if spec.privacy.epsilon is None:
                raise ValueError("strategy.epsilon: unset, so privacy.target_epsilon is needed")
            self.epsilon = spec.privacy.epsilon
        self.accountant = spec.privacy.accountant
        self.run_delta = spec.privacy.delta  # the sound ε is printed at the run's δ
        if self.sigma_u is None and self.num_clients:  # σ_U, σ_D need ε, N, m, T
            self.configure(
                num_clients=self.num_clients, min_size=spec.min_client_size, rounds=spec.rounds
            )

    def configure(self, *, num_clients: int, min_size: int, rounds: int) -> None:
        """Fixes σ_U and σ_D from N, m = min |D_i| and T (Theorems 1–2)."""
        assert self.epsilon is not None
        L = self.exposures or rounds
        if self.variant == "published":
            self.sigma_u = uplink_sigma(
                c=self.c,
                exposures=L,
                clip_norm=self.clip_norm,
                min_size=min_size,
                eps=self.epsilon,
            )
        else:
            z = calibrate_repeated_gaussian(
                L,
                target_epsilon=self.epsilon,
                delta=self.delta,
                accountant=self.accountant,
                field="strategy.epsilon",
            )
            self.sigma_u = z * 2.0 * self.clip_norm
        self.sigma_d = downlink_sigma(
            c=self.c,
            rounds=rounds,
            exposures=L,
            num_clients=num_clients,
            clip_norm=self.clip_norm,
            min_size=min_size,
            eps=self.epsilon,
        )
        self.L = L

    def process_update(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        w = ctx.global_params + update.delta
        out = self.uplink_mechanism.release(w, generator=generator)  # Eq. 8 clip, then n_U
        update.delta = out.value.sub_(ctx.global_params)
        update.metrics["param_norm"] = out.norm
        update.metrics["clipped"] = float(out.norm > self.clip_norm)
        return update

    # -- server side -------------------------------------------------------------------------
    def finalize(
        self, reduced: torch.Tensor, ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        """The weighted mean of the uploads plus the downlink noise n_D ~ N(0, σ_D² I)
        (Theorem 2), drawn once from the generator every rank shares."""
        mean, metrics = super().finalize(reduced, ctx, generator=generator)
        if self.sigma_d > 0:
            # Not accounted: the uplink event bounds every release (post-processing).
            mean = GaussianMechanism.with_std(self.sigma_d).privatize(mean, generator=generator)
        return mean, metrics

    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        assert self.sigma_u is not None and self.epsilon is not None
        if self.variant == "published":
            return RoundPrivacy(no_guarantee=PUBLISHED_GAP)
        # Every client uploads every round (no sampling): one Gaussian with multiplier
        # σ_U/(2C) relative to the enforced sensitivity 2C of two clipped parameter vectors.
        return RoundPrivacy(client_level=[self.uplink_mechanism.cohort_event(EVERY_CLIENT)])

    @property
    def uplink_mechanism(self) -> GaussianMechanism:
        """Clip the parameters to C (Eq. 8: w / max(1, ‖w‖/C)), then N(0, σ_U²): multiplier
        σ_U/(2C) for the enforced sensitivity 2C of two clipped parameter vectors."""
        assert self.sigma_u is not None
        return GaussianMechanism.with_std(
            self.sigma_u, sensitivity=2.0 * self.clip_norm, clip_norm=self.clip_norm
        )

    @property
    def server_view(self) -> ServerView:
        """What the server receives: each client's clipped weights with the uplink noise."""
        return ServerView("noised uploads")

    @property
    def traits(self) -> StrategyTraits:
        bound = None  # once set up, σ_U and σ_D are fixed from T (Theorems 1-2), ε split over L
        if self.L is not None:
            bound = f"NbAFL fixes σ_U and σ_D for L = {self.L} exposures over the planned rounds"
        return dataclasses.replace(
            super().traits,
            private=True,
            horizon_bound=bound,
        )

    def after_round(self, ctx: RoundContext, aggregate: torch.Tensor) -> Metrics:
        assert self.sigma_u is not None
        self.uploads += 1
        metrics = {"sigma_uplink": self.sigma_u, "sigma_downlink": self.sigma_d}
        if self.variant == "published":
            events = [self.uplink_mechanism.cohort_event(EVERY_CLIENT, steps=self.uploads)]
            metrics["epsilon_sound"] = epsilon(events, self.run_delta, self.accountant)
            metrics["epsilon_paper"] = float(self.epsilon or math.nan)
        return metrics

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "sigma_u": self.sigma_u,
            "sigma_d": self.sigma_d,
            "L": getattr(self, "L", None),
            "uploads": self.uploads,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.epsilon = state_dict["epsilon"]
        self.sigma_u = state_dict["sigma_u"]
        self.sigma_d = state_dict["sigma_d"]
        self.L = state_dict["L"]
        self.uploads = int(state_dict["uploads"])


__all__ = ["NbAFL", "downlink_sigma", "nbafl_c", "uplink_sigma"]
