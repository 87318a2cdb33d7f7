"""Before round 0: will the noise drown the signal? (docs/privacy.md, "Noise-to-signal").

From the mechanism's own parameters (σ or the Laplace scale, the clip norm C, the cohort size m,
the number of coordinates d, the rounds T) this estimates the noise on what the server releases
against the largest signal it could carry:

* one round: the L2 norm of the noise on the averaged update, √d·s̄ (s̄ the noise std per
  coordinate of the average: σC/m for Gaussian noise on the sum divided by m, as DP-FedAvg;
  s/√m for noise of std s on each of m uploads), over C, the norm of a clipped update, which
  bounds the average's: ``ratio_round = √d·s̄ / C``;
* the run: the noise of T rounds adds up as √(Σ s̄ₜ²·d), the signal at most as T·C (every
  round's clipped update pointing the same way): ``ratio_run = √(Σₜ s̄ₜ²·d) / (T·C)``, i.e.
  ``ratio_round / √T`` when every round is alike. This is docs/reproductions/004.md's
  computation (noise ≈ 3,457/ε × the signal for ADP-FL at Δ = 2C).

When ``ratio_run`` is at least :data:`WARN_RATIO` the run is told in one WARNING line: even if
all T rounds pushed the model the same way by the full clip norm, the accumulated noise would
be that many times longer than the accumulated signal. The reproduction reports measured
chance accuracy at ratio 4.3 and learning at 0.86 and 0.40 (004.md), so 10 flags only runs that
cannot learn; the quickstart's is 0.30. Strategies whose noise this module does not read
(per-coordinate LDP mechanisms, sparse-vector selection, DP-SGD clients) get no estimate.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import torch

from fl_lightning.strategies.base import Strategy
from fl_lightning.strategies.budgeted_uploads import BudgetedUploads
from fl_lightning.strategies.clipped_upload_noise import ClippedUploadNoise
from fl_lightning.utils.flat import trainable_parameters

log = logging.getLogger(__name__)

WARN_RATIO = 10.0
"""``ratio_run`` at or above which the run is warned (module docstring)."""


@dataclass(frozen=True)
class NoiseToSignal:
    """The estimate: per round, over the run, and what it was computed from."""

    ratio_round: float
    ratio_run: float
    rounds: int
    source: str
    """e.g. "Gaussian σ = 4.8·2C on each of 10 uploads a round, C = 1, d = 25,450"."""
    remedy: str


def _upload_noise(
    local: object, rounds: int, client_size: float | None
) -> tuple[list[float], float, str] | None:
    """(per-round noise std per coordinate of one upload, clip norm, noise kind), or None
    when the upload mechanism is not one this module reads."""
    if isinstance(local, BudgetedUploads) and local.private:
        up = local.upload
        budgets = local.planned_budgets() if local.rounds else []
        if not budgets and local.upload_epsilon is not None:
            budgets = [local.upload_epsilon] * rounds
        size = int(client_size) if client_size else None
        if not budgets or (up.sensitivity_kind == "record" and size is None):
            return None
        factor = math.sqrt(2.0) if up.mechanism == "laplace" else 1.0  # std of Lap(b) = √2·b
        sens = up.noise_sensitivity(size)
        stds = [factor * up.noise_multiplier(epsilon=e) * sens for e in budgets[:rounds]]
        return stds, up.clip_norm, up.mechanism
    if isinstance(local, ClippedUploadNoise):
        factor = math.sqrt(2.0) if local.noise == "laplace" else 1.0
        return [factor * local.scale] * rounds, local.clip_norm, local.noise
    return None


def estimate(
    strategy: Strategy,
    *,
    dimension: int,
    cohort_size: float,
    rounds: int,
    client_size: float | None = None,
) -> NoiseToSignal | None:
    """The noise-to-signal estimate of ``strategy``'s release (module docstring); None when the
    strategy adds no noise this module can read."""
    m, d, rounds = max(float(cohort_size), 1.0), max(int(dimension), 1), max(int(rounds), 1)
    central = strategy.central_dp
    local = strategy.local_dp
    if central is not None and central.noise_multiplier:
        clip = float(central.clip_norm)
        s = central.noise_multiplier * clip / m
        per_round = [s] * rounds
        source = (
            f"Gaussian σ = {central.noise_multiplier:g}·C on the sum of {m:g} clipped updates "
            f"a round, C = {clip:g}, d = {d:,}"
        )
        remedy = "more clients a round, a smaller noise_multiplier (larger ε), fewer coordinates"
    elif (upload := _upload_noise(local, rounds, client_size)) is not None:
        stds, clip, kind = upload
        per_round = [s / math.sqrt(m) for s in stds]
        source = (
            f"{kind} noise of std {stds[0]:.3g} a coordinate (round 0) on each of {m:g} uploads "
            f"a round, C = {clip:g}, d = {d:,}"
        )
        remedy = "more clients a round, a larger ε, fewer coordinates (a smaller model)"
    else:
        return None
    ratio_round = math.sqrt(d) * per_round[0] / clip
    total = math.sqrt(d * sum(s * s for s in per_round))
    ratio_run = total / (len(per_round) * clip)
    return NoiseToSignal(ratio_round, ratio_run, len(per_round), source, remedy)


def run_estimate(
    strategy: Strategy, global_net: torch.nn.Module, sampler: Any, data: Any, rounds: int
) -> NoiseToSignal | None:
    """:func:`estimate` for a set-up run: d the global model's trainable parameters, m the
    sampler's expected cohort, |D_i| the mean client size (for a record-level calibration)."""
    return estimate(
        strategy,
        dimension=sum(p.numel() for p in trainable_parameters(global_net)),
        cohort_size=sampler.expected_size(data.num_clients),
        rounds=rounds,
        client_size=float(data.client_sizes().mean()),
    )


def warning_line(est: NoiseToSignal | None) -> str | None:
    """The one WARNING line when ``est.ratio_run`` ≥ :data:`WARN_RATIO`, else None."""
    if est is None or not est.ratio_run >= WARN_RATIO:
        return None
    return (
        f"WARNING: noise-to-signal {est.ratio_run:,.3g} over {est.rounds} rounds "
        f"({est.ratio_round:,.3g} in one round's aggregate; {est.source}): the noise "
        f"outweighs any signal the run can accumulate, expect chance accuracy; lower it with "
        f"{est.remedy} (docs/privacy.md, Noise-to-signal)"
    )


__all__ = ["WARN_RATIO", "NoiseToSignal", "estimate", "run_estimate", "warning_line"]


def warn_before_round_zero(
    strategy: Strategy, global_net: torch.nn.Module, sampler: Any, data: Any, rounds: int, *,
    is_global_zero: bool,
) -> None:  # fmt: skip
    """One WARNING line before round 0 (rank 0 only) when the noise drowns any signal the run
    could accumulate (:func:`warning_line`)."""
    line = warning_line(run_estimate(strategy, global_net, sampler, data, rounds))
    if line and is_global_zero:
        log.warning(line)
