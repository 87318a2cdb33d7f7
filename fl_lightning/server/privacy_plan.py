"""Privacy planning, one owner: every unset σ fixed from the target before training, and the
spend of a round stated before any client trains (the budget stop reads it).

* :func:`resolve_client_noise` — the DP-SGD (C, σ) as one frozen ``GaussianParams``: σ as
  configured, or calibrated for the most expensive client over the participations no client
  exceeds with probability 1 − 10⁻³ (``privacy/accounting/budget.py``); a target that cannot pay for
  one round is refused with the client and its cost named. :func:`calibrate_client_noise` returns
  the local-training config carrying it; it runs before the strategy is set up, so that
  ``FederationSpec.local`` is what the clients run.
* :func:`privacy_target` — the target every unset σ is calibrated to; the strategy calibrates
  its own client-level σ to it in ``Strategy.setup_federation`` (``FederationSpec.privacy``),
  after :func:`check_strategy_target` refused what the accountant cannot account.
* :func:`planned_privacy` — the strategy's round events plus one DP-SGD event per client of the
  cohort, from the same rule (``dp_sgd_event``) the local loop uses.
* :func:`budget_stop` — whether recording the planned round would pass the target ε: the run
  stops before that round, or is refused when the first round alone cannot be paid.
* :func:`declare_private_run` — whether the accountant reports a guarantee or ε = ∞ (nothing
  of the run is privatised).

They are functions of the strategy, the accountant, the local-training config and the client
sizes, so the round loop only wires them (docs/architecture.md, review P3).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.privacy.accounting.analysis import calibrate_noise_multiplier
from fl_lightning.privacy.accounting.budget import (
    BudgetError,
    ClientCost,
    dp_sgd_event,
    dp_sgd_histories,
    dp_sgd_rate,
    max_participations,
    most_expensive_round,
    refuse_unaffordable_round,
)
from fl_lightning.privacy.accounting.events import CohortSampling, RoundPrivacy
from fl_lightning.privacy.guarantee.observers import ServerSees
from fl_lightning.privacy.mechanisms.params import GaussianParams
from fl_lightning.records import RoundContext
from fl_lightning.strategies.spec import PrivacyTarget

if TYPE_CHECKING:
    from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
    from fl_lightning.strategies.base import Strategy

log = logging.getLogger(__name__)


def say_sigma_caps(field: str, sigma: float | None, target: float | None) -> None:
    """Says which wins when a σ and ``privacy.target_epsilon`` are both given: σ is used, the
    target caps the budget (the exact stop)."""
    if sigma is None or target is None:
        return
    log.warning(
        "%s = %g is used as given; privacy.target_epsilon = %g caps the budget (training "
        "stops before the round that would exceed it). Set the noise multiplier to null to "
        "calibrate it to the target instead.",
        field,
        sigma,
        target,
    )


def privacy_target(accountant: PrivacyAccountant | None, sampling: CohortSampling) -> PrivacyTarget:
    """The run's target ε, δ, accountant backend and cohort sampling (no target, δ = 1e-5 and
    RDP for a run without an accountant), as both calibrations read them."""
    if accountant is None:
        return PrivacyTarget(sampling=sampling)
    return PrivacyTarget(
        epsilon=accountant.target_epsilon,
        delta=accountant.delta,
        accountant=accountant.accountant,
        sampling=sampling,
    )


def check_strategy_target(strategy: Strategy, target: PrivacyTarget) -> None:
    """Before the strategy calibrates its σ to ``target`` (``Strategy.setup_federation``):
    refuses an accountant without a fully adaptive composition theorem for a strategy that
    chooses its noise from released outputs (:func:`refuse_adaptive_noise`), and says which wins
    when a σ and a target are both given. (Every accountant accounts every cohort sampling:
    fixed-size cohorts by their dominating pair, ``privacy/accounting/analysis.py``.)"""
    refuse_adaptive_noise(strategy.traits.adaptive_noise, target.accountant)
    central = strategy.central_dp
    sigma = central.noise_multiplier if central else getattr(strategy, "noise_multiplier", None)
    say_sigma_caps("strategy.noise_multiplier", sigma, target.epsilon)


def refuse_adaptive_noise(adaptive: str | None, accountant: str) -> None:
    """Noise chosen from released outputs (``StrategyTraits.adaptive_noise``) composes by RDP
    as a Rényi filter at each order (Feldman & Zrnic 2021, Thm. 3.1); PLD and PRV compose
    mechanisms whose parameters are fixed in advance, so they are refused (docs/privacy.md)."""
    if adaptive and accountant != "rdp":
        raise ValueError(
            f"privacy.accountant: {accountant!r} composes noise fixed in advance, but {adaptive}; "
            "only RDP composes that (a Rényi filter per order, Feldman & Zrnic 2021): use rdp"
        )


def resolve_client_noise(
    config: LocalTrainingConfig,
    *,
    client_sizes: Sequence[int],
    sampling: CohortSampling,
    rounds: int,
    accountant: PrivacyAccountant | None,
) -> GaussianParams | None:
    """The clients' DP-SGD (C, σ), resolved once as a frozen value (None without DP-SGD): the
    configured σ, or when unset σ calibrated so that the most expensive client stays within the
    target over its participations; refuses a target that cannot pay for one round
    (``BudgetError``)."""
    plan = privacy_target(accountant, sampling)
    target, delta, backend = plan.epsilon, plan.delta, plan.accountant
    dp = config.dp_sgd
    if dp is None:
        return None
    costs = [
        ClientCost(cid, n, dp_sgd_rate(batch_size=config.batch_size, size=n), config.steps_for(n))
        for cid, n in enumerate(client_sizes)
        if n > 0
    ]
    sigma = dp.noise_multiplier
    if sigma is None:
        k = max_participations(rounds, sampling.rate, len(costs))
        if not costs and target is not None:
            raise BudgetError("data: no client holds any example to calibrate DP-SGD for")
        sigma = calibrate_noise_multiplier(
            dp_sgd_histories(costs, participations=k),
            target_epsilon=target,
            delta=delta,
            accountant=backend,
            field="client.dp_sgd.noise_multiplier",
        )
        _, worst = most_expensive_round(
            costs, noise_multiplier=sigma, delta=delta, accountant=backend, participations=k
        )
        log.info(
            "client.dp_sgd.noise_multiplier calibrated to %.4g: client %d (%d examples, "
            "q = %.3g, %d steps a round) stays within ε = %g over %d participations",
            sigma,
            worst.client_id,
            worst.size,
            worst.rate,
            worst.steps,
            target,
            k,
        )
    else:
        say_sigma_caps("client.dp_sgd.noise_multiplier", sigma, target)
    sigma = float(sigma)
    cost, worst = most_expensive_round(
        costs, noise_multiplier=sigma, delta=delta, accountant=backend
    )
    refuse_unaffordable_round(
        cost,
        target,
        what=(
            f"client {worst.client_id} ({worst.size} examples, q = B/n = {worst.rate:.3g}, "
            f"{worst.steps} DP-SGD steps a round at σ = {sigma:.4g})"
        ),
        field="client.dp_sgd.noise_multiplier, client.batch_size, local epochs/steps",
    )
    return GaussianParams(dp.max_grad_norm, sigma, prefix="client.dp_sgd")


def calibrate_client_noise(
    config: LocalTrainingConfig,
    *,
    client_sizes: Sequence[int],
    sampling: CohortSampling,
    rounds: int,
    accountant: PrivacyAccountant | None,
) -> LocalTrainingConfig:
    """The local-training config with the DP-SGD σ of :func:`resolve_client_noise` (the config
    itself is never mutated; without DP-SGD it is returned as it is)."""
    params = resolve_client_noise(
        config, client_sizes=client_sizes, sampling=sampling, rounds=rounds, accountant=accountant
    )
    if params is None or config.dp_sgd is None:
        return config
    if config.dp_sgd.noise_multiplier == params.noise_multiplier:
        return config
    return replace(config, dp_sgd=replace(config.dp_sgd, noise_multiplier=params.noise_multiplier))


def declare_private_run(
    accountant: PrivacyAccountant | None, strategy: Strategy, *, uses_dp_sgd: bool
) -> None:
    """Tells the accountant whether anything of the run is privatised (DP-SGD clients or a
    private strategy, ``StrategyTraits.private``); a run that privatises nothing reports ε = ∞
    with the reason instead of the ε of no release."""
    if accountant is None:
        return
    accountant.private_run = uses_dp_sgd or strategy.traits.private
    accountant.adaptive_noise = strategy.traits.adaptive_noise
    accountant.server_view = ServerSees.of(strategy.server_view)
    accountant.not_private_reason = (
        f"{type(strategy).__name__} uploads and aggregates updates without noise"
    )


def copy_events(events: RoundPrivacy) -> RoundPrivacy:
    """A copy of ``events`` whose lists and dicts can be extended without touching it."""
    return RoundPrivacy(
        client_level=list(events.client_level),
        record_level=dict(events.record_level),
        local=dict(events.local),
        no_guarantee=events.no_guarantee,
        distributed=list(events.distributed),
    )


def planned_privacy(
    strategy: Strategy,
    config: LocalTrainingConfig,
    client_sizes: torch.Tensor,
    ctx: RoundContext,
    *,
    events: RoundPrivacy | None = None,
) -> RoundPrivacy:
    """What the round will spend: the strategy's events (``events``, the round's one
    ``Strategy.round_privacy``; asked for when not given) plus, for a DP-SGD client, one sampled
    Gaussian per cohort member (rate B/nᵢ, its local steps)."""
    spent = copy_events(strategy.round_privacy(ctx) if events is None else events)
    cfg = config.with_overrides(ctx.client_config)
    if cfg.dp_sgd is not None:
        assert cfg.dp_sgd.noise_multiplier is not None
        for cid in ctx.cohort:
            n = int(client_sizes[cid])
            spent.record_level[cid] = [
                dp_sgd_event(
                    float(cfg.dp_sgd.noise_multiplier),
                    batch_size=cfg.batch_size,
                    size=n,
                    steps=cfg.steps_for(n),
                )
            ]
    return spent


def budget_stop(
    accountant: PrivacyAccountant, planned: RoundPrivacy, *, round_idx: int, first_round: bool
) -> str | None:
    """Why the run stops before round ``round_idx`` (None: recording ``planned`` stays within
    ``privacy.target_epsilon``). What a round spends is known before any client trains, so the
    stop is exact; a target that cannot pay for the first round is refused (``BudgetError``)."""
    if not accountant.would_exceed(planned):
        return None
    if first_round:
        alone = accountant.report_alone(planned)
        raise BudgetError(
            f"privacy.target_epsilon: {accountant.target_epsilon:g} cannot pay "
            f"for the first round, which costs ε = {alone['privacy/epsilon']:.4g} "
            f"({alone['privacy/guarantee']}); raise the target or add noise"
        )
    return (
        f"Stopping before round {round_idx}: it would exceed target ε = {accountant.target_epsilon}"
    )
