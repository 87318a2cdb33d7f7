"""FedSMP: federated learning with sparsified model perturbation (Hu, Guo, Gong, IEEE TMC
23(8), 2024, arXiv:2202.07178, Alg. 1).

Client: local SGD gives Δ_i; keep k = ⌈ratio·d⌉ coordinates — ``rand_k`` with a mask shared by the
cohort (derived from (seed, round)), or ``top_k`` by magnitude (the variant the DP-FedASGP paper
compares against); clip the kept part to L2 norm C and add N(0, σ²C²) on the kept coordinates
only. Server: average over the cohort (the paper divides by the number of sampled clients).

Privacy: each client's own noise protects its clipped, sparsified update (sensitivity C), and
clients are sampled at rate q, so each round is one subsampled Gaussian (σ, q) for the
accountant (RDP/PRV/PLD) at client level — the guarantee of the released global model (the
threat model of both papers). ``rand_k`` gets it. ``top_k`` chooses the kept indices from the
update and uploads them without noise, so it gets no formal guarantee and says so
(``variant``-style honesty; run ``rand_k`` for the sound version).
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from fl_lightning.privacy.accounting.analysis import refuse_sigma_and_epsilon
from fl_lightning.privacy.accounting.events import RoundPrivacy
from fl_lightning.privacy.guarantee.server_view import ServerView
from fl_lightning.privacy.mechanisms.gaussian import GaussianMechanism
from fl_lightning.privacy.mechanisms.params import check_clip_norm, check_noise_multiplier
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.base import Strategy, StrategyTraits
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.utils.rng import generator_for

Sparsifier = Literal["top_k", "rand_k"]
TOP_K_LEAK = (
    "FedSMP top_k keeps the k largest coordinates of each update and uploads their indices "
    "without noise; use strategy.sparsifier: rand_k for the subsampled-Gaussian guarantee"
)


def keep_mask(
    x: torch.Tensor, *, k: int, sparsifier: Sparsifier, generator: torch.Generator
) -> torch.Tensor:
    """Indices of the k kept coordinates (top-k by |x|, or k uniform ones from ``generator``)."""
    if sparsifier == "top_k":
        return torch.topk(x.abs(), k, sorted=False).indices
    return torch.randperm(x.numel(), generator=generator, device=x.device)[:k]


class FedSMP(Strategy):
    """Sparsified model perturbation.

    Args:
        sparsifier: ``top_k`` or ``rand_k``.
        ratio: k/d (default 0.1; not given by the DP-FedASGP paper).
        clip_norm: C.
        noise_multiplier: σ; ``None`` = calibrated (RDP/PRV/PLD, the run's accountant) to
            ``epsilon`` over ``trainer.max_steps`` rounds, or to ``privacy.target_epsilon``.
        epsilon: the run's target ε for the calibration (so sweeps set one key for every
            method of the DP-FedASGP comparison).
    """

    def __init__(
        self,
        *,
        sparsifier: Sparsifier = "top_k",
        ratio: float = 0.1,
        clip_norm: float = 1.0,
        noise_multiplier: float | None = None,
        epsilon: float | None = None,
    ) -> None:
        super().__init__(weighting="uniform")
        if sparsifier not in ("top_k", "rand_k"):
            raise ValueError(
                f"strategy.sparsifier: expected 'top_k' or 'rand_k', got {sparsifier!r}"
            )
        if not 0 < ratio <= 1:
            raise ValueError(f"strategy.ratio: must be in (0, 1], got {ratio}")
        check_clip_norm(clip_norm)
        check_noise_multiplier(noise_multiplier)
        self.sparsifier = sparsifier
        self.ratio = float(ratio)
        self.clip_norm = float(clip_norm)
        if epsilon is not None and epsilon <= 0:
            raise ValueError(f"strategy.epsilon: must be > 0, got {epsilon}")
        self.noise_multiplier = noise_multiplier
        self.epsilon = epsilon

    @property
    def server_view(self) -> ServerView:
        """What the server receives: each client's sparsified update with its Gaussian noise."""
        return ServerView("noised uploads")

    @property
    def traits(self) -> StrategyTraits:
        """Private, and its one client-level Gaussian on the aggregate is amplified by cohort
        sampling (Poisson cohorts under ``model.sampling: auto``); the noise is each client's own,
        so the server receives noised uploads (:attr:`server_view`)."""
        return StrategyTraits(private=True, amplified_by_sampling=True)

    def setup_federation(self, spec: FederationSpec) -> None:
        """Fixes an unset σ from ``epsilon`` (or the run's target): one subsampled Gaussian a
        round for ``spec.rounds`` rounds of the run's cohort sampling."""
        super().setup_federation(spec)
        # Checked here, not in __init__: jsonargparse would hide the message behind its
        # "does not validate against any of the Union subtypes".
        refuse_sigma_and_epsilon(self.noise_multiplier, self.epsilon)
        self.noise_multiplier = spec.cohort_noise_multiplier(
            self.noise_multiplier, target_epsilon=self.epsilon
        )

    @property
    def mechanism(self) -> GaussianMechanism:
        """Each client's clip to C and Gaussian on its kept coordinates (sensitivity C)."""
        assert self.noise_multiplier is not None, "noise multiplier not calibrated yet"
        return GaussianMechanism(
            noise_multiplier=self.noise_multiplier,
            sensitivity=self.clip_norm,
            clip_norm=self.clip_norm,
        )

    def num_kept(self, d: int) -> int:
        return min(d, max(1, math.ceil(self.ratio * d)))

    def process_update(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        delta = update.delta
        k = self.num_kept(delta.numel())
        shared = generator_for(ctx.seed, ctx.round_idx, "fedsmp_rand_k", device=delta.device)
        idx = keep_mask(delta, k=k, sparsifier=self.sparsifier, generator=shared)
        released = self.mechanism.release(delta[idx], generator=generator)
        out = torch.zeros_like(delta)
        out[idx] = released.value
        update.delta = out
        update.metrics["kept_norm"] = released.norm
        update.metrics["clipped"] = float(released.norm > self.clip_norm)
        return update

    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        if self.sparsifier == "top_k":
            return RoundPrivacy(no_guarantee=TOP_K_LEAK)
        # Each client's own noise bounds the released sum as one client-level Gaussian (the
        # other clients' noise is ignored: conservative), sampled as the cohort sampler did.
        return RoundPrivacy(client_level=[self.mechanism.cohort_event(ctx.cohort_sampling())])

    def state_dict(self) -> dict:
        return {"noise_multiplier": self.noise_multiplier}

    def load_state_dict(self, state_dict: dict) -> None:
        self.noise_multiplier = state_dict["noise_multiplier"]
