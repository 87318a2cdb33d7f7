"""The collectives of a sharded round (docs/distributed.md).

Lightning launches the processes (``--trainer.strategy ddp``, SLURM, torchrun) and initialises
``torch.distributed``; the FederatedModule then needs, per round:

* sum-based strategies (``Strategy.reduction == "sum"``): one ``all_reduce`` of the flat partial
  buffer, plus one small ``all_gather_object`` of the per-client records (loss, metrics,
  DP-SGD steps) that logging and the accountant need on every rank;
* other strategies: one ``all_gather_object`` of the update metadata and one ``all_gather`` of
  the (padded) flat deltas, after which every rank aggregates the full list;
* strategies with per-client state kept by client-side hooks (``Strategy.client_states``):
  the state of the clients a rank trained rides along in the same ``all_gather_object``.

Before the first round, :func:`check_distributed_run` has every rank refuse the same run (a
strategy that cannot be sharded, ranks whose resolved configurations differ). Every helper is a
no-op with one process, so the single-process path is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist

from fl_lightning.records import ClientUpdate


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) of the initialised process group; (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_sum_(tensor: torch.Tensor) -> torch.Tensor:
    """Sums ``tensor`` in place over all processes (one collective)."""
    if rank_and_world()[1] > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank (one collective)."""
    world = rank_and_world()[1]
    if world == 1:
        return [obj]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, obj)
    return out


def gather_updates(
    updates: Sequence[ClientUpdate], *, dim: int, device: torch.device, payload: Any = None
) -> tuple[list[ClientUpdate], list[Any]]:
    """All ranks' updates on every rank, sorted by client id, and every rank's ``payload``
    (in rank order) riding along with the metadata (two collectives).

    The metadata travels with ``all_gather_object``; the deltas as one padded
    ``[max clients per rank, dim]`` tensor per rank through ``all_gather``.
    """
    world = rank_and_world()[1]
    if world == 1:
        return sorted(updates, key=lambda u: u.client_id), [payload]
    meta = [replace(u, delta=torch.empty(0)) for u in updates]
    gathered = gather_objects((meta, payload))
    gathered_meta = [g[0] for g in gathered]
    rows = max(len(m) for m in gathered_meta)
    local = torch.zeros(max(rows, 1), dim, device=device)
    for i, u in enumerate(updates):
        local[i].copy_(u.delta)
    buffers = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(buffers, local)
    out: list[ClientUpdate] = []
    for metas, buf in zip(gathered_meta, buffers, strict=True):
        for i, m in enumerate(metas):
            m.delta = buf[i].clone()
            out.append(m)
    return sorted(out, key=lambda u: u.client_id), [g[1] for g in gathered]


def fingerprint(config: Any) -> str:
    """A short hash of a JSON-able description of the run's resolved configuration."""
    text = json.dumps(config, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_ranks_agree(config: Any) -> None:
    """Raises the same ``ValueError`` on every rank when the ranks' configurations differ.

    All ranks take part in the one gather, so all of them raise (nobody is left waiting in a
    later collective).
    """
    hashes = gather_objects(fingerprint(config))
    if len(set(hashes)) > 1:
        raise ValueError(
            "config: the processes disagree on the resolved configuration (hash per rank: "
            f"{', '.join(hashes)}); launch every rank with the same config and overrides"
        )


def check_distributed_run(strategy: Any, config: Callable[[], Any]) -> None:
    """Under DDP, before any other collective: the same ``ValueError`` on every rank for a
    strategy that cannot run on several processes (the CLI checks it before launching; this
    covers runs built in Python) or for ranks whose ``config()`` differ; nothing on one."""
    if rank_and_world()[1] == 1:
        return
    problem = strategy.traits.distributed_problem
    if problem:
        raise ValueError(f"strategy: {problem}")
    check_ranks_agree(config())


def available_devices(accelerator: str) -> int:
    """How many devices of this kind the machine has (CPU: cores)."""
    if accelerator == "cpu":
        return os.cpu_count() or 1
    if accelerator in ("cuda", "gpu"):
        return torch.cuda.device_count()
    return 0


def launch_problem(*, accelerator: str, devices: int, world_size: int, strategy: Any) -> str | None:
    """The one-line reason a run cannot start on these processes (None when it can)."""
    have = available_devices(accelerator)
    if accelerator == "cpu" and devices > have:
        return (
            f"trainer.devices: {devices} CPU processes requested but this machine has {have} "
            "cores; use at most that many"
        )
    if world_size > 1:
        problem = strategy.traits.distributed_problem
        if problem:
            return f"strategy: {problem}"
    return None
