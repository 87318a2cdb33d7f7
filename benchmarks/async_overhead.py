"""Overhead of the simulated asynchronous clock (issue #9).

1,000 clients, 50 dispatched per round, log-normal compute times with 20 % stragglers (4×):
the per-round wall time of ``AsyncStrategy`` (async FedAvg: clock, buffer, busy set, refill)
against the synchronous ``FedAvg`` strategy on the same cohort size and local work, and both
against a bare-PyTorch FedAvg loop (same model, same per-client steps) as the reference.
A second, training-free measurement isolates the bookkeeping: the strategy hooks alone
(select_clients, configure_round, process_update, aggregate) for 1,000 dispatched clients.

The machine (core count, torch threads, platform) and the load average before and after the
run are measured and recorded, never typed in. The run is appended to
``DIR/async_overhead.json`` and a section to ``DIR/async_overhead.md`` (``--out DIR``, default
benchmarks/results); nothing recorded is rewritten. ``--rounds`` (default 12, the first two
dropped as warm-up) shortens a smoke test.

Run from the repository root: ``PYTHONPATH=. python benchmarks/async_overhead.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import lightning.pytorch as pl
import torch
from _record import out_dir, record_run

from fl_lightning.client.module import ClientModule
from fl_lightning.data.datamodule import FederatedDataModule
from fl_lightning.models.mlp import MLP
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.server.module import FederatedModule
from fl_lightning.server.round import plan_round
from fl_lightning.strategies.asynchronous.base import AsyncStrategy
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.utils.rng import generator_for

N, M, ROUNDS, STEPS, BATCH = 1000, 50, 12, 2, 16
DELAYS = dict(
    delay_kind="lognormal",
    delay_mean=0.7,
    delay_sigma=0.5,
    straggler_fraction=0.2,
    straggler_slowdown=4.0,
    receive_window=1.0,
    aggregation_window=0.2,
)


def data() -> FederatedDataModule:
    return FederatedDataModule(
        dataset="synthetic",
        num_clients=N,
        partitioner="iid",
        test_fraction=0.05,
        dataset_options={"num_examples": 40_000, "num_features": 784, "num_classes": 10},
    )


def net() -> torch.nn.Module:
    torch.manual_seed(0)
    return MLP(input_dim=784, hidden=(64,), num_classes=10)


class _RoundTimer(pl.Callback):
    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_start(self, *args) -> None:  # noqa: ANN002
        self._t = time.perf_counter()

    def on_train_batch_end(self, *args) -> None:  # noqa: ANN002
        self.times.append(time.perf_counter() - self._t)


def framework_round_times(strategy, rounds: int = ROUNDS) -> list[float]:  # noqa: ANN001
    client = ClientModule(net=net(), num_classes=10, lr=0.05, local_steps=STEPS, batch_size=BATCH)
    model = FederatedModule(client=client, strategy=strategy, clients_per_round=M, eval_every=0)
    timer = _RoundTimer()
    trainer = pl.Trainer(
        max_steps=rounds,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        callbacks=[timer],
    )
    trainer.fit(model, datamodule=data())
    return timer.times[2:]  # drop warm-up rounds


def bare_pytorch_round_times(rounds: int = ROUNDS) -> list[float]:
    dm = data()
    dm.setup("fit")
    model = net()
    params = list(model.parameters())
    glob = [p.detach().clone() for p in params]
    opt = torch.optim.SGD(params, lr=0.05)
    times = []
    for r in range(rounds):
        t0 = time.perf_counter()
        cohort = torch.randperm(N, generator=generator_for(0, r, "cohort"))[:M].tolist()
        total = [torch.zeros_like(g) for g in glob]
        weight = 0
        for cid in cohort:
            x, y = dm.client_data(cid)
            with torch.no_grad():
                for p, g in zip(params, glob):
                    p.copy_(g)
            perm = torch.randperm(len(y), generator=generator_for(0, r, cid))
            for s in range(STEPS):
                idx = perm[(s * BATCH) % len(y) :][:BATCH]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
                opt.step()
            with torch.no_grad():
                for t, p, g in zip(total, params, glob):
                    t.add_(p - g, alpha=len(y))
            weight += len(y)
        for g, t in zip(glob, total):
            g.add_(t / weight)
        times.append(time.perf_counter() - t0)
    return times[2:]


def bookkeeping_times(strategy, d: int = 50_890, rounds: int = 12) -> list[float]:  # noqa: ANN001
    """The strategy hooks alone for all 1,000 clients dispatched each round (no training)."""
    strategy.setup_federation(FederationSpec(num_clients=N, num_parameters=d, seed=0))
    params = torch.zeros(d)
    delta = torch.randn(d)
    times = []
    for r in range(rounds):
        t0 = time.perf_counter()
        ctx, _ = plan_round(strategy, RoundContext(r, rounds, 0, N, list(range(N)), N, 1.0, params))
        ups = [
            strategy.process_update(
                ClientUpdate(c, delta.clone(), 40, 0.0, base_round=r),
                ctx,
                generator=generator_for(0, r, c),
            )
            for c in ctx.cohort
        ]
        if strategy.reduction == "gather":
            ups = list(ups)
        agg, _ = strategy.aggregate(ups, ctx, generator=generator_for(0, r))
        strategy.after_round(ctx, agg)
        times.append(time.perf_counter() - t0)
    return times[2:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="rounds a run (≥ 3)")
    parser.add_argument(
        "--out",
        default=str(Path(__file__).parent / "results"),
        help="directory: append the run there",
    )
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error(f"--rounds: {args.rounds} < 3 (the first two rounds are dropped)")
    out = out_dir(parser, args.out, "async_overhead")
    torch.set_num_threads(1)
    med = statistics.median
    load_before = os.getloadavg()
    bare = bare_pytorch_round_times(args.rounds)
    sync = framework_round_times(FedAvg(), args.rounds)
    asyn = framework_round_times(AsyncStrategy(**DELAYS), args.rounds)
    book_sync = bookkeeping_times(FedAvg(), rounds=args.rounds)
    book_async = bookkeeping_times(AsyncStrategy(**DELAYS), rounds=args.rounds)
    rows = [
        ("bare PyTorch FedAvg loop (reference)", med(bare)),
        ("FederatedModule + FedAvg (synchronous)", med(sync)),
        ("FederatedModule + AsyncStrategy (clock, delays, stragglers)", med(asyn)),
    ]
    command = "python benchmarks/async_overhead.py " + " ".join(sys.argv[1:])
    lines = [
        f"- command: `{command}`; CPU, 1 torch thread; medians over rounds 3..{args.rounds}.",
        f"- {N} clients, {M} dispatched per round, {STEPS} local SGD steps of batch {BATCH}, "
        "MLP 784-64-10 (50,890 parameters), synthetic data. Async: log-normal delays (median "
        "0.7), 20 % stragglers ×4, receive window 1.0, aggregation window 0.2.",
        "",
        "| setting | median s / round | vs sync FedAvg |",
        "|---|---|---|",
    ]
    for name, t in rows:
        lines.append(f"| {name} | {t:.4f} | {t / med(sync):.3f}× |")
    lines += [
        "",
        f"Bookkeeping only (no training), all {N} clients dispatched each round:",
        "",
        "| strategy | median s / round |",
        "|---|---|",
        f"| FedAvg | {med(book_sync):.4f} |",
        f"| AsyncStrategy | {med(book_async):.4f} |",
        "",
        f"Goal ≤ 1.1×: async / sync = {med(asyn) / med(sync):.3f}×.",
    ]
    record_run(
        out,
        "async_overhead",
        title=f"{args.rounds} rounds, 1 torch thread",
        intro="# Simulated-clock overhead (issue #9)\n\n"
        "`benchmarks/async_overhead.py`; each run appended as measured.\n",
        lines=["", *lines],
        load_before=load_before,
        command=command,
        round_seconds={"bare": bare, "sync": sync, "async": asyn},
        bookkeeping_seconds={"sync": book_sync, "async": book_async},
        ratio_async_over_sync=med(asyn) / med(sync),
    )


if __name__ == "__main__":
    main()
