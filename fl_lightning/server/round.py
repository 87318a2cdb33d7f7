"""One federated round, in the order it runs, with nothing of Lightning in it.

``FederatedModule.on_fit_start`` binds a :class:`FederatedRound` to the run's parts (strategy,
accountant, sampler, executor, data, client, global model); ``FederatedModule.training_step``
then calls its steps in this order (docs/architecture.md, "One round"):

1. :meth:`~FederatedRound.plan` — flatten the global model, draw the cohort from a generator
   keyed (seed, round), then the strategy plans the round: ``select_clients`` and
   ``configure_round``, whose typed :class:`~fl_lightning.records.RoundPlan` (cohort, local
   overrides) fixes the round's context (built anew at each step, never mutated);
2. :meth:`~FederatedRound.budget_stop` — what the round will spend, before any client trains,
   against the target ε (``privacy_plan.py``);
3. :meth:`~FederatedRound.train_and_reduce` — this process's share of the cohort
   (``sharding.py``) trained by the executor from each client's plan (:func:`client_plans`: the
   strategy's ``configure_client`` with the client's overrides as values; the executor never
   sees the strategy), each trained update then processed by the strategy on the client
   (:func:`processed`: ``process_update``, clip and privatise) and the stream reduced into the
   aggregate with central noise from a generator keyed (seed, round) (``reduction.py``);
4. :meth:`~FederatedRound.server_step` — the aggregate as the pseudo-gradient −Δ of the server
   optimizer (Reddi et al. 2021, Alg. 1), then ``Strategy.after_round`` (whose metrics join
   those ``aggregate`` returned: the round's ``strategy/*``);
5. :meth:`~FederatedRound.metrics` and :meth:`~FederatedRound.account` — what the round logs, and
   the accountant recording what it spent.

:meth:`~FederatedRound.run_round` runs the five in that order and returns a
:class:`RoundOutcome`; ``FederatedModule.training_step`` and ``fl_lightning.testing.simulate``
(a round without Lightning) both call it, so the two cannot drift apart.

What Lightning owns stays in the module: the round index (``global_step``), the number of rounds
(``max_steps``), the server optimizer's checkpointed state, logging and stopping.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import torch

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.client.local_loop import name_failed_clients
from fl_lightning.privacy.accounting.events import RoundPrivacy
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.records import ClientPlan, ClientUpdate, LocalOverrides, RoundContext, RoundPlan
from fl_lightning.server.distributed import rank_and_world
from fl_lightning.server.executor import ClientPlans, Executor
from fl_lightning.server.privacy_plan import budget_stop, copy_events, planned_privacy
from fl_lightning.server.reduction import ReducedRound, RoundUpdates, hook_metrics, reduce_round
from fl_lightning.server.sampling import CohortSampler
from fl_lightning.server.sharding import clients_of_this_process
from fl_lightning.strategies.base import Metrics, Strategy, unsynced_state_problem
from fl_lightning.utils.flat import flatten_into, trainable_parameters
from fl_lightning.utils.rng import generator_for

if TYPE_CHECKING:
    from fl_lightning.callbacks import ClientHooks


class ServerOptimizer(Protocol):
    """The server optimizer as a round uses it (a torch optimizer or Lightning's wrapper)."""

    def step(self, closure: Any = None) -> Any: ...

    def zero_grad(self, set_to_none: bool = True) -> None: ...


Reducer = Callable[[Strategy, RoundUpdates, RoundContext, torch.Generator], ReducedRound]
"""How a round's updates become the aggregate (``reduction.py: reduce_round``; the testing
harness passes one that emulates several processes or the ``gather`` path)."""


@dataclass
class RoundOutcome:
    """One round as :meth:`FederatedRound.run_round` ran it.

    Attributes:
        ctx: the round's context (cohort as dispatched, per-round overrides).
        planned: what the round was priced at before any client trained (the strategy's events
            plus the DP-SGD clients'); None without an accountant.
        stop: why the run stopped before this round (the budget); None when it ran.
        reduced: the aggregate, the aggregation's metrics and the updates' records; None when
            the round stopped.
        strategy_metrics: what the strategy's hooks returned (``aggregate`` | ``after_round``).
        metrics: what the round logs (``round/*``, ``train/*``, ``clients/*``,
            ``strategy/*``, ``privacy/*``).
    """

    ctx: RoundContext
    planned: RoundPrivacy | None = None
    stop: str | None = None
    reduced: ReducedRound | None = None
    strategy_metrics: Metrics = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


def name_failed_round(err: BaseException, round_idx: int) -> None:
    """Adds a note naming the round to ``err`` raised while the round ran, unless a note already
    names it (the executor's, which names the client too: ``executor.py:
    name_failed_clients``, ``client/local_loop.py``). The exception keeps its type and message."""
    notes = getattr(err, "__notes__", ())
    if not any(f"round {round_idx}" in note for note in notes):
        err.add_note(f"round {round_idx} failed")


class FederatedRound:
    """The steps of a round, bound to one fit's parts (see the module docstring).

    Args:
        strategy: the aggregation strategy.
        accountant: the privacy accountant; None for a run without accounting.
        sampler: draws each round's cohort.
        executor: trains a list of clients from their plans and yields their trained updates
            (never sees the strategy).
        data: the FederatedDataModule (client sizes and data, on the run's device).
        local: the run's local-training config, its DP-SGD σ fixed by the set-up
            (``federation.py: set_up_federation``).
        global_net: the global model, updated in place by :meth:`server_step`.
        seed: the seed every generator of the run is keyed by.
        device: where the global model lives.
        reduce: how the updates become the aggregate (default ``reduce_round``: one process,
            or the run's DDP processes).
    """

    def __init__(
        self,
        *,
        strategy: Strategy,
        accountant: PrivacyAccountant | None,
        sampler: CohortSampler,
        executor: Executor,
        data: Any,
        local: LocalTrainingConfig,
        global_net: torch.nn.Module,
        seed: int,
        device: torch.device,
        reduce: Reducer = reduce_round,
    ) -> None:
        self.strategy = strategy
        self.accountant = accountant
        self.sampler = sampler
        self.executor = executor
        self.data = data
        self.local = local
        self.global_net = global_net
        self.seed = seed
        self.device = device
        self.reduce = reduce
        # The global model as one flat buffer (RoundContext.global_params), refilled each round.
        self._global_flat = torch.empty(
            sum(p.numel() for p in trainable_parameters(global_net)), device=device
        )

    def plan(
        self, round_idx: int, total_rounds: int, evaluate: Callable[..., dict[str, float]]
    ) -> tuple[RoundContext, RoundPlan]:
        """The round's context and plan: the global parameters and the sampled cohort (keyed
        (seed, round)), then the strategy's ``select_clients`` and ``configure_round``
        (:func:`plan_round`)."""
        n = self.data.num_clients
        flatten_into(trainable_parameters(self.global_net), self._global_flat)
        sampled = RoundContext(
            round_idx=round_idx,
            total_rounds=total_rounds,
            seed=self.seed,
            num_clients=n,
            cohort=self.sampler.sample(self.seed, round_idx, n),
            expected_cohort_size=self.sampler.expected_size(n),
            sample_rate=self.sampler.sample_rate(n),
            global_params=self._global_flat,
            evaluate=evaluate,
            sampling=self.sampler.sampling(n),
        )
        return plan_round(self.strategy, sampled)

    def strategy_events(self, ctx: RoundContext) -> RoundPrivacy | None:
        """The strategy's events of this round (``Strategy.round_privacy``), asked for once a
        round and used both to price the round and to record it; None without an accountant."""
        return None if self.accountant is None else self.strategy.round_privacy(ctx)

    def planned_privacy(
        self, ctx: RoundContext, events: RoundPrivacy | None = None
    ) -> RoundPrivacy:
        """What the round will spend, known before any client trains."""
        return planned_privacy(
            self.strategy,
            self.local,
            self.data.client_sizes(),
            ctx,
            events=events,
        )

    def budget_stop(
        self,
        ctx: RoundContext,
        *,
        first_round: bool,
        events: RoundPrivacy | None = None,
        planned: RoundPrivacy | None = None,
    ) -> str | None:
        """Why the run stops before this round (None: it goes on, or nothing is accounted);
        ``planned`` is the round's :meth:`planned_privacy` when already computed."""
        if self.accountant is None:
            return None
        return budget_stop(
            self.accountant,
            self.planned_privacy(ctx, events) if planned is None else planned,
            round_idx=ctx.round_idx,
            first_round=first_round,
        )

    def run_round(
        self,
        round_idx: int,
        total_rounds: int,
        optimizer: ServerOptimizer,
        evaluate: Callable[..., dict[str, float]],
        *,
        first_round: bool,
    ) -> RoundOutcome:
        """One round, steps 1-5 of the module docstring in order: the context, the price of the
        round and the budget stop, local training reduced into the aggregate, the server step,
        then the round's metrics and the accountant recording it (evaluation and logging stay
        with the caller). An exception raised on the way carries a note naming the round (and
        the client, where one client's data, plan, training or processing raised)."""
        try:
            return self._run_round(round_idx, total_rounds, optimizer, evaluate, first_round)
        except Exception as err:
            name_failed_round(err, round_idx)
            raise

    def _run_round(
        self,
        round_idx: int,
        total_rounds: int,
        optimizer: ServerOptimizer,
        evaluate: Callable[..., dict[str, float]],
        first_round: bool,
    ) -> RoundOutcome:
        start = time.perf_counter()
        ctx, plan = self.plan(round_idx, total_rounds, evaluate)
        events = self.strategy_events(ctx)  # once a round: prices and records the round
        planned = None if self.accountant is None else self.planned_privacy(ctx, events)
        stop = self.budget_stop(ctx, first_round=first_round, events=events, planned=planned)
        if stop:
            return RoundOutcome(ctx, planned, stop=stop)
        reduced = self.train_and_reduce(ctx, plan)
        observed = self.server_step(optimizer, reduced.delta, ctx)
        strategy_metrics = reduced.metrics | observed
        seconds = time.perf_counter() - start
        metrics = self.metrics(ctx, reduced.updates, strategy_metrics, seconds)
        metrics.update(self.account(ctx, reduced.updates, events))
        return RoundOutcome(ctx, planned, None, reduced, strategy_metrics, metrics)

    def train_and_reduce(self, ctx: RoundContext, plan: RoundPlan) -> ReducedRound:
        """The round's aggregate, what the strategy's aggregation observed and the records of
        every update (every rank's, under DDP): this process's clients trained from their plans
        by the executor, processed by the strategy as they arrive (a stream: the cohort is held
        at once only when the strategy's reduction is ``"gather"``), then reduced."""
        clients = clients_of_this_process(ctx, self.local, self.data.client_sizes())
        trained = self.executor.run(clients, client_plans(self.strategy, ctx, plan), ctx, self.data)
        local = RoundUpdates(processed(self.strategy, trained, ctx, self.executor.hooks))
        central = generator_for(self.seed, ctx.round_idx, "central", device=self.device)
        return self.reduce(self.strategy, local, ctx, central)

    def server_step(
        self, optimizer: ServerOptimizer, aggregate: torch.Tensor, ctx: RoundContext
    ) -> Metrics:
        """Applies the aggregate as the pseudo-gradient −Δ (Reddi et al. 2021, Alg. 1), then
        lets the strategy see the round's result (``Strategy.after_round``); returns what the
        strategy observed there."""
        offset = 0
        for p in trainable_parameters(self.global_net):
            n = p.numel()
            p.grad = -aggregate[offset : offset + n].view_as(p).to(p.dtype)
            offset += n
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        observed = self.strategy.after_round(ctx, aggregate)
        return hook_metrics(observed, self.strategy, "after_round")

    def metrics(
        self, ctx: RoundContext, stats: RoundUpdates, strategy_metrics: Metrics, seconds: float
    ) -> dict[str, float]:
        """What the round logs: its time and cohort, the clients' mean loss and metrics, and
        what the strategy's hooks returned this round (``strategy/*``)."""
        metrics: dict[str, float] = {
            "round/time_s": seconds,
            "round/cohort_size": float(len(ctx.cohort)),
            "round/index": float(ctx.round_idx),
        }
        if stats.losses:
            metrics["train/loss"] = sum(stats.losses) / len(stats.losses)
        for k, values in stats.metrics.items():
            metrics[f"clients/{k}"] = sum(values) / len(values)
        for k, v in strategy_metrics.items():
            metrics[f"strategy/{k}"] = float(v)
        return metrics

    def account(
        self, ctx: RoundContext, stats: RoundUpdates, events: RoundPrivacy | None = None
    ) -> dict[str, float]:
        """Records what the round spent (the strategy's ``events``, the same that priced the
        round, plus the DP-SGD clients' own) and returns the accountant's numeric report (ε per
        level); empty without one."""
        if self.accountant is None:
            return {}
        spent = copy_events(self.strategy.round_privacy(ctx) if events is None else events)
        spent.record_level.update(stats.dp_steps)
        self.accountant.record(spent)
        report = self.accountant.report(tail=False)  # the tail: in the summary, not each round
        return {k: v for k, v in report.items() if isinstance(v, float)}


def plan_round(strategy: Strategy, sampled: RoundContext) -> tuple[RoundContext, RoundPlan]:
    """The strategy's plan of a round whose sampled context is ``sampled``: the clients it
    dispatches (``select_clients``), then its ``configure_round`` on the context of those, and
    the round's context built from the plan (its cohort; its overrides as
    ``RoundContext.client_config``). Each step builds a new context; none is mutated. A
    ``configure_round`` that returns a mapping (``{"prox_mu": 0.1}``, the short form) gets a
    plan of the dispatched cohort with those overrides (unknown keys are refused)."""
    selected = replace(sampled, cohort=list(strategy.select_clients(sampled)))
    plan = as_round_plan(strategy.configure_round(selected), selected)
    ctx = replace(selected, cohort=list(plan.cohort), client_config=plan.local.as_dict())
    return ctx, plan


def as_round_plan(planned: RoundPlan | Mapping[str, Any], ctx: RoundContext) -> RoundPlan:
    """``configure_round``'s answer as a :class:`RoundPlan` (a mapping: ``ctx``'s cohort with
    those overrides)."""
    if isinstance(planned, RoundPlan):
        return planned
    if isinstance(planned, Mapping):
        return RoundPlan(tuple(ctx.cohort), LocalOverrides.from_mapping(planned))
    raise TypeError(
        f"strategy: configure_round returned {type(planned).__name__}; it returns a RoundPlan "
        "(fl_lightning.records: the cohort and the local-training overrides)"
    )


def client_plans(strategy: Strategy, ctx: RoundContext, plan: RoundPlan) -> ClientPlans:
    """What the executor calls for each client it reaches: the strategy's plan of that client
    (``configure_client``: start weights, optimizer state, gradient hook) with the client's
    local overrides from ``plan`` as values (``ClientPlan.local``). Built one client at a time,
    so the cohort's plans are never all held; a plan that keeps optimizer state on this process
    under several processes is refused (:func:`refuse_unsynced_state`)."""

    def plan_of(client_id: int) -> ClientPlan:
        client_plan = strategy.configure_client(client_id, ctx)
        refuse_unsynced_state(client_plan, strategy)
        local = plan.overrides_for(client_id).merged(client_plan.local)
        return replace(client_plan, local=local)

    return plan_of


def refuse_unsynced_state(plan: ClientPlan, strategy: Strategy) -> None:
    """Under several processes, refuses a plan that keeps the client's optimizer state on this
    process when the strategy does not sync per-client state: the process that trains the
    client next would not have it. Every rank reaches the same plan, so all raise together."""
    if plan.save_optimizer_state is None or strategy.client_states is not None:
        return
    if rank_and_world()[1] > 1:
        raise ValueError(f"strategy: {unsynced_state_problem(strategy)}")


def process_update(
    strategy: Strategy, update: ClientUpdate, ctx: RoundContext, hooks: ClientHooks | None = None
) -> ClientUpdate:
    """One trained update as the client uploads it: the strategy's client-side
    ``process_update`` (clip, privatise) with the client's keyed
    ``(seed, round, client, "client_mechanism")`` generator on the update's device, then the
    callbacks' ``on_client_end``. An exception names the client and the round."""
    g = generator_for(
        ctx.seed, ctx.round_idx, update.client_id, "client_mechanism", device=update.delta.device
    )
    try:
        update = strategy.process_update(update, ctx, generator=g)
    except Exception as err:
        name_failed_clients(err, [update.client_id], ctx.round_idx)
        raise
    if hooks is not None:
        hooks.end(update.client_id, ctx, update)
    return update


def processed(
    strategy: Strategy,
    trained: Iterable[ClientUpdate],
    ctx: RoundContext,
    hooks: ClientHooks | None = None,
) -> Iterator[ClientUpdate]:
    """The executor's trained updates, each processed (:func:`process_update`) as it arrives
    and delivered to the server as the strategy delivers it (``Strategy.deliver``: under SecAgg
    the masked vector only, nothing of a client that dropped): the one boundary between the
    clients and the server-side objects (``privacy/guarantee/server_view.py``)."""
    for update in trained:
        delivered = strategy.deliver(process_update(strategy, update, ctx, hooks), ctx)
        if delivered is not None:
            yield delivered


def train_cohort(
    executor: Executor,
    strategy: Strategy,
    clients: list[int],
    ctx: RoundContext,
    data: Any,
    plan: RoundPlan | None = None,
) -> Iterator[ClientUpdate]:
    """What a round does with ``clients``: the executor trains their plans (``plan``; default
    ``ctx``'s cohort with ``ctx.client_config``) and the strategy processes each update. For
    tests and benchmarks that train a cohort outside a round."""
    if plan is None:
        plan = RoundPlan(tuple(ctx.cohort), LocalOverrides.from_mapping(ctx.client_config))
    trained = executor.run(clients, client_plans(strategy, ctx, plan), ctx, data)
    return processed(strategy, trained, ctx, executor.hooks)


__all__ = [
    "FederatedRound",
    "Reducer",
    "RoundOutcome",
    "as_round_plan",
    "client_plans",
    "plan_round",
    "process_update",
    "processed",
    "refuse_unsynced_state",
    "train_cohort",
]
