"""GCFL: server-side gradient correction of DP-SGD client uploads (Wan, Zhu, Liu, Fan, Xu,
"GCFL: A Gradient Correction-based Federated Learning Framework for Privacy-preserving CPSS").

Clients run record-level DP-SGD (the core's ``client.dp_sgd``: per-sample clip C, Gaussian noise
σC, Poisson rate B/n_i; paper Eqs. 9-10) and upload their noisy update, either one noisy gradient
(``client.local_steps: 1``, FedSGD as in Algorithm 1) or the pseudo-gradient of K local steps.
Each upload is read as a gradient g_i = −Δ_i / (η_l K_i) (exactly the noisy DP-SGD gradient ĝ_i
for K = 1 and plain SGD).

The server (Sec. IV-B) then corrects the gradients that conflict with others:

* ``variant: corrected`` (default, the prose of Sec. IV-B and the O(M·(N−M)·d) complexity claim):
  M reference clients are drawn at random each round and assumed correct; every other gradient
  is checked against each reference in a random order, and whenever cos(g, r) < τ (Eq. 11 with
  τ = 0 from the prose) it is projected onto the reference's normal plane,
  g ← g − (g·r / ‖r‖²) r, sequentially on the already-corrected g (PCGrad, Yu et al. 2020).
  The result is orthogonal to the last reference it was projected on.
* ``variant: published`` (Algorithm 1 as printed): all ordered pairs (i, j ≠ i), cosine of the
  *original* gradients, and Eq. 12's denominator ‖r‖ (not squared), each correction starting
  from the original ĝ_i (line 28), so with several conflicts the last one wins. The printed
  Eq. 12 is not a projection unless ‖r‖ = 1; it is kept to reproduce the paper.

Corrected gradients are averaged with weights n_i (``weighting: num_examples``, the prose) or
uniformly (``weighting: uniform``, Algorithm 1 line 32) and returned as a model delta, so the
server's SGD step gives W ← W − η·Σ p_i ĝ_i^cor with η = ``model.server_lr`` · η_l.

What the correction sees: Eq. 11 compares the uploads themselves ("ĝ_t^i represents the model
gradient uploaded by the i-th client in iteration t"); nothing less noisy is available to the
server or named by the paper. The unit of an upload is the open point, and both readings are
configurations of this class: one DP-SGD step per round (``client.local_steps: 1``, Algorithm 1
line 19 sits inside the k-loop), where the noise of a single Poisson batch dominates and the
cosine of two uploads is near its pure-noise value √(2/(π d)); or the pseudo-gradient of a local
epoch (``client.local_epochs: 1``, the paper's "epochs" and Fig. 2), the mean of K noisy
gradients whose noise variance is K times smaller. Either way the server only post-processes
DP-SGD releases.

Per round, ``aggregate``'s metrics (logged as ``strategy/<key>``) hold the number of clients
projected and of projections, and the statistics of the Eq. 11 cosines checked
(``cosine_statistics``: mean cos, mean |cos|, the share below 0, and the pure-noise |cos|).

Privacy: the correction only reads the clients' DP-SGD outputs, so it is post-processing; ε is
the clients' record-level DP-SGD ε that the core accounts from ``ClientUpdate.dp_steps``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import torch

from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.base import Metrics, Strategy, Weighting, client_weight
from fl_lightning.strategies.spec import FederationSpec, local_lr_in_force

Variant = Literal["corrected", "published"]
Granularity = Literal["whole", "per_layer"]


def _cosine(g: torch.Tensor, r: torch.Tensor) -> float | None:
    """cos φ (Eq. 11); None when either vector is zero (no direction to compare)."""
    gn, rn = float(g.norm()), float(r.norm())
    if gn == 0.0 or rn == 0.0:
        return None
    return float(torch.dot(g, r)) / (gn * rn)


def project_sequential(
    g: torch.Tensor,
    references: Sequence[torch.Tensor],
    *,
    threshold: float,
) -> tuple[torch.Tensor, int, list[float]]:
    """PCGrad-style correction (the corrected reading of Eq. 12).

    For each reference r, in the given order: if cos(g, r) < ``threshold``, g ← g − (g·r/‖r‖²) r,
    on the already-corrected g. Returns (corrected copy, number of projections, the cosines
    checked, before each projection).
    """
    out = g.clone()
    projections = 0
    cosines: list[float] = []
    for r in references:
        cos = _cosine(out, r)
        if cos is None:
            continue
        cosines.append(cos)
        if cos < threshold:
            out.sub_(r, alpha=float(torch.dot(out, r)) / float(torch.dot(r, r)))
            projections += 1
    return out, projections, cosines


def project_published(
    g: torch.Tensor,
    references: Sequence[torch.Tensor],
    *,
    threshold: float,
) -> tuple[torch.Tensor, int, list[float]]:
    """Algorithm 1, lines 23-31, as printed: cos of the original ĝ_i and ĝ_j; on a conflict
    ĝ^cor = ĝ_i − (ĝ_i·ĝ_j / ‖ĝ_j‖) ĝ_j (Eq. 12, denominator not squared), always from the
    original ĝ_i, so the last conflicting reference wins."""
    out = g.clone()
    projections = 0
    cosines: list[float] = []
    for r in references:
        cos = _cosine(g, r)
        if cos is None:
            continue
        cosines.append(cos)
        if cos < threshold:
            out = g - (float(torch.dot(g, r)) / float(r.norm())) * r
            projections += 1
    return out, projections, cosines


def cosine_statistics(cosines: Sequence[float], *, dims: Sequence[int]) -> dict[str, float]:
    """The round's Eq. 11 cosines, as logged per round (``strategy/<key>``).

    ``mean_cosine`` and ``abs_cos_mean`` are the mean of cos φ and of |cos φ| over the pairs
    checked, ``cos_negative_fraction`` the share below 0 (the paper's trigger), and
    ``abs_cos_noise_only`` = √(2/(π d)) the mean |cos| of two independent isotropic Gaussian
    vectors in d dimensions (averaged over the segments' d): the value the uploads' cosines take
    when the DP noise swamps the gradient signal. NaN where no pair was checked.
    """
    n = len(cosines)
    nan = float("nan")
    floor = [math.sqrt(2.0 / (math.pi * d)) for d in dims if d > 0]
    return {
        "mean_cosine": sum(cosines) / n if n else nan,
        "abs_cos_mean": sum(abs(c) for c in cosines) / n if n else nan,
        "cos_negative_fraction": sum(c < 0 for c in cosines) / n if n else nan,
        "abs_cos_noise_only": sum(floor) / len(floor) if floor else nan,
    }


class GCFL(Strategy):
    """GCFL server-side gradient correction (Wan et al., Sec. IV-B, Eqs. 11-12, Algorithm 1).

    Args:
        variant: ``corrected`` (M random references, ‖r‖², sequential PCGrad projection) or
            ``published`` (Algorithm 1: all pairs, ‖r‖, each correction from the original).
        reference_clients: M, the clients assumed correct each round (``corrected`` only;
            default 1). Ignored by the published variant, which compares all pairs.
        threshold: τ; a gradient is corrected when cos < τ (paper: 0; Algorithm 1 leaves it
            blank).
        granularity: ``whole`` (one cosine on the flattened vector, Eq. 11) or ``per_layer``
            (cosine and projection per parameter tensor, from ``utils.flat.layer_slices``).
        weighting: ``num_examples`` (n_i, Sec. IV-B prose) or ``uniform`` (Algorithm 1).
    """

    reduction = "gather"

    def __init__(
        self,
        *,
        variant: Variant = "corrected",
        reference_clients: int | None = None,
        threshold: float = 0.0,
        granularity: Granularity = "whole",
        weighting: Weighting = "num_examples",
    ) -> None:
        super().__init__(weighting=weighting)
        if variant not in ("corrected", "published"):
            raise ValueError(
                f"strategy.variant: expected 'corrected' or 'published', got {variant!r}"
            )
        if reference_clients is not None and reference_clients < 1:
            raise ValueError(f"strategy.reference_clients: must be >= 1, got {reference_clients}")
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(f"strategy.threshold: a cosine threshold in [-1, 1], got {threshold}")
        if granularity not in ("whole", "per_layer"):
            raise ValueError(
                f"strategy.granularity: expected 'whole' or 'per_layer', got {granularity!r}"
            )
        self.variant = variant
        self.reference_clients = 1 if reference_clients is None else reference_clients
        self.threshold = threshold
        self.granularity = granularity
        self.layer_slices: dict[str, slice] | None = None
        self.local_lr: float | None = None

    def setup_federation(self, spec: FederationSpec) -> None:
        super().setup_federation(spec)
        self.layer_slices = dict(spec.layer_slices) or None
        self.local_lr = float(spec.local.lr)

    # -- helpers -----------------------------------------------------------------------------
    def _segments(self, dim: int) -> list[slice]:
        if self.granularity == "whole":
            return [slice(0, dim)]
        if not self.layer_slices:
            raise ValueError(
                "strategy.granularity: per_layer needs the model's layer slices "
                "(FederationSpec.layer_slices)"
            )
        return list(self.layer_slices.values())

    def _scales(self, updates: list[ClientUpdate], ctx: RoundContext) -> list[float]:
        """η_l·K_i, the factor between client i's delta and its mean noisy gradient."""
        if self.local_lr is None and "lr" not in ctx.client_config:
            return [1.0] * len(updates)  # unbound (unit use): deltas read as gradients
        lr = local_lr_in_force(ctx.client_config, self.local_lr)
        return [lr * max(1.0, float(u.metrics.get("local_steps", 1.0))) for u in updates]

    def correct(
        self, grads: list[torch.Tensor], *, generator: torch.Generator
    ) -> tuple[list[torch.Tensor], dict[str, float]]:
        """Corrects the clients' gradients; returns them and the round's statistics."""
        n = len(grads)
        segments = self._segments(grads[0].numel())
        out = [g.clone() for g in grads]
        projected_clients = 0
        projections = 0
        cosines: list[float] = []
        if self.variant == "published":
            pairs = {i: [j for j in range(n) if j != i] for i in range(n)}
            project = project_published
        else:
            m = min(self.reference_clients, n)
            refs = torch.randperm(n, generator=generator, device=generator.device)[:m].tolist()
            ref_set = set(refs)
            pairs = {}
            for i in range(n):
                if i in ref_set:
                    continue
                order = torch.randperm(m, generator=generator, device=generator.device).tolist()
                pairs[i] = [refs[k] for k in order]
            project = project_sequential
        for i, js in pairs.items():
            hit = 0
            for seg in segments:
                corrected, count, cos = project(
                    grads[i][seg], [grads[j][seg] for j in js], threshold=self.threshold
                )
                out[i][seg] = corrected
                hit += count
                cosines.extend(cos)
            projections += hit
            projected_clients += int(hit > 0)
        stats = {
            "projected": float(projected_clients),
            "projections": float(projections),
            **cosine_statistics(cosines, dims=[s.stop - s.start for s in segments]),
        }
        return out, stats

    # -- server side -------------------------------------------------------------------------
    def aggregate(
        self, updates: Iterable[ClientUpdate], ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        updates = list(updates)
        if not updates:
            return torch.zeros_like(ctx.global_params), {"projected": 0.0, "projections": 0.0}
        scales = self._scales(updates, ctx)
        grads = [u.delta.div(-s) for u, s in zip(updates, scales)]
        corrected, metrics = self.correct(grads, generator=generator)
        total = torch.zeros_like(ctx.global_params)
        total_weight = 0.0
        for u, s, g in zip(updates, scales, corrected):
            w = client_weight(u, self.weighting)
            total.add_(g, alpha=-s * w)
            total_weight += w
        return total.div_(total_weight), metrics

    def state_dict(self) -> dict[str, Any]:
        return {}


__all__ = ["GCFL", "cosine_statistics", "project_published", "project_sequential"]
