"""Sparse-vector significance test with Laplace perturbation (DP-FedASGP, Zhang et al. 2024).

Implements the per-coordinate rule of Eq. (1)/(13) of B. Zhang, Y. Mao, X. He, H. Huang, J. Wu,
"Balancing Privacy and Accuracy Using Significant Gradient Protection in Federated Learning",
IEEE Trans. Computers, 2024 (DOI 10.1109/TC.2024.3477971)::

    g_j <- g'_j + N_j   if  s(g'_j) + alpha_j >= lambda_t + beta,   N_j ~ Lap(q ΔS / ε3)
    g_j <- g'_j         otherwise

with alpha_j ~ Lap(q ΔS / ε1) fresh per coordinate and beta ~ Lap(q ΔS / ε2) once per call
(standard SVT, Lyu, Su & Li 2017), the threshold lambda_t of Eq. (14) computed by
``torch.kthvalue`` (a selection, not a full sort), and the budget split ε1 : ε2 = q^{2/3} : 1
(Sec. IV-C). ``s`` is the identity (``significance="signed"``, Eq. 14 read literally) or the
absolute value (``"magnitude"``, the paper's "values far from zero").

Privacy: as published, coordinates that fail the test are released exactly, so the output is not
ε-DP (see ``docs/dp_fedasgp.md``). With ``noise_unselected=True`` every coordinate gets the same
Lap(q ΔS / ε3) noise; the output then no longer depends on the selection, and one release of an
L2-clipped vector (norm <= C, dimension d) is (2 C sqrt(d) / b)-DP for the Laplace scale b
(the L1 diameter of the L2 ball of radius C is 2 C sqrt(d)), which :func:`defensible_epsilon`
returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from fl_lightning.privacy.accounting.events import LocalRelease
from fl_lightning.privacy.mechanisms.base import Mechanism, Release
from fl_lightning.privacy.mechanisms.clipping import clip_by_l2_norm_
from fl_lightning.privacy.mechanisms.laplace import add_laplace, sample_laplace
from fl_lightning.privacy.mechanisms.params import check_clip_norm

ThresholdSchedule = Literal["published", "reversed"]
Significance = Literal["signed", "magnitude"]


@dataclass(frozen=True)
class BudgetSplit:
    """ε = ε1 + ε2 + ε3 with ε1 : ε2 = q^{2/3} : 1 (Zhang et al. 2024, Thm. 2 and Sec. IV-C)."""

    epsilon1: float
    epsilon2: float
    epsilon3: float

    @property
    def total(self) -> float:
        return self.epsilon1 + self.epsilon2 + self.epsilon3


def split_budget(*, epsilon: float, q: float, perturb_share: float) -> BudgetSplit:
    """Splits a per-round ε: ε3 = share·ε, the rest as ε1 : ε2 = q^{2/3} : 1."""
    if epsilon <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon}")
    if q <= 0:
        raise ValueError(f"q must be > 0, got {q}")
    if not 0.0 < perturb_share < 1.0:
        raise ValueError(f"perturb_share must be in (0, 1), got {perturb_share}")
    eps3 = perturb_share * epsilon
    rest = epsilon - eps3
    ratio = q ** (2.0 / 3.0)
    return BudgetSplit(rest * ratio / (ratio + 1.0), rest / (ratio + 1.0), eps3)


def split_selection_budget(
    *, perturb_epsilon: float, selection_epsilon: float, q: float
) -> BudgetSplit:
    """ε3 = ``perturb_epsilon`` and ε1 + ε2 = ``selection_epsilon`` split as q^{2/3} : 1 (Eq. 13,
    Sec. IV-C), for a selection budget set on its own rather than as the (1 − share) part of ε.

    The selection noise α_j ~ Lap(qΔS/ε1) (Eq. 13) must be small against the spread of the
    scores around λ_t (Eq. 14) for the test to follow the λ_t quantile; for an L2-clipped
    gradient that spread is about C/√|W|, far below ΔS/ε1 when ε1 is a small share of a small ε.
    """
    if perturb_epsilon <= 0:
        raise ValueError(f"epsilon must be > 0, got {perturb_epsilon}")
    if selection_epsilon <= 0:
        raise ValueError(f"selection_epsilon must be > 0, got {selection_epsilon}")
    if q <= 0:
        raise ValueError(f"q must be > 0, got {q}")
    ratio = q ** (2.0 / 3.0)
    return BudgetSplit(
        selection_epsilon * ratio / (ratio + 1.0),
        selection_epsilon / (ratio + 1.0),
        perturb_epsilon,
    )


def threshold_quantile(
    *, round_number: int, total_rounds: int, schedule: ThresholdSchedule
) -> float:
    """The quantile level r_t of λ_t (Eq. 14), for a 1-based ``round_number`` t.

    ``published``: r_t = min(t/T, 0.9), Eq. (14) with an ascending sort (λ rises over training).
    ``reversed``: r_t = min((T + 1 − t)/T, 0.9), the mirror image, so λ falls over training as the
    paper's text (Sec. IV-B) describes.
    """
    if total_rounds < 1:
        raise ValueError(f"total_rounds must be >= 1, got {total_rounds}")
    t = min(max(round_number, 1), total_rounds)
    if schedule == "published":
        return min(t / total_rounds, 0.9)
    if schedule == "reversed":
        return min((total_rounds + 1 - t) / total_rounds, 0.9)
    raise ValueError(f"threshold_schedule: expected 'published' or 'reversed', got {schedule!r}")


def significance_scores(g: torch.Tensor, significance: Significance) -> torch.Tensor:
    if significance == "signed":
        return g
    if significance == "magnitude":
        return g.abs()
    raise ValueError(f"significance: expected 'signed' or 'magnitude', got {significance!r}")


def quantile_threshold(scores: torch.Tensor, level: float) -> float:
    """λ = the ⌈level·d⌉-th smallest score (1-based, clamped to [1, d]) via ``torch.kthvalue``."""
    d = scores.numel()
    k = min(max(math.ceil(level * d), 1), d)
    return float(torch.kthvalue(scores.reshape(-1), k).values)


class SparseVectorPerturbation(Mechanism):
    """The SVT selection plus Laplace perturbation of DP-FedASGP (Eq. 1, 13, 14).

    Args:
        split: the budget (ε1, ε2, ε3) of one release.
        q: the SVT scale factor q of Eq. (13) (noise scales are q·ΔS/ε_i).
        sensitivity: ΔS, the per-coordinate sensitivity used in the noise scales.
        significance: ``signed`` or ``magnitude`` scores for the test.
        noise_unselected: also perturb the coordinates that fail the test (same scale).
        clip_norm: C, the L2 clip :meth:`constrain` applies (Alg. 1 line 20); the defensible
            event needs it. ``None``: the input is bounded by the caller, and no event.
        no_guarantee: the reason a release without ``noise_unselected`` has no guarantee.
    """

    def __init__(
        self,
        *,
        split: BudgetSplit,
        q: float = 1.0,
        sensitivity: float = 1.0,
        significance: Significance = "signed",
        noise_unselected: bool = False,
        clip_norm: float | None = None,
        no_guarantee: str = "coordinates that fail the test are uploaded without noise",
    ) -> None:
        check_clip_norm(sensitivity, "sensitivity")
        if clip_norm is not None:
            check_clip_norm(clip_norm)
        significance_scores(torch.zeros(1), significance)  # validates the name
        self.split = split
        self.q = float(q)
        self.sensitivity = float(sensitivity)
        self.significance = significance
        self.noise_unselected = noise_unselected
        self.clip_norm = clip_norm
        self.no_guarantee = None if noise_unselected else no_guarantee

    @property
    def query_scale(self) -> float:
        return self.q * self.sensitivity / self.split.epsilon1

    @property
    def threshold_scale(self) -> float:
        return self.q * self.sensitivity / self.split.epsilon2

    @property
    def perturb_scale(self) -> float:
        return self.q * self.sensitivity / self.split.epsilon3

    def select(
        self, g: torch.Tensor, threshold: float, *, generator: torch.Generator
    ) -> torch.Tensor:
        """Boolean mask of the coordinates passing s(g'_j) + α_j >= λ + β."""
        scores = significance_scores(g, self.significance)
        beta = float(sample_laplace((1,), scale=self.threshold_scale, generator=generator))
        alpha = sample_laplace(
            g.shape, scale=self.query_scale, generator=generator, device=g.device, dtype=g.dtype
        )
        return (scores + alpha) >= (threshold + beta)

    def privatize_with_threshold(
        self, g: torch.Tensor, threshold: float, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (released vector, selection mask)."""
        mask = self.select(g, threshold, generator=generator)
        released = add_laplace(g, scale=self.perturb_scale, generator=generator)  # laplace.py
        if not self.noise_unselected:
            released = torch.where(mask, released, g)
        return released, mask

    def privatize(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        """Applies the test with the 90th-percentile threshold (the late-round value of Eq. 14)."""
        threshold = quantile_threshold(significance_scores(x, self.significance), 0.9)
        return self.privatize_with_threshold(x, threshold, generator=generator)[0]

    def constrain(self, x: torch.Tensor) -> float:
        """g ← g·min(1, C/‖g‖₂) in place (Alg. 1 line 20) when ``clip_norm`` is set."""
        if self.clip_norm is None:
            return math.nan
        return clip_by_l2_norm_(x, self.clip_norm)

    def release_at(self, g: torch.Tensor, *, level: float, generator: torch.Generator) -> Release:
        """One upload of round level r_t (Eq. 14): clip g, λ_t = the r_t-quantile of its
        scores, the noisy test and the Laplace perturbation (Eq. 1, 13), and the event.

        ``observed``: the selected share, the threshold, and ``selection_recall``, the share of
        the coordinates above λ_t that the noisy test selected (1 when the selection follows
        the quantile; about the selected share when it is random)."""
        norm = self.constrain(g)
        scores = significance_scores(g, self.significance)
        threshold = quantile_threshold(scores, level)
        above = scores >= threshold  # what a noiseless test at λ_t would select
        released, mask = self.privatize_with_threshold(g, threshold, generator=generator)
        recall = float((mask & above).sum()) / max(int(above.sum()), 1)
        observed = {
            "selected_fraction": float(mask.float().mean()),
            "selection_recall": recall,
            "threshold": threshold,
        }
        return Release(released, self.event(g.numel()), norm, observed)

    def event(self, dimension: int) -> LocalRelease | None:
        """With ``noise_unselected``: one upload at the defensible 2C√d / b (every coordinate
        gets Lap(b), so the output does not depend on the selection); otherwise None (the
        unselected coordinates leave exactly: :attr:`no_guarantee`)."""
        if not self.noise_unselected or self.clip_norm is None:
            return None
        eps = defensible_epsilon(
            laplace_scale=self.perturb_scale, clip_norm=self.clip_norm, dimension=max(dimension, 1)
        )
        return LocalRelease(eps, 0.0, "upload")

    def paper_epsilon(self) -> float:
        """The per-round figure the paper quotes: ε1 + ε2 + ε3 (Thm. 2)."""
        return self.split.total


def defensible_epsilon(*, laplace_scale: float, clip_norm: float, dimension: int) -> float:
    """Pure ε of one release x + Lap(b)^d for any x in the L2 ball of radius C (L1 Δ = 2C√d)."""
    return 2.0 * clip_norm * math.sqrt(dimension) / laplace_scale


__all__ = [
    "BudgetSplit",
    "SparseVectorPerturbation",
    "defensible_epsilon",
    "quantile_threshold",
    "significance_scores",
    "split_budget",
    "split_selection_budget",
    "threshold_quantile",
]
