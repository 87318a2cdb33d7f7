"""cpSGD (Agarwal, Suresh, Yu, Kumar, McMahan, NeurIPS 2018, arXiv:1805.10559).

Client: clip the delta to L2 norm C, rotate with a randomised Walsh–Hadamard transform (signs
shared by the cohort, derived from (seed, round)), clamp to [−X, X] and stochastically quantise
to k levels, add Binomial noise Bin(m, p) to each integer level, upload the integers.
Server: sum the integers, remove the noise mean (count·m·p), dequantise, unrotate and divide by
the cohort size (cpSGD estimates the mean of the clients' vectors).

Privacy (``fl_lightning.privacy.mechanisms.binomial``): Theorem 1 of the paper, with worst-case
level sensitivities of one client's clipped update. ``trust: local`` (default) uses the client's
own noise only (N = m) because no secure aggregation is simulated and the server sees every
upload; ``trust: aggregate`` uses N = m·|cohort| (the paper's setting, secure aggregation
assumed) for the released model, while the server, which receives every upload, is priced at
N = m (its row of the guarantee's observers). Per-round ε goes to the accountant's local ledger
(basic composition over rounds).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Literal

import torch

from fl_lightning.privacy.accounting.events import RoundPrivacy
from fl_lightning.privacy.guarantee.server_view import ServerView
from fl_lightning.privacy.mechanisms.binomial import (
    BinomialMechanism,
    calibrate_trials,
    dequantize_sum,
    next_power_of_two,
    quantized_sensitivities,
    random_signs,
    unrotate,
)
from fl_lightning.privacy.mechanisms.params import check_clip_norm
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.base import Metrics, Strategy, StrategyTraits
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.utils.rng import generator_for

Trust = Literal["local", "aggregate"]


class CPSGD(Strategy):
    """Rotation + k-level stochastic quantisation + Binomial noise.

    Args:
        clip_norm: C.
        levels: k quantisation levels (paper: k = 2..16; default 16).
        bound_factor: X = bound_factor · C · sqrt(2 ln(4 d'/δ) / d') — the w.h.p. bound of a
            rotated coordinate (Agarwal et al. Lemma 8 style); default 1.
        p: Binomial success probability (default 0.5).
        trials: m, Bin(m, p) trials per client. ``None``: calibrated from ``epsilon``.
        epsilon: per-round target ε for the calibration of m (Theorem 1).
        delta: δ of the per-round (ε, δ).
        trust: ``local`` or ``aggregate`` (see module docstring).
    """

    reduction = "stream"  # aggregate reads each update once (not a sum of partials)

    def __init__(
        self,
        *,
        clip_norm: float = 1.0,
        levels: int = 16,
        bound_factor: float = 1.0,
        p: float = 0.5,
        trials: int | None = None,
        epsilon: float | None = 0.5,
        delta: float = 1e-5,
        trust: Trust = "local",
    ) -> None:
        super().__init__(weighting="uniform")
        check_clip_norm(clip_norm)
        if levels < 2:
            raise ValueError(f"strategy.levels: must be >= 2, got {levels}")
        if bound_factor <= 0:
            raise ValueError(f"strategy.bound_factor: must be > 0, got {bound_factor}")
        if not 0 < p < 1:
            raise ValueError(f"strategy.p: must be in (0, 1), got {p}")
        if trials is not None and trials < 0:
            raise ValueError(f"strategy.trials: must be >= 0, got {trials}")
        if trials is None and (epsilon is None or epsilon <= 0):
            raise ValueError("strategy.epsilon: must be > 0 when strategy.trials is unset")
        if not 0 < delta < 1:
            raise ValueError(f"strategy.delta: must be in (0, 1), got {delta}")
        if trust not in ("local", "aggregate"):
            raise ValueError(f"strategy.trust: expected 'local' or 'aggregate', got {trust!r}")
        self.clip_norm = float(clip_norm)
        self.levels = int(levels)
        self.bound_factor = float(bound_factor)
        self.p = float(p)
        self.trials = trials
        self.target_epsilon = epsilon
        self.delta = float(delta)
        self.trust = trust
        self.padded = 1

    # -- setup -------------------------------------------------------------------------------
    def setup_federation(self, spec: FederationSpec) -> None:
        super().setup_federation(spec)
        self.padded = next_power_of_two(spec.num_parameters)
        self.calibrate_trials()

    @property
    def bound(self) -> float:
        d = self.padded
        return self.bound_factor * self.clip_norm * math.sqrt(2 * math.log(4 * d / self.delta) / d)

    def sensitivities(self) -> tuple[float, float, float]:
        return quantized_sensitivities(
            clip_norm=self.clip_norm, bound=self.bound, levels=self.levels, dimension=self.padded
        )

    def calibrate_trials(self) -> None:
        """Sets m from the per-round target ε (Theorem 1); needs the model size, so it runs in
        ``setup_federation``."""
        if self.trials is not None:
            return
        assert self.target_epsilon is not None
        self.trials = calibrate_trials(
            target_epsilon=self.target_epsilon,
            p=self.p,
            delta=self.delta,
            dimension=self.padded,
            sensitivities=self.sensitivities(),
        )

    def _signs(self, ctx: RoundContext) -> torch.Tensor:
        gen = generator_for(ctx.seed, ctx.round_idx, "cpsgd_rotation")
        return random_signs(self.padded, generator=gen).to(ctx.global_params.device)

    # -- client ------------------------------------------------------------------------------
    def mechanism(self, cohort_size: int, signs: torch.Tensor | None = None) -> BinomialMechanism:
        """One client's clip, rotation, quantisation and Binomial noise, with its event
        (Theorem 1 at N = m, or m·|cohort| under ``trust: aggregate``)."""
        trials = int(self.trials or 0)
        return BinomialMechanism(
            clip_norm=self.clip_norm,
            levels=self.levels,
            bound=self.bound,
            trials=trials,
            p=self.p,
            delta=self.delta,
            dimension=self.padded,
            signs=signs,
            accounted_trials=trials * (cohort_size if self.trust == "aggregate" else 1),
        )

    def decode_sum(
        self, level_sum: torch.Tensor, count: int, signs: torch.Tensor, d: int
    ) -> torch.Tensor:
        total = dequantize_sum(
            level_sum,
            count=count,
            levels=self.levels,
            bound=self.bound,
            trials=int(self.trials or 0),
            p=self.p,
        )
        return unrotate(total, signs, d)

    def process_update(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        if self.padded < update.delta.numel():
            self.padded = next_power_of_two(update.delta.numel())
        mechanism = self.mechanism(max(len(ctx.cohort), 1), signs=self._signs(ctx))
        out = mechanism.release(update.delta, generator=generator)
        update.delta = out.value
        update.metrics["delta_norm"] = out.norm
        update.metrics["clipped"] = float(out.norm > self.clip_norm)
        return update

    # -- server ------------------------------------------------------------------------------
    def aggregate(
        self, updates: Iterable[ClientUpdate], ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        total: torch.Tensor | None = None
        count = 0
        for update in updates:
            total = update.delta.clone() if total is None else total.add_(update.delta)
            count += 1
        if total is None:
            return torch.zeros_like(ctx.global_params), {}
        d = ctx.global_params.numel()
        mean = self.decode_sum(total, count, self._signs(ctx), d).div_(count)
        return mean, {
            "trials": float(self.trials or 0),
            "epsilon_round": self.round_epsilon(count),
        }

    # -- privacy -----------------------------------------------------------------------------
    def round_epsilon(self, cohort_size: int) -> float:
        return self.mechanism(cohort_size).epsilon()

    @property
    def server_view(self) -> ServerView:
        """What the server receives: each client's quantised update with its Binomial noise
        (every upload: no secure aggregation is simulated, whatever ``trust`` says)."""
        return ServerView("noised uploads")

    @property
    def traits(self) -> StrategyTraits:
        return dataclasses.replace(super().traits, private=True)

    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        """The mechanism's event per upload, or why Theorem 1 gives nothing. Under ``trust:
        aggregate`` the released sum is priced with the cohort's noise (N = m·|cohort|), and
        each upload as the server receives it (no secure aggregation is simulated: it sees
        every upload) with its own client's only (N = m; ε = ∞ where Theorem 1 gives nothing
        at N = m)."""
        mechanism = self.mechanism(max(len(ctx.cohort), 1))
        release = mechanism.event(self.padded)
        if release is None:
            return RoundPrivacy(no_guarantee=mechanism.no_guarantee)
        spent = RoundPrivacy(local={cid: [release] for cid in ctx.cohort})
        if self.trust == "aggregate":
            alone = self.mechanism(1).observed_event(self.padded)
            spent.local_seen_by_server = {cid: [alone] for cid in ctx.cohort}
        return spent

    def state_dict(self) -> dict:
        return {"trials": self.trials}

    def load_state_dict(self, state_dict: dict) -> None:
        self.trials = state_dict["trials"]
