"""The records that travel between clients and the server within a round."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any

import torch

from fl_lightning.privacy.accounting.events import CohortSampling, SampledGaussian

Metrics = dict[str, float]
"""What a strategy hook or component observed this round (logged as ``strategy/<key>``)."""


@dataclass
class ClientUpdate:
    """One client's upload for one round.

    Attributes:
        client_id: index of the client in the population.
        delta: flat float32 vector, local weights minus the global weights the client started
            from (after client-side privatisation when a strategy applies one).
        num_examples: n_i, the client's dataset size.
        loss: mean local training loss over the round's local steps.
        metrics: further per-client numbers (logged as means over the cohort).
        extras: strategy-specific uploads (e.g. a control-variate delta for SCAFFOLD).
        dp_steps: the sample-level DP-SGD steps this client ran (empty without DP-SGD).
        base_round: the global model version the client started from (staleness in async FL).
    """

    client_id: int
    delta: torch.Tensor
    num_examples: int
    loss: float
    metrics: dict[str, float] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    dp_steps: list[SampledGaussian] = field(default_factory=list)
    base_round: int = 0


@dataclass
class RoundContext:
    """What the server knows at the start of a round, handed to every strategy hook.

    Attributes:
        round_idx: 0-based round index (= ``trainer.global_step``).
        total_rounds: planned number of rounds (``trainer.max_steps``), used by schedules.
        seed: the run's seed; generators are derived from (seed, round, client, purpose).
        num_clients: population size N.
        cohort: client ids sampled this round.
        expected_cohort_size: m for fixed-size sampling, q·N for Poisson sampling.
        sample_rate: the client sampling rate m/N or q.
        sampling: how the cohort was drawn (Poisson or fixed-size), from the cohort sampler;
            client-level mechanisms build their accounting event from it.
        global_params: flat float32 vector of the global model at the start of the round.
        client_config: the round's overrides of the local loop, as a dict
            (``RoundPlan.local.as_dict()``, e.g. ``{"noise_multiplier": 0.9}``); the server
            builds the round's context with it once the strategy planned the round.
        evaluate: ``evaluate(split)`` evaluates the *current* global model on the server's
            ``"val"`` or ``"test"`` split and returns its metrics (``{}`` when the split does
            not exist); for strategies whose schedule reacts to the server's loss (e.g.
            DPFL-AGN's noise decay). None outside a FederatedModule.
    """

    round_idx: int
    total_rounds: int
    seed: int
    num_clients: int
    cohort: list[int]
    expected_cohort_size: float
    sample_rate: float
    global_params: torch.Tensor
    client_config: dict[str, Any] = field(default_factory=dict)
    evaluate: Callable[[str], dict[str, float]] | None = None
    sampling: CohortSampling | None = None

    def cohort_sampling(self) -> CohortSampling:
        """``sampling``, which a client-level accounting event needs (never guessed)."""
        if self.sampling is None:
            raise ValueError(
                "RoundContext.sampling: unset, so the cohort's sampling (Poisson or fixed-size) "
                "is unknown and a client-level event cannot be accounted"
            )
        return self.sampling


@dataclass(frozen=True)
class ClientPlan:
    """What one client's local training needs from the strategy, fixed before it starts: the
    strategy builds it (``Strategy.configure_client``) and the local loop runs it without ever
    seeing the strategy (Flower's ``configure_fit`` role; review P2).

    Attributes:
        start_params: flat weights the client starts from and takes its delta against (the
            global model; a local-only baseline's own model).
        optimizer_state: the local optimizer's state to resume (None: a fresh optimizer).
        grad_hook: called with the client's parameters after each local backward pass, before
            the optimizer step (e.g. SCAFFOLD's control-variate correction); None: nothing.
        save_optimizer_state: receives the optimizer's state after local training when the
            strategy keeps it across rounds (DPFL-AGN's persisted Adam); None: not kept.
        local: the client's overrides of the local loop this round, as the round resolved them
            from the strategy's :class:`RoundPlan` (``RoundPlan.overrides_for``); the local loop
            reads them here, as values. ``Strategy.configure_client`` leaves it empty.
    """

    start_params: torch.Tensor
    optimizer_state: dict[str, Any] | None = None
    grad_hook: Callable[[Sequence[torch.nn.Parameter]], None] | None = None
    save_optimizer_state: Callable[[dict[str, Any]], None] | None = None
    local: LocalOverrides = field(default_factory=lambda: LocalOverrides())


@dataclass(frozen=True)
class LocalOverrides:
    """Typed overrides of the local loop for one round (or one client of it); a field left None
    keeps the configured value (``client/config.py: LocalTrainingConfig``, whose
    ``with_overrides`` applies :meth:`as_dict` and checks the result).

    Attributes:
        lr, momentum, weight_decay, local_epochs, local_steps, batch_size, prox_mu, precision:
            the ``LocalTrainingConfig`` fields of the same names (FedProx's μ, a schedule's
            lr); ``precision`` is still refused under DP-SGD (``LocalTrainingConfig``).
        noise_multiplier, max_grad_norm: DP-SGD's σ and C (``DPSGDConfig``), e.g. DPFL-AGN's
            decayed σ; refused when the clients do not run DP-SGD.
    """

    lr: float | None = None
    momentum: float | None = None
    weight_decay: float | None = None
    local_epochs: int | None = None
    local_steps: int | None = None
    batch_size: int | None = None
    prox_mu: float | None = None
    precision: str | None = None
    noise_multiplier: float | None = None
    max_grad_norm: float | None = None

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> LocalOverrides:
        """The overrides of a ``{field: value}`` mapping (a strategy's short form); an unknown
        key is refused with one line naming it."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"strategy: unknown local-training overrides {unknown}; "
                f"LocalOverrides has {sorted(known)}"
            )
        return cls(**dict(values))

    def as_dict(self) -> dict[str, Any]:
        """The fields that are set, as ``LocalTrainingConfig.with_overrides`` takes them."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }

    def merged(self, other: LocalOverrides) -> LocalOverrides:
        """These overrides with ``other``'s set fields on top."""
        return replace(self, **other.as_dict())


@dataclass(frozen=True)
class RoundPlan:
    """What a round trains, fixed by the strategy before any client trains
    (``Strategy.configure_round``): the cohort it dispatches and the typed overrides of their
    local loop. The server trains it through the executor, which never sees the strategy.

    Attributes:
        cohort: the client ids dispatched this round, in order.
        local: overrides of every client's local loop this round.
        per_client: a client's own overrides, on top of ``local`` (read-only).
    """

    cohort: tuple[int, ...]
    local: LocalOverrides = field(default_factory=LocalOverrides)
    per_client: Mapping[int, LocalOverrides] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cohort", tuple(int(c) for c in self.cohort))
        object.__setattr__(self, "per_client", MappingProxyType(dict(self.per_client)))
        strangers = sorted(set(self.per_client) - set(self.cohort))
        if strangers:
            raise ValueError(
                f"strategy: per-client overrides for clients {strangers} not in the cohort"
            )

    def overrides_for(self, client_id: int) -> LocalOverrides:
        """Client ``client_id``'s overrides: the round's, with its own on top."""
        own = self.per_client.get(client_id)
        return self.local if own is None else self.local.merged(own)

    def with_local(self, **overrides: Any) -> RoundPlan:
        """This plan with more round-wide overrides (``LocalOverrides`` fields)."""
        return replace(self, local=self.local.merged(LocalOverrides(**overrides)))
