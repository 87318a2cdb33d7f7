"""The server's-view contract: what reaches the server side of a round is no more than the view
its strategy declares (``Strategy.server_view``, ``privacy/guarantee/server_view.py``; issue 55).

Every upload crosses from the clients to the server-side objects at one place,
``server/round.py: processed`` (each trained update processed on its client, then delivered:
``Strategy.deliver``); what it yields enters ``server/reduction.py: RoundUpdates``, whose
records feed ``train/loss``, ``clients/*`` and the accountant, and the strategy's
aggregation. :func:`recorded_server_side` taps that boundary while a block runs (a copy of
each delta as trained, on the client, and of each upload as it arrived, on the server) and
:func:`server_view_problems` compares the recording with the declared view:

* every view: an upload comes from a client dispatched that round;
* ``clipped updates``: every upload's L2 norm is within the declared clip norm;
* ``noised uploads``: no upload is the update as trained;
* ``secure sums``: an upload is a masked vector (integers in [0, 2^b)) of a survivor (nothing
  of a client that dropped, nothing in an aborted round) carrying no loss, example count,
  metric or extra of its client; and the round logs no ``train/loss`` or ``clients/*``
  (:func:`logged_per_client`).

It fails on the delivery of before issue 55, where every dispatched client's loss and metrics
reached ``RoundUpdates`` (``tests/testing/test_server_view_contract.py`` shows it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from fl_lightning.privacy.guarantee.server_view import ServerView
from fl_lightning.records import ClientUpdate, RoundContext

NORM_SLACK = 1e-5
"""Relative slack on a clipped upload's norm (float32 rounding of the clip)."""


@dataclass
class ServerSide:
    """One round at the client/server boundary: its context, the strategy's declared view as
    the round started (an adaptive clip moves between rounds), each dispatched client's delta
    as trained (client side) and every upload as it reached the server side (copies)."""

    ctx: RoundContext
    view: ServerView
    trained: dict[int, torch.Tensor] = field(default_factory=dict)
    arrived: list[ClientUpdate] = field(default_factory=list)


def _copy(update: ClientUpdate) -> ClientUpdate:
    return replace(
        update,
        delta=update.delta.detach().clone(),
        metrics=dict(update.metrics),
        extras=dict(update.extras),
        dp_steps=list(update.dp_steps),
    )


@contextmanager
def recorded_server_side() -> Iterator[list[ServerSide]]:
    """Records every round's boundary (:class:`ServerSide`) while the block runs."""
    from fl_lightning.server import round as module

    original = module.processed
    rounds: list[ServerSide] = []

    def recording(
        strategy: Any, trained: Iterable[ClientUpdate], ctx: RoundContext, hooks: Any = None
    ) -> Iterator[ClientUpdate]:
        side = ServerSide(ctx, strategy.server_view)
        rounds.append(side)

        def tap() -> Iterator[ClientUpdate]:
            for update in trained:
                side.trained[int(update.client_id)] = update.delta.detach().clone()
                yield update

        for upload in original(strategy, tap(), ctx, hooks):
            side.arrived.append(_copy(upload))
            yield upload

    setattr(module, "processed", recording)  # noqa: B010 (the boundary, patched while recording)
    try:
        yield rounds
    finally:
        setattr(module, "processed", original)  # noqa: B010


def _secure_sum_problems(view: ServerView, side: ServerSide, survivors: set[int]) -> list[str]:
    out = []
    r = side.ctx.round_idx
    bits = 64 if view.bits is None else view.bits
    for u in side.arrived:
        who = f"round {r}, client {u.client_id}"
        if int(u.client_id) not in survivors:
            out.append(f"{who}: the upload of a client that dropped (or of an aborted round)")
        if not math.isnan(u.loss):
            out.append(f"{who}: its training loss {u.loss:.4g}")
        if u.num_examples:
            out.append(f"{who}: its example count {u.num_examples}")
        if u.metrics or u.extras:
            out.append(f"{who}: its metrics {sorted(u.metrics) + sorted(u.extras)}")
        d = u.delta.double()
        masked = bool(torch.all(d == torch.round(d))) and bool(
            torch.all((d >= 0) & (d < float(1 << bits)))
        )
        if not masked:
            out.append(f"{who}: a delta that is not a masked vector mod 2^{bits}")
    return out


def server_view_problems(strategy: Any, rounds: list[ServerSide]) -> list[str]:
    """What reached the server side beyond the view ``strategy`` declared in each round
    (module docstring); empty when the recording keeps to it."""
    out = []
    for side in rounds:
        view = side.view
        r, dispatched = side.ctx.round_idx, {int(c) for c in side.ctx.cohort}
        out += [f"round {r}: an upload of client {u.client_id}, not dispatched"
                for u in side.arrived if int(u.client_id) not in dispatched]  # fmt: skip
        if view.uploads == "secure sums":
            survivors = {int(c) for c in strategy.central_dp.survivors(side.ctx)}
            out += _secure_sum_problems(view, side, survivors)
        elif view.uploads == "clipped updates" and view.clip_norm is not None:
            bound = view.clip_norm * (1 + NORM_SLACK)
            for u in side.arrived:
                norm = float(torch.linalg.vector_norm(u.delta.double()))
                if norm > bound:
                    out.append(f"round {r}, client {u.client_id}: norm {norm:.6g} > {bound:.6g}")
        elif view.uploads == "noised uploads":
            for u in side.arrived:
                trained = side.trained.get(int(u.client_id))
                if trained is not None and torch.equal(trained, u.delta):
                    out.append(f"round {r}, client {u.client_id}: the update as trained")
    return out


def logged_per_client(strategy: Any, metrics: dict[str, float]) -> list[str]:
    """The logged keys a round computed from per-client values its view does not give the
    server (``train/loss``, ``clients/*``; none unless the view forbids them)."""
    if strategy.server_view.per_client_values:
        return []
    return sorted(k for k in metrics if k == "train/loss" or k.startswith("clients/"))


__all__ = ["ServerSide", "logged_per_client", "recorded_server_side", "server_view_problems"]
