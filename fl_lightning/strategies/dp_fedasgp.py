"""DP-FedASGP (Zhang, Mao, He, Huang, Wu, IEEE Trans. Computers 2024, Alg. 1).

"Balancing Privacy and Accuracy Using Significant Gradient Protection in Federated Learning",
DOI 10.1109/TC.2024.3477971. Notes: ``../shared/papers/000-dp-fedasgp.notes.md``.

Client (Alg. 1 lines 12-29): E local SGD epochs (the ordinary local loop), then
g = accumulated local gradient = (W − W_local)/η = −delta/η (exact for plain SGD without
momentum/weight decay), clip g to L2 norm C (line 20), threshold λ_t (Eq. 14, the
⌈r_t·|W|⌉-th smallest entry, ``torch.kthvalue``), sparse-vector test per coordinate and Laplace
noise on the passing coordinates (Eq. 1, 13); upload g, L_i (mean local loss) and n_i.

Server (lines 7-10): γ_i = ½ n_i/n + ½ L_i/L over the cohort (Eq. 16), W ← W − η Σ γ_i g_i
(Eq. 3, 20; the same η as the clients, no 1/k of Eq. 19). ``aggregate`` returns
−η Σ γ_i g_i, so use ``model.server_lr: 1.0`` with plain SGD.

Gaps (notes §1.5) are options: ``threshold_schedule``, ``significance``, ``perturb_share``
(ε3/ε), ``q``, ``sensitivity`` (ΔS), ``noise_unselected``. Privacy is reported honestly:
as published, below-threshold coordinates (and L_i) leave the client without noise, so the run
logs ε = ∞ with the reason; with ``noise_unselected`` (and ``loss_weighting: false``) the
defensible per-round ε (L1 diameter 2C√|W| over the Laplace scale) goes to the accountant's
local ledger (basic composition), and the paper's per-round figure ε1+ε2+ε3 is logged as
``strategy/paper_epsilon_round``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any, Literal

import torch

from fl_lightning.privacy.accounting.events import RoundPrivacy
from fl_lightning.privacy.guarantee.server_view import ServerView
from fl_lightning.privacy.mechanisms.params import check_clip_norm
from fl_lightning.privacy.mechanisms.sparse_vector import (
    Significance,
    SparseVectorPerturbation,
    ThresholdSchedule,
    defensible_epsilon,
    split_budget,
    split_selection_budget,
    threshold_quantile,
)
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.base import Metrics, Strategy, StrategyTraits
from fl_lightning.strategies.spec import FederationSpec, local_lr_in_force

NO_NOISE_BELOW_THRESHOLD = (
    "coordinates below the threshold are uploaded without noise (DP-FedASGP Eq. 1), so the "
    "upload is not ε-DP; set strategy.noise_unselected: true for a defensible ε"
)
RAW_LOSS = (
    "the local loss L_i is uploaded without noise for the Eq. 16 weights; set "
    "strategy.loss_weighting: false for a defensible ε"
)


def asgp_weights(num_examples: list[float], losses: list[float]) -> list[float]:
    """γ_i = ½·n_i/n + ½·L_i/L (Eq. 16); falls back to n_i/n when every loss is 0 or NaN."""
    n = float(sum(num_examples))
    clean = [0.0 if (math.isnan(v) or v < 0) else float(v) for v in losses]
    total_loss = sum(clean)
    if total_loss <= 0:
        return [ni / n for ni in num_examples]
    return [0.5 * ni / n + 0.5 * li / total_loss for ni, li in zip(num_examples, clean)]


class DPFedASGP(Strategy):
    """DP-FedASGP with every gap of the paper as an option.

    Args:
        epsilon: per-round budget ε = ε1 + ε2 + ε3 (the paper's ε ∈ {0.1, …, 4}); ε3 alone
            when ``selection_epsilon`` is set.
        clip_norm: C (paper: 1).
        perturb_share: ε3/ε. Default 0.9: the paper asks ε3 ≫ ε1 + ε2 and gives no number.
        q: SVT scale factor of Eq. (13). Default 1 (Alg. 1 line 21 drops q; q = number of
            positives would make the noise scale grow with |W|).
        sensitivity: ΔS. Default ``None`` = C, the largest |g'_j| after clipping (the paper's
            per-coordinate reading, Appendix A).
        threshold_schedule: ``published`` (Eq. 14, rises with t) or ``reversed`` (falls, as the
            text says). Default ``published``: Eq. 14 and Alg. 1 are the executable spec.
        significance: ``signed`` (Eq. 14 literally) or ``magnitude`` (|g'|). Default
            ``signed`` for the same reason.
        noise_unselected: also perturb coordinates below the threshold (default False, as
            published; True is the sound variant).
        loss_weighting: use the Eq. 16 loss-aware weights (default True, as published). False
            uses n_i/n and keeps the raw loss off the server's decision path.
        loss_reduction: what L_i is. ``sum`` (default): the client's total loss, n_i × its mean
            local training loss, so γ_i = n_i/n when every client fits equally well (Eq. 16
            then reduces to FedAvg, consistent with the objective Eq. 15). ``mean``: the mean
            local loss as ``ClientUpdate.loss`` reports it; equal losses then give
            γ_i = ½ n_i/n + 1/(2k). The paper's "L = Σ ΔM(W)_e" leaves this open.
        selection_epsilon: the selection budget ε1 + ε2 of the sparse-vector test (Eq. 13) as
            its own per-round number; ``epsilon`` is then ε3 alone (the perturbation N) and
            ``perturb_share`` is not used. ``None`` (default, as published): ε1 + ε2 =
            (1 − perturb_share)·ε. The test s(g'_j) + α_j ≥ λ_t + β (Eq. 1, 13) follows the λ_t
            quantile of Eq. (14) only when α_j ~ Lap(qΔS/ε1) is small against the spread of the
            scores around λ_t, about C/√|W| for an L2-clipped gradient: ε1 ≳ 2qΔS√|W|/C. With
            ε3 ≫ ε1 + ε2 (Sec. IV-C) at the paper's ε ≤ 4 the test is a coin flip per
            coordinate; a selection budget of that size makes it track the quantile. The
            paper's per-round figure is then ε3 + ε1 + ε2 = ``epsilon + selection_epsilon``;
            the sound guarantee is unchanged by it (∞ as published, since the unselected
            coordinates leave in the clear; with ``noise_unselected`` every coordinate gets the
            same noise and the output does not depend on the selection).
        lr: the local η used to turn the update into g = −delta/η and as the server step.
            ``None``: read from ``client.lr`` at setup.
    """

    reduction = "gather"

    def __init__(
        self,
        *,
        epsilon: float = 0.5,
        clip_norm: float = 1.0,
        perturb_share: float = 0.9,
        q: float = 1.0,
        sensitivity: float | None = None,
        threshold_schedule: ThresholdSchedule = "published",
        significance: Significance = "signed",
        noise_unselected: bool = False,
        loss_weighting: bool = True,
        loss_reduction: Literal["sum", "mean"] = "sum",
        selection_epsilon: float | None = None,
        lr: float | None = None,
    ) -> None:
        super().__init__(weighting="num_examples")
        check_clip_norm(clip_norm)
        if epsilon <= 0:
            raise ValueError(f"strategy.epsilon: must be > 0, got {epsilon}")
        if not 0.0 < perturb_share < 1.0:
            raise ValueError(f"strategy.perturb_share: must be in (0, 1), got {perturb_share}")
        if q <= 0:
            raise ValueError(f"strategy.q: must be > 0, got {q}")
        if sensitivity is not None:
            check_clip_norm(sensitivity, "strategy.sensitivity")
        if threshold_schedule not in ("published", "reversed"):
            raise ValueError(
                "strategy.threshold_schedule: expected 'published' or 'reversed', got "
                f"{threshold_schedule!r}"
            )
        if significance not in ("signed", "magnitude"):
            raise ValueError(
                f"strategy.significance: expected 'signed' or 'magnitude', got {significance!r}"
            )
        if loss_reduction not in ("sum", "mean"):
            raise ValueError(
                f"strategy.loss_reduction: expected 'sum' or 'mean', got {loss_reduction!r}"
            )
        if lr is not None and lr <= 0:
            raise ValueError(f"strategy.lr: must be > 0, got {lr}")
        self.epsilon = float(epsilon)
        self.clip_norm = float(clip_norm)
        self.threshold_schedule = threshold_schedule
        self.significance = significance
        self.loss_weighting = loss_weighting
        self.loss_reduction = loss_reduction
        self.lr = lr
        if selection_epsilon is not None and selection_epsilon <= 0:
            raise ValueError(f"strategy.selection_epsilon: must be > 0, got {selection_epsilon}")
        self.selection_epsilon = selection_epsilon
        if selection_epsilon is None:
            self.split = split_budget(epsilon=epsilon, q=q, perturb_share=perturb_share)
        else:
            self.split = split_selection_budget(
                perturb_epsilon=epsilon, selection_epsilon=selection_epsilon, q=q
            )
        self.mechanism = SparseVectorPerturbation(
            split=self.split,
            q=q,
            sensitivity=self.clip_norm if sensitivity is None else sensitivity,
            significance=significance,
            noise_unselected=noise_unselected,
            clip_norm=self.clip_norm,
            no_guarantee=NO_NOISE_BELOW_THRESHOLD,
        )

    # -- setup -------------------------------------------------------------------------------
    def setup_federation(self, spec: FederationSpec) -> None:
        super().setup_federation(spec)
        spec.refuse_dp_sgd("DP-FedASGP privatises the upload")
        if self.lr is None:
            self.lr = float(spec.local.lr)

    def _local_lr(self, ctx: RoundContext) -> float:
        return local_lr_in_force(ctx.client_config, self.lr, field="strategy.lr")

    # -- client ------------------------------------------------------------------------------
    def threshold_level(self, ctx: RoundContext) -> float:
        return threshold_quantile(
            round_number=ctx.round_idx + 1,
            total_rounds=max(ctx.total_rounds, 1),
            schedule=self.threshold_schedule,
        )

    def process_update(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        lr = self._local_lr(ctx)
        g = update.delta.div_(-lr)  # accumulated local gradient (Alg. 1 line 19)
        out = self.mechanism.release_at(g, level=self.threshold_level(ctx), generator=generator)
        update.delta = out.value  # the uploaded g_i (not a model delta any more)
        update.metrics["grad_norm"] = out.norm
        update.metrics["clipped"] = float(out.norm > self.clip_norm)
        update.metrics["selected_fraction"] = out.observed["selected_fraction"]
        update.metrics["selection_recall"] = out.observed["selection_recall"]
        update.extras["threshold"] = out.observed["threshold"]
        return update

    # -- server ------------------------------------------------------------------------------
    def aggregate(
        self, updates: Iterable[ClientUpdate], ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        updates = list(updates)
        if not updates:
            return torch.zeros_like(ctx.global_params), {}
        sizes = [float(u.num_examples) for u in updates]
        if self.loss_weighting:
            losses = [float(u.loss) for u in updates]
            if self.loss_reduction == "sum":
                losses = [loss * n for loss, n in zip(losses, sizes)]
            gammas = asgp_weights(sizes, losses)
        else:
            gammas = [s / sum(sizes) for s in sizes]
        total = torch.zeros_like(ctx.global_params)
        for gamma, update in zip(gammas, updates):
            total.add_(update.delta, alpha=gamma)
        metrics = {
            "threshold_level": self.threshold_level(ctx),
            "gamma_max": max(gammas),
            "gamma_min": min(gammas),
            "paper_epsilon_round": self.mechanism.paper_epsilon(),
        }
        if self.mechanism.noise_unselected:
            metrics["epsilon_round_defensible"] = self.defensible_round_epsilon()
        return total.mul_(-self._local_lr(ctx)), metrics  # −η Σ γ_i g_i (Alg. 1 line 10)

    # -- privacy -----------------------------------------------------------------------------
    def defensible_round_epsilon(self) -> float:
        return defensible_epsilon(
            laplace_scale=self.mechanism.perturb_scale,
            clip_norm=self.clip_norm,
            dimension=max(self.num_parameters, 1),
        )

    @property
    def server_view(self) -> ServerView:
        """What the server receives: each client's clipped, noised gradient."""
        return ServerView("noised uploads")

    @property
    def traits(self) -> StrategyTraits:
        return dataclasses.replace(super().traits, private=True)

    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        """The mechanism's event per upload (the L1 diameter of the clipped gradient's ball over
        the Laplace scale), or no guarantee with the reason."""
        release = self.mechanism.event(max(self.num_parameters, 1))
        if release is None:
            return RoundPrivacy(no_guarantee=self.mechanism.no_guarantee)
        if self.loss_weighting:
            return RoundPrivacy(no_guarantee=RAW_LOSS)
        return RoundPrivacy(local={cid: [release] for cid in ctx.cohort})

    def state_dict(self) -> dict[str, Any]:
        return {"lr": self.lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.lr = state_dict.get("lr", self.lr)
