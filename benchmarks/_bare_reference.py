"""Bare-PyTorch reference for ``benchmarks/scaling.py``: the same local training, no framework.

Each process trains its share of the round's clients (the same LPT shards as the engine, from
``fl_lightning.server.sharding``) with a plain loop: load the global weights, E epochs of
shuffled mini-batches, forward, backward, SGD step. No Lightning, no collectives, no
aggregation; processes only meet at a ``multiprocessing`` barrier at the start of every round.
The 2-process / 1-process ratio of this loop is what the machine itself allows (two vCPUs that
share a physical core, memory bandwidth and the OS cap it below 2x); the engine's ratio is
compared against it.
"""

from __future__ import annotations

import os
import time
from collections.abc import MutableMapping
from typing import TYPE_CHECKING

import torch

from fl_lightning.server.sharding import assign_clients

if TYPE_CHECKING:
    from multiprocessing.synchronize import Barrier


def _setup(workload: str):  # noqa: ANN202
    from fl_lightning.data.datamodule import FederatedDataModule
    from fl_lightning.models import MLP, MnistCNN

    if workload == "digits":
        data = FederatedDataModule(dataset="digits", num_clients=40, partitioner="dirichlet",
                                   alpha=0.5, test_fraction=0.2, seed=0)  # fmt: skip
        net = MLP(input_dim=64, hidden=(32,), num_classes=10)
        cfg = {"lr": 0.1, "momentum": 0.0, "epochs": 10, "batch": 16}
    else:
        data = FederatedDataModule(dataset="mnist_offline", root=os.environ["FL_MNIST_ROOT"],
                                   num_clients=100, partitioner="dirichlet", alpha=0.5,
                                   test_fraction=0.2, seed=0)  # fmt: skip
        net = MnistCNN(in_channels=1, num_classes=10, image_size=28, channels=(8, 16), hidden=64)
        cfg = {"lr": 0.05, "momentum": 0.9, "epochs": 1, "batch": 32}
    data.setup("fit")
    return data, net, cfg


def _worker(
    rank: int,
    world: int,
    workload: str,
    rounds: int,
    cohort: int,
    barrier: Barrier,
    out: MutableMapping[int, list[float]],  # a Manager().dict() shared by the processes
) -> None:
    torch.set_num_threads(1)
    data, net, cfg = _setup(workload)
    sizes = data.client_sizes()
    n_clients = len(sizes)
    opt = torch.optim.SGD(net.parameters(), lr=cfg["lr"], momentum=cfg["momentum"])
    start_state = {k: v.clone() for k, v in net.state_dict().items()}
    times = []
    for r in range(rounds):
        g = torch.Generator().manual_seed(r)
        chosen = sorted(torch.randperm(n_clients, generator=g)[:cohort].tolist())
        B, E = cfg["batch"], cfg["epochs"]
        costs = {c: float(E * -(-int(sizes[c]) // B) * min(B, int(sizes[c]))) for c in chosen}
        mine = assign_clients(chosen, costs, world)[rank]
        barrier.wait()
        t = time.perf_counter()
        for c in mine:
            x, y = data.client_data(c)
            net.load_state_dict(start_state)
            opt = torch.optim.SGD(net.parameters(), lr=cfg["lr"], momentum=cfg["momentum"])
            for _ in range(E):
                order = torch.randperm(len(y))
                for i in range(0, len(y), B):
                    idx = order[i : i + B]
                    opt.zero_grad(set_to_none=True)
                    torch.nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
                    opt.step()
        times.append(time.perf_counter() - t)
    out[rank] = times


def bare_round_times(workload: str, processes: int, rounds: int, cohort: int) -> list[float]:
    """Per-round wall time (slowest process) of the bare loop with ``processes`` processes."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        out = manager.dict()
        barrier = ctx.Barrier(processes)
        procs = [
            ctx.Process(target=_worker, args=(r, processes, workload, rounds, cohort, barrier, out))
            for r in range(processes)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
            if p.exitcode != 0:
                raise RuntimeError(f"bare reference process failed ({p.exitcode})")
        per_rank = [out[r] for r in range(processes)]
    return [max(ts) for ts in zip(*per_rank)]
