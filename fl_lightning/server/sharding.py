"""Which process trains which clients of a round.

Every process samples the same cohort (the sampler's generator is keyed by (seed, round)), then
calls :func:`assign_clients` with the same inputs and so gets the same assignment without any
communication. The assignment balances work by the longest-processing-time rule (Graham 1969):
clients sorted by cost (descending, ties by id) each go to the process with the least load so
far (ties to the lowest rank). Its makespan is at most 4/3 of the optimum.

A client's cost is the number of examples its local loop processes, ``local steps × batch``
(``local steps`` from ``LocalTrainingConfig.steps_for(n_i)``, ``batch`` = min(B, n_i)), i.e.
proportional to its number of examples × local epochs, or to B × K with K local steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.records import RoundContext
from fl_lightning.server.distributed import rank_and_world


def assign_clients(
    cohort: Sequence[int], costs: Mapping[int, float], world_size: int
) -> list[list[int]]:
    """Splits ``cohort`` into ``world_size`` shards of balanced total cost (deterministic).

    Args:
        cohort: the round's client ids.
        costs: cost of each client of the cohort (> 0; missing clients count as 1).
        world_size: number of processes.

    Returns:
        One sorted list of client ids per rank.
    """
    if world_size < 1:
        raise ValueError(f"world_size: must be >= 1, got {world_size}")
    shards: list[list[int]] = [[] for _ in range(world_size)]
    loads = [0.0] * world_size
    for cid in sorted(cohort, key=lambda c: (-float(costs.get(c, 1.0)), c)):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        shards[rank].append(cid)
        loads[rank] += float(costs.get(cid, 1.0))
    return [sorted(s) for s in shards]


def clients_of_this_process(
    ctx: RoundContext, config: LocalTrainingConfig, client_sizes: torch.Tensor
) -> list[int]:
    """This rank's share of the round's cohort (all of it with one process), each client
    costed with the round's local-training config (``config`` with ``ctx.client_config``)."""
    rank, world = rank_and_world()
    if world == 1:
        return list(ctx.cohort)
    cfg = config.with_overrides(ctx.client_config)
    costs = {}
    for cid in ctx.cohort:
        n = int(client_sizes[cid])
        costs[cid] = float(cfg.steps_for(n) * min(cfg.batch_size, n))
    return assign_clients(ctx.cohort, costs, world)[rank]


def shard_loads(shards: Sequence[Sequence[int]], costs: Mapping[int, float]) -> list[float]:
    """Total cost of each shard."""
    return [sum(float(costs.get(c, 1.0)) for c in shard) for shard in shards]
