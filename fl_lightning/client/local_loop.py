"""The local training loop, built once per process and reused for every client.

:meth:`LocalTrainer.train_many` is the one statement of local training for a round's clients:
each client's plan (``records.py: ClientPlan``: start weights, optimizer state, gradient hook,
its local overrides as values) trained on the examples read through the data's one accessor
(``client_data(cid)``), the updates yielded in the order of the clients. It trains them one at
a time here (:meth:`LocalTrainer.train`: the global weights loaded into the one ClientModule in
place, E local epochs or K local steps on the client's in-memory tensors, batches as slices,
not a DataLoader, a ``ClientUpdate`` holding the flat delta), or hands them to an optional
:class:`CohortEngine` that trains many at once (the stacked engine,
``server/vectorized_executor.py``) when the engine says it can run the round's plans. Both
follow ``client/semantics.py`` and :func:`client_update`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import torch

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.client.dp_sgd import build_engine
from fl_lightning.client.module import ClientModule
from fl_lightning.client.semantics import batch_plan
from fl_lightning.privacy.accounting.budget import dp_sgd_event, dp_sgd_rate
from fl_lightning.privacy.mechanisms.counter_noise import CounterStream
from fl_lightning.records import ClientPlan, ClientUpdate, RoundContext
from fl_lightning.utils.flat import flatten_into, load_flat_, trainable_parameters
from fl_lightning.utils.rng import generator_for

ClientStart = Callable[[int], None]
"""Called with a client's id as its local training starts (the callbacks' on_client_start)."""


class CohortEngine(Protocol):
    """An engine that trains many clients of a round at once, behind
    :meth:`LocalTrainer.train_many` (``server/vectorized_executor.py: VectorizedExecutor``)."""

    def blocker(
        self,
        clients: Sequence[int],
        plans: Mapping[int, ClientPlan],
        ctx: RoundContext,
        data: Any,
    ) -> str | None:
        """Why it cannot train these plans as the sequential loop would (None: it can)."""
        ...

    def train(
        self,
        clients: Sequence[int],
        plans: Mapping[int, ClientPlan],
        ctx: RoundContext,
        data: Any,
        on_start: ClientStart | None,
    ) -> Iterator[ClientUpdate]:
        """The clients' updates, in the order of ``clients``, equal to the sequential loop's
        up to float rounding."""
        ...


def name_failed_clients(err: BaseException, client_ids: Sequence[int], round_idx: int) -> None:
    """Adds a note to ``err`` naming the client (or the stacked bucket of clients) whose data,
    plan, local training or processing raised, and the round. The exception keeps its type and
    message (a ``ValueError`` still becomes the CLI's one ``error: <field>: <why>`` line); the
    traceback ends with the note."""
    who = f"client {client_ids[0]}" if len(client_ids) == 1 else f"clients {list(client_ids)}"
    note = f"{who} failed in round {round_idx}"
    if note not in getattr(err, "__notes__", ()):
        err.add_note(note)


class LocalTrainer:
    """Runs local training for one client at a time on a reused ClientModule.

    Args:
        client: the process's ClientModule (its ``net`` is overwritten for every client).
        device: where local training runs.
        config: the run's local-training config, its DP-SGD σ fixed by the server's set-up
            (``server/federation.py``); None: ``client.training_config`` as configured.
    """

    def __init__(
        self,
        client: ClientModule,
        device: torch.device | str = "cpu",
        config: LocalTrainingConfig | None = None,
    ) -> None:
        self.client = client.to(device)
        self.device = torch.device(device)
        self.config = client.training_config if config is None else config
        dp = self.config.dp_sgd
        self.engine = build_engine(
            client.net,
            dp.engine if dp is not None else None,
            max_physical_batch_size=dp.max_physical_batch_size if dp is not None else None,
            batch_size=self.config.batch_size,
        )
        self.params = trainable_parameters(client.net)
        self.optimizer = client.configure_optimizers()
        self._local = torch.empty(sum(p.numel() for p in self.params), device=self.device)
        self._initial_optimizer_state = self.optimizer.state_dict()

    def train_many(
        self,
        clients: Sequence[int],
        plans: Callable[[int], ClientPlan],
        ctx: RoundContext,
        data: Any,
        *,
        engine: CohortEngine | None = None,
        on_start: ClientStart | None = None,
    ) -> Iterator[ClientUpdate]:
        """Trains ``clients`` from their plans (``plans(cid)``, built as each client is
        reached) on their examples (``data.client_data(cid)``) and yields their updates in the
        order of ``clients``. With ``engine``, every plan of the round is built first and the
        engine trains them all when it can (``engine.blocker`` is None); otherwise, or without
        an engine, one client at a time on this trainer. A client whose data or training raises
        is named, with the round, on the exception."""
        if engine is not None:
            built = {cid: plans(cid) for cid in clients}
            if engine.blocker(clients, built, ctx, data) is None:
                yield from engine.train(clients, built, ctx, data, on_start)
                return
            plans = built.__getitem__
        for client_id in clients:
            try:
                x, y = data.client_data(client_id)
                if on_start is not None:
                    on_start(client_id)
                update = self.train(client_id, x, y, ctx, plans(client_id))
            except Exception as err:
                name_failed_clients(err, [client_id], ctx.round_idx)
                raise
            yield update

    def planned_steps(self, num_examples: int, overrides: dict | None = None) -> int:
        return self.config.with_overrides(overrides or {}).steps_for(num_examples)

    def _reset_optimizer(self, cfg: LocalTrainingConfig, state: dict | None) -> None:
        self.optimizer.load_state_dict(
            state if state is not None else self._initial_optimizer_state
        )
        for group in self.optimizer.param_groups:
            group["lr"] = cfg.lr
            if "momentum" in group:
                group["momentum"] = cfg.momentum
            group["weight_decay"] = cfg.weight_decay

    def train(
        self,
        client_id: int,
        x: torch.Tensor,
        y: torch.Tensor,
        ctx: RoundContext,
        plan: ClientPlan,
    ) -> ClientUpdate:
        """Trains client ``client_id`` from ``plan.start_params`` (the strategy's
        ``configure_client``) with the plan's local overrides (``plan.local``, values: the
        round's and the client's own); returns its update, the delta against the start.
        ``ctx`` keys the generators (seed, round)."""
        cfg = self.config.with_overrides(plan.local.as_dict())
        n = len(y)
        start = plan.start_params
        load_flat_(self.params, start)
        self._reset_optimizer(cfg, plan.optimizer_state)
        batch_gen = generator_for(ctx.seed, ctx.round_idx, client_id, "batches", device=x.device)
        dp = cfg.dp_sgd
        rate = dp_sgd_rate(batch_size=cfg.batch_size, size=n)
        if dp is not None:
            assert dp.noise_multiplier is not None, "noise multiplier must be calibrated first"
            self.engine.configure_client(
                noise_multiplier=dp.noise_multiplier,
                max_grad_norm=dp.max_grad_norm,
                expected_batch_size=rate * n,
                generator=noise_stream(
                    dp.noise_rng, ctx.seed, ctx.round_idx, client_id, self.device
                ),
            )
        prox_anchor = None
        if cfg.prox_mu > 0:
            prox_anchor = [p.detach().clone() for p in self.params]

        batches = batch_plan(cfg, n, batch_gen, x.device)
        losses = []
        self.client.net.train()
        for idx in batches:
            losses.append(
                self.engine.compute_gradients(
                    x[idx], y[idx], self.client.loss, precision=cfg.precision
                )
            )
            if prox_anchor is not None:
                # FedProx (Li et al. 2020, Eq. 2): ∇(μ/2)‖w − w_t‖² = μ(w − w_t).
                for p, anchor in zip(self.params, prox_anchor):
                    assert p.grad is not None  # after compute_gradients
                    p.grad.add_(p.detach() - anchor, alpha=cfg.prox_mu)
            if plan.grad_hook is not None:
                plan.grad_hook(self.params)
            self.optimizer.step()
        if plan.save_optimizer_state is not None:
            plan.save_optimizer_state(self.optimizer.state_dict())

        delta = flatten_into(self.params, self._local).clone().sub_(start)
        # the steps' losses stay on the device until here: one read a client, none a step
        step_losses = torch.stack(losses).tolist() if losses else []
        return client_update(
            client_id,
            delta,
            num_examples=n,
            step_losses=step_losses,
            steps=len(batches),
            cfg=cfg,
            round_idx=ctx.round_idx,
        )


def noise_stream(
    noise_rng: str, seed: int, round_idx: int, client_id: int, device: torch.device
) -> torch.Generator | CounterStream:
    """One client's DP-SGD noise source in one round (``client.dp_sgd.noise_rng``): its
    ``torch.Generator`` keyed by ``(seed, round, client, "dp_sgd")`` or the counter stream of the
    same key (``privacy/mechanisms/counter_noise.py``)."""
    if noise_rng == "philox":
        return CounterStream(seed, round_idx, client_id)
    return generator_for(seed, round_idx, client_id, "dp_sgd", device=device)


def client_update(
    client_id: int,
    delta: torch.Tensor,
    *,
    num_examples: int,
    step_losses: list[float],
    steps: int,
    cfg: LocalTrainingConfig,
    round_idx: int,
) -> ClientUpdate:
    """One client's ``ClientUpdate``: the mean of its non-empty steps' losses, its step count and,
    under DP-SGD, its ``SampledGaussian`` event (q = B/n_i, ``steps`` compositions)."""
    dp = cfg.dp_sgd
    dp_steps = []
    if dp is not None:
        assert dp.noise_multiplier is not None, "noise multiplier must be calibrated first"
        dp_steps.append(
            dp_sgd_event(
                dp.noise_multiplier, batch_size=cfg.batch_size, size=num_examples, steps=steps
            )
        )
    losses = [v for v in step_losses if not math.isnan(v)]
    return ClientUpdate(
        client_id=client_id,
        delta=delta,
        num_examples=num_examples,
        loss=sum(losses) / len(losses) if losses else float("nan"),
        metrics={"local_steps": float(steps)},
        dp_steps=dp_steps,
        base_round=round_idx,
    )
