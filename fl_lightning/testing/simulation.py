"""Rounds of a strategy without Lightning: :func:`simulate` and :class:`Simulation`.

The harness binds the same parts ``FederatedModule`` binds (``server/module.py``: the set-up of
``server/federation.py``, a ``LocalTrainer`` behind the run's executor, the server optimizer of
``server/settings.py``, the accountant) and runs each round through the one
``FederatedRound.run_round`` the module's ``training_step`` calls, in this process, with no
``Trainer``, logger or checkpoint file. A round of a small model takes milliseconds, so a person
writing a strategy tests it the way Flower's ``start_simulation`` and pfl's simulated backend
are used: build the data and the client, call :func:`simulate`, read each round's
:class:`RoundResult`.

What it adds for tests:

* each round's ε *planned* before any client trained (the accountant's ε with the round's
  priced events recorded on a copy) beside the ε *spent* after it;
* :meth:`Simulation.state_dict` / :meth:`Simulation.load_state_dict`: what a checkpoint holds
  (global model, server optimizer, strategy, accountant, rounds done), to resume mid-run;
* ``reduction``: the round reduced as declared (``Strategy.reduction``), as ``"gather"`` (every
  update at once, the reference) or as ``"sum"`` over ``processes`` emulated ranks (each rank's
  ``partial_aggregate`` added, then ``finalize``: what one all-reduce gives under DDP).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from fl_lightning.client.local_loop import LocalTrainer
from fl_lightning.client.module import ClientModule
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.records import ClientUpdate, Metrics, RoundContext
from fl_lightning.server.evaluation import evaluate_split
from fl_lightning.server.executor_choice import build_executor
from fl_lightning.server.federation import set_up_federation
from fl_lightning.server.privacy_plan import declare_private_run
from fl_lightning.server.reduction import (
    ReducedRound,
    RoundUpdates,
    UpdateRecord,
    delta_and_metrics,
    reduce_round,
)
from fl_lightning.server.round import FederatedRound, Reducer
from fl_lightning.server.sampling import CohortSampler
from fl_lightning.server.settings import ServerSettings
from fl_lightning.strategies.base import Strategy
from fl_lightning.utils.flat import flatten_into, trainable_parameters
from fl_lightning.utils.rng import draw_secret_seed

ReductionMode = Literal["declared", "gather", "sum"]


@dataclass(frozen=True)
class RoundResult:
    """One simulated round.

    Attributes:
        round_idx: 0-based round index.
        cohort: the clients dispatched (after ``Strategy.select_clients``).
        weights: the flat global model after the round (a copy).
        delta: the aggregate the server optimizer applied (a copy; zeros for a stopped round).
        planned_epsilon: the accountant's ε with this round's priced events recorded, computed
            before any client trained; None without an accountant.
        epsilon: the accountant's ε after the round was recorded; None without an accountant.
        metrics: what the round logs (``round/*``, ``train/*``, ``clients/*``, ``strategy/*``,
            ``privacy/*``), as ``FederatedModule`` logs it.
        strategy_metrics: what the strategy's hooks returned this round.
        updates: the records of every client update (loss, metrics, DP-SGD events).
        stopped: why the run stopped before this round (the privacy budget); None when it ran.
    """

    round_idx: int
    cohort: list[int]
    weights: torch.Tensor
    delta: torch.Tensor
    planned_epsilon: float | None
    epsilon: float | None
    metrics: dict[str, float] = field(default_factory=dict)
    strategy_metrics: Metrics = field(default_factory=dict)
    updates: list[UpdateRecord] = field(default_factory=list)
    stopped: str | None = None


def _epsilon(accountant: PrivacyAccountant) -> float:
    return float(accountant.report()["privacy/epsilon"])


class Simulation:
    """A run's parts bound once, rounds run one at a time (see the module docstring).

    ``clients_per_round``, ``client_rate``, ``sampling``, ``server_optimizer``, ``server_lr``,
    ``server_momentum``, ``executor`` and ``seed`` are as ``FederatedModule`` takes them
    (``clients_per_round`` defaults to every client). With ``privacy.secure_mode`` the rounds
    are keyed, as the module keys them, by a secret drawn from the OS's entropy
    (:attr:`noise_seed`, kept only in :meth:`state_dict`), ``seed`` only by the set-up.

    Args:
        strategy: the strategy under test (set up here, as ``FederatedModule.setup`` does).
        data: a ``FederatedDataModule`` (set up here when it is not) or any object with
            ``num_clients``, ``client_sizes()``, ``client_data(cid)`` and optional ``val`` /
            ``test`` splits (``x``, ``y``).
        client: the ``ClientModule`` every client trains (its network, local optimizer, local
            steps, DP-SGD settings).
        rounds: the planned number of rounds (``trainer.max_steps``: schedules and σ
            calibration read it).
        privacy: the accountant; None runs without accounting.
        reduction: ``"declared"`` (the strategy's own ``reduction``, as a run does), ``"gather"``
            (``aggregate`` of the list of every update) or ``"sum"`` (``partial_aggregate`` on
            each of ``processes`` emulated ranks, added, then ``finalize``).
        processes: emulated ranks of ``reduction="sum"``; the cohort's updates are dealt to them
            round-robin.
        device: where the clients train and the global model lives.
    """

    def __init__(
        self,
        strategy: Strategy,
        data: Any,
        *,
        client: ClientModule,
        rounds: int,
        privacy: PrivacyAccountant | None = None,
        clients_per_round: int | None = None,
        client_rate: float | None = None,
        sampling: Literal["auto", "fixed", "poisson", "cyclic", "cyclic_poisson"] = "auto",
        server_optimizer: Literal["sgd", "adam"] = "sgd",
        server_lr: float = 1.0,
        server_momentum: float = 0.0,
        executor: Literal["sequential", "vectorized", "auto"] = "sequential",
        seed: int = 0,
        reduction: ReductionMode = "declared",
        processes: int = 2,
        device: torch.device | str = "cpu",
    ) -> None:
        if rounds < 1:
            raise ValueError(f"rounds: must be >= 1, got {rounds}")
        if reduction not in ("declared", "gather", "sum"):
            raise ValueError(
                f"reduction: expected 'declared', 'gather' or 'sum', got {reduction!r}"
            )
        if reduction == "sum" and strategy.reduction != "sum":
            raise ValueError(
                f"reduction: {type(strategy).__name__} declares reduction = "
                f"{strategy.reduction!r}, so it has no partial sums to add"
            )
        if processes < 1:
            raise ValueError(f"processes: must be >= 1, got {processes}")
        if getattr(data, "train", True) is None:  # a FederatedDataModule not yet set up
            data.setup("fit")
        self.strategy = strategy
        self.data = data
        self.client = client
        self.accountant = privacy
        self.total_rounds = int(rounds)
        self.device = torch.device(device)
        self.settings = ServerSettings(
            executor=executor,
            server_optimizer=server_optimizer,
            server_lr=server_lr,
            server_momentum=server_momentum,
        )
        sampler = CohortSampler(sampling, clients_per_round or int(data.num_clients), client_rate)
        client.to(self.device)
        self.global_net = copy.deepcopy(client.net).to(self.device)
        self.local = set_up_federation(
            strategy=strategy,
            client=client,
            accountant=privacy,
            sampler=sampler,
            data=data,
            global_net=self.global_net,
            server=self.settings.optimizer_spec,
            rounds=self.total_rounds,
            seed=seed,
        )
        if hasattr(data, "to"):
            data.to(self.device)
        declare_private_run(
            privacy, strategy, uses_dp_sgd=client.training_config.dp_sgd is not None
        )
        self.secure_mode = privacy is not None and privacy.secure_mode
        self.noise_seed = draw_secret_seed() if self.secure_mode else seed
        """The first key of every noise, cohort and batch generator of the rounds."""
        self.optimizer = self.settings.optimizer(trainable_parameters(self.global_net))
        self.round = FederatedRound(
            strategy=strategy,
            accountant=privacy,
            sampler=sampler,
            executor=build_executor(
                self.settings.executor, LocalTrainer(client, self.device, config=self.local)
            ),
            data=data,
            local=self.local,
            global_net=self.global_net,
            seed=self.noise_seed,
            device=self.device,
            reduce=_reducer(reduction, processes),
        )
        self.rounds_completed = 0
        self.stopped: str | None = None

    # -- rounds ------------------------------------------------------------------------------
    def evaluate(self, split: str = "test") -> dict[str, float]:
        """Metrics of the global model (or the strategy's own models) on ``"val"`` or
        ``"test"``; ``{}`` when the data has no such split (what ``RoundContext.evaluate``
        gives strategies that read the server's loss)."""
        ds = getattr(self.data, "test" if split == "test" else "val", None)
        if ds is None:
            return {}
        return evaluate_split(
            self.global_net,
            ds.x.to(self.device),
            ds.y.to(self.device),
            batch_size=1024,
            num_classes=int(self.client.num_classes),
            models=self.strategy.evaluation_models(),
        )

    def weights(self) -> torch.Tensor:
        """The flat global model (a copy)."""
        params = trainable_parameters(self.global_net)
        return flatten_into(params, torch.empty(sum(p.numel() for p in params))).clone()

    def step(self) -> RoundResult:
        """Runs the next round (``FederatedRound.run_round``) and returns what it did."""
        if self.stopped is not None:
            raise RuntimeError(f"simulation: stopped before round {self.rounds_completed}")
        if self.rounds_completed >= self.total_rounds:
            raise RuntimeError(f"simulation: all {self.total_rounds} planned rounds ran")
        r = self.rounds_completed
        before = copy.deepcopy(self.accountant)
        outcome = self.round.run_round(
            r, self.total_rounds, self.optimizer, self.evaluate, first_round=r == 0
        )
        planned_epsilon = None
        if before is not None and outcome.planned is not None:
            before.record(outcome.planned)
            planned_epsilon = _epsilon(before)
        weights = self.weights()
        if outcome.stop:
            self.stopped = outcome.stop
            return RoundResult(
                r, list(outcome.ctx.cohort), weights, torch.zeros_like(weights),
                planned_epsilon, None if self.accountant is None else _epsilon(self.accountant),
                stopped=outcome.stop,
            )  # fmt: skip
        assert outcome.reduced is not None  # a round that ran
        self.rounds_completed = r + 1
        return RoundResult(
            round_idx=r,
            cohort=list(outcome.ctx.cohort),
            weights=weights,
            delta=outcome.reduced.delta.detach().clone(),
            planned_epsilon=planned_epsilon,
            epsilon=None if self.accountant is None else _epsilon(self.accountant),
            metrics=dict(outcome.metrics),
            strategy_metrics=dict(outcome.strategy_metrics),
            updates=list(outcome.reduced.updates.records),
        )

    def run(self, rounds: int | None = None) -> list[RoundResult]:
        """The next ``rounds`` rounds (default: the rest of the planned ones); fewer when the
        budget stops the run (the last result then says why in ``stopped``)."""
        left = self.total_rounds - self.rounds_completed
        out = []
        for _ in range(left if rounds is None else min(rounds, left)):
            out.append(self.step())
            if out[-1].stopped:
                break
        return out

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What a run's checkpoint holds: the global model, the server optimizer's state, the
        strategy's and the accountant's ``state_dict`` and the rounds done (copies)."""
        return copy.deepcopy(
            {
                "global_net": self.global_net.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "strategy": self.strategy.state_dict(),
                "accountant": None if self.accountant is None else self.accountant.state_dict(),
                "rounds_completed": self.rounds_completed,
                "noise_seed": self.noise_seed,  # a secret in secure mode, as in a checkpoint
            }
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes from :meth:`state_dict` (of a simulation built the same way), as Lightning
        restores a checkpoint after ``setup``: model, optimizer, strategy, accountant."""
        self.global_net.load_state_dict(state["global_net"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.strategy.load_state_dict(state["strategy"])
        if self.accountant is not None:
            self.accountant.load_state_dict(state["accountant"])
        self.rounds_completed = int(state["rounds_completed"])
        self.noise_seed = self.round.seed = int(state.get("noise_seed", self.noise_seed))


def simulate(
    strategy: Strategy,
    data: Any,
    rounds: int,
    *,
    client: ClientModule,
    **options: Any,
) -> list[RoundResult]:
    """Runs ``rounds`` rounds of ``strategy`` on ``data`` without Lightning and returns one
    :class:`RoundResult` a round (fewer when the privacy budget stops the run). ``options`` are
    :class:`Simulation`'s (``privacy``, ``clients_per_round``, ``seed``, ``reduction``, ...)."""
    return Simulation(strategy, data, client=client, rounds=rounds, **options).run()


# -- reductions the harness can emulate --------------------------------------------------------
def _reducer(mode: ReductionMode, processes: int) -> Reducer:
    if mode == "declared":
        return reduce_round
    if mode == "gather":
        return _reduce_gathered

    def reduce_summed(
        strategy: Strategy, local: RoundUpdates, ctx: RoundContext, central: torch.Generator
    ) -> ReducedRound:
        return _reduce_summed(strategy, local, ctx, central, processes)

    return reduce_summed


def _reduce_gathered(
    strategy: Strategy, local: RoundUpdates, ctx: RoundContext, central: torch.Generator
) -> ReducedRound:
    """Every update at once: ``aggregate`` of the list (the reference every reduction meets)."""
    out = strategy.aggregate(list(local), ctx, generator=central)
    return ReducedRound(*delta_and_metrics(out, strategy, "aggregate"), local)


def _reduce_summed(
    strategy: Strategy,
    local: RoundUpdates,
    ctx: RoundContext,
    central: torch.Generator,
    processes: int,
) -> ReducedRound:
    """``processes`` emulated ranks: the updates dealt round-robin, each rank's
    ``partial_aggregate`` added (the all-reduce), then ``finalize`` once."""
    shards: list[list[ClientUpdate]] = [[] for _ in range(processes)]
    for i, update in enumerate(local):
        shards[i % processes].append(update)
    partials: Iterable[torch.Tensor] = (strategy.partial_aggregate(s, ctx) for s in shards)
    total = torch.stack(list(partials)).sum(0)
    out = strategy.finalize(total, ctx, generator=central)
    return ReducedRound(*delta_and_metrics(out, strategy, "finalize"), local)


def epsilons_equal(a: float | None, b: float | None, *, rel_tol: float = 1e-9) -> bool:
    """Whether two reported ε are the same (both ∞, both None, or equal to ``rel_tol``)."""
    if a is None or b is None:
        return a is b
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=1e-12)


__all__ = ["RoundResult", "Simulation", "epsilons_equal", "simulate"]
