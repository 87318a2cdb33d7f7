"""Records of uploads in flight for asynchronous FL (see ``strategies/asynchronous/base.py``).

:class:`Arrival` is an upload on its way to the server with its dispatch round, simulated
arrival time and base model version; the helpers turn a ``ClientUpdate`` into plain values and
tensors (and back) so buffered uploads are checkpointed with the strategy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fl_lightning.privacy.accounting.events import SampledGaussian
from fl_lightning.records import ClientUpdate


@dataclass
class Arrival:
    """An upload reaching the server.

    Attributes:
        update: the processed (clipped, privatised) upload.
        dispatch_round: round the client was dispatched in (= ``update.base_round``).
        arrival_time: simulated arrival time.
        base_version: server model version (count of applied server steps) it started from.
        staleness: rounds between dispatch and the aggregating round (set on arrival).
    """

    update: ClientUpdate
    dispatch_round: int
    arrival_time: float
    base_version: int
    staleness: int = 0


def _update_to_state(u: ClientUpdate) -> dict[str, Any]:
    return {
        "client_id": u.client_id,
        "delta": u.delta.detach().cpu(),
        "num_examples": u.num_examples,
        "loss": u.loss,
        "metrics": dict(u.metrics),
        "extras": dict(u.extras),
        "dp_steps": [e.to_state() for e in u.dp_steps],
        "base_round": u.base_round,
    }


def _update_from_state(d: dict[str, Any]) -> ClientUpdate:
    return ClientUpdate(
        client_id=int(d["client_id"]),
        delta=d["delta"],
        num_examples=int(d["num_examples"]),
        loss=float(d["loss"]),
        metrics=dict(d["metrics"]),
        extras=dict(d["extras"]),
        dp_steps=[SampledGaussian.from_state(step) for step in d["dp_steps"]],
        base_round=int(d["base_round"]),
    )


update_to_state = _update_to_state
update_from_state = _update_from_state

__all__ = ["Arrival", "update_from_state", "update_to_state"]
