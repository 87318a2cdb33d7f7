"""Cohort throughput (clients per second): vectorised vs sequential executor vs bare PyTorch.

The workload of issue #4: 10 clients × 60 examples (MNIST-shaped, 1×28×28, 10 classes), the
MNIST CNN (McMahan et al. 2017, 1.66M parameters), one local epoch of SGD at batch 10 (6 steps a
client), FedAvg. Three variants do the same work from the same global weights:

- ``bare``: a plain PyTorch loop written here: for each client, copy the global weights into
  one reused model, shuffle, 6 × (forward, cross-entropy, backward, ``SGD.step``), delta.
- ``sequential``: the core's ``SequentialExecutor`` (LocalTrainer, FedAvg ``process_update``).
- ``vectorized``: ``fl_lightning.server.vectorized_executor.VectorizedExecutor``.
- ``ceiling``: not a federated round: ONE shared model trained on batches of clients × batch
  examples (100) for the same number of steps (6). It does the FLOPs of a perfect vectorisation
  (which must also keep ten sets of weights apart, so it cannot beat this), i.e. it is the
  physical bound on what stacking clients can gain over ``bare`` on this machine.
- ``ceiling_cl``: the same with the model and inputs in ``channels_last`` memory (the layout the
  vectorised executor's convolutions use; faster oneDNN kernels for some convolutions, so the
  honest bound for a CNN is the faster of the two ceilings).

With ``--dp-sgd`` the clients run DP-SGD (C = 1, σ = 1, the default engine ``auto``, i.e.
``bk`` for both models, in the sequential executor; the vectorised executor's stacked
book-keeping clipping, ``client/stacked.py``):
``bare`` stays the non-private loop (the cost of privacy shows in its ratio) and the ceilings
are skipped.

Median over ``--reps`` repetitions of one round each, variants interleaved, each (model,
threads) group at one fixed thread count.

The machine (core count, torch threads, platform) and the load average before and after each
(model, threads) group are measured and recorded, never typed in; ``--note`` adds optional free
text beside them. ``--out DIR`` (a directory; the older form ``DIR/cohort_throughput.md`` still
means ``DIR``) appends each group to ``DIR/cohort_throughput.json`` and a section to
``DIR/cohort_throughput.md``; nothing recorded is rewritten. From the repository root
(``PYTHONPATH=.`` so that the checkout, not an installed copy, is measured):

    PYTHONPATH=. python benchmarks/cohort_throughput.py --reps 7 --threads 1 2 \
        --models mnist_cnn mlp --out benchmarks/results
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from _record import out_dir, record_run
from torch import nn

from fl_lightning.client.config import DPSGDConfig
from fl_lightning.client.local_loop import LocalTrainer
from fl_lightning.client.module import ClientModule
from fl_lightning.models.cnn import MnistCNN
from fl_lightning.models.mlp import MLP
from fl_lightning.records import RoundContext
from fl_lightning.server.executor import SequentialExecutor
from fl_lightning.server.round import train_cohort
from fl_lightning.server.vectorized_executor import VectorizedExecutor
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.utils.flat import flatten, flatten_into, load_flat_, trainable_parameters


def make_data(clients: int, per_client: int) -> SimpleNamespace:
    g = torch.Generator().manual_seed(0)
    n = clients * per_client
    x = torch.randn(n, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (n,), generator=g)
    indices = [torch.arange(i * per_client, (i + 1) * per_client) for i in range(clients)]
    return SimpleNamespace(
        train=SimpleNamespace(x=x, y=y),  # the bare and ceiling loops read the whole split
        client_indices=indices,
        client_sizes=lambda: [len(i) for i in indices],  # the executors read these two
        client_data=lambda c: (x[indices[c]], y[indices[c]]),
    )


def bare_round(
    net: nn.Module,
    global_flat: torch.Tensor,
    data: SimpleNamespace,
    clients: list[int],
    batch: int,
    lr: float,
) -> list[torch.Tensor]:
    """The bare PyTorch reference: one reused model and optimizer, clients one by one."""
    params = trainable_parameters(net)
    opt = torch.optim.SGD(params, lr=lr)
    buf = torch.empty_like(global_flat)
    deltas = []
    for cid in clients:
        x, y = data.client_data(cid)
        load_flat_(params, global_flat)
        order = torch.randperm(len(y))
        for i in range(0, len(y), batch):
            idx = order[i : i + batch]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(x[idx]), y[idx]).backward()
            opt.step()
        deltas.append(flatten_into(params, buf).clone().sub_(global_flat))
    return deltas


def ceiling_round(
    net: nn.Module,
    global_flat: torch.Tensor,
    data: SimpleNamespace,
    clients: list[int],
    batch: int,
    lr: float,
    channels_last: bool = False,
) -> torch.Tensor:
    """One shared model, batches of len(clients) × batch examples, as many steps as one client
    takes: the FLOPs of a perfectly vectorised round with none of its weight traffic."""
    params = trainable_parameters(net)
    opt = torch.optim.SGD(params, lr=lr)
    load_flat_(params, global_flat)
    x, y = data.train.x, data.train.y
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    order = torch.randperm(len(y))
    big = batch * len(clients)
    for i in range(0, len(y), big):
        idx = order[i : i + big]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(x[idx]), y[idx]).backward()
        opt.step()
    return flatten(params).sub_(global_flat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--examples", type=int, default=60)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--models", nargs="+", choices=["mnist_cnn", "mlp"], default=["mnist_cnn"])
    parser.add_argument("--dp-sgd", action="store_true", help="clients run DP-SGD (see above)")
    parser.add_argument(
        "--note",
        default=None,
        help="optional free text recorded beside the measured machine (never instead of it)",
    )
    parser.add_argument("--out", default=None, help="directory: append each group there")
    args = parser.parse_args()
    out = out_dir(parser, args.out, "cohort_throughput")
    command = "python benchmarks/cohort_throughput.py " + " ".join(sys.argv[1:])
    intro = (
        "# Cohort throughput: vectorised vs sequential executor vs bare PyTorch loop\n\n"
        "`benchmarks/cohort_throughput.py`; each (model, threads) group appended as measured.\n"
    )
    for model in args.models:
        for threads in args.threads:
            load_before = os.getloadavg()
            lines, times = measure(args, model, threads)
            record_run(
                out,
                "cohort_throughput",
                title=f"{lines[0]}, {threads} torch thread(s), {args.reps} repetitions",
                intro=intro,
                lines=[f"- command: `{command}`", *lines[1:]],
                load_before=load_before,
                command=command,
                threads=threads,
                note=args.note,
                model=model,
                dp_sgd=args.dp_sgd,
                seconds=times,
            )


def measure(args: argparse.Namespace, model: str, threads: int) -> tuple[list[str], dict]:
    """One row group: every variant at ``threads`` torch threads; returns the markdown lines
    (the first: the group's name) and every repetition's seconds per variant."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    data = make_data(args.clients, args.examples)
    clients = list(range(args.clients))
    lr = 0.05

    def client_module() -> ClientModule:
        torch.manual_seed(0)
        dp = DPSGDConfig(noise_multiplier=1.0, max_grad_norm=1.0) if args.dp_sgd else None
        return ClientModule(make_net(), num_classes=10, lr=lr, batch_size=args.batch, dp_sgd=dp)

    make_net = MnistCNN if model == "mnist_cnn" else MLP
    seq_client, vec_client = client_module(), client_module()
    bare_net, ceiling_net = make_net(), make_net()
    ceiling_cl_net = make_net().to(memory_format=torch.channels_last)
    global_flat = flatten(trainable_parameters(seq_client.net))
    executors = {
        "sequential": SequentialExecutor(LocalTrainer(seq_client)),
        "vectorized": VectorizedExecutor(LocalTrainer(vec_client)),
    }
    strategy = FedAvg()

    def ctx(r: int) -> RoundContext:
        return RoundContext(
            round_idx=r,
            total_rounds=1000,
            seed=0,
            num_clients=args.clients,
            cohort=clients,
            expected_cohort_size=float(args.clients),
            sample_rate=1.0,
            global_params=global_flat,
        )

    def run(name: str, r: int) -> None:
        if name == "bare":
            bare_round(bare_net, global_flat, data, clients, args.batch, lr)
        elif name == "ceiling":
            ceiling_round(ceiling_net, global_flat, data, clients, args.batch, lr)
        elif name == "ceiling_cl":
            ceiling_round(ceiling_cl_net, global_flat, data, clients, args.batch, lr, True)
        else:
            list(train_cohort(executors[name], strategy, clients, ctx(r), data))

    variants = ["bare", "sequential", "vectorized"]
    if not args.dp_sgd:
        variants += ["ceiling", "ceiling_cl"]
    for v in variants:
        run(v, 0)  # warm-up
    times: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(args.reps):
        for v in variants if r % 2 == 0 else variants[::-1]:  # interleaved, alternating order
            start = time.perf_counter()
            run(v, r + 1)
            times[v].append(time.perf_counter() - start)
    med = {v: statistics.median(t) for v, t in times.items()}
    # Same updates (sanity, not a timing): vectorised vs sequential on one round.
    seq = [u.delta for u in train_cohort(executors["sequential"], strategy, clients, ctx(99), data)]
    vec = [u.delta for u in train_cohort(executors["vectorized"], strategy, clients, ctx(99), data)]
    max_diff = max(float((a - b).abs().max()) for a, b in zip(seq, vec))
    max_delta = max(float(a.abs().max()) for a in seq)
    lines = [
        f"{make_net.__name__}{', DP-SGD clients' if args.dp_sgd else ''}",
        f"- {args.clients} clients × {args.examples} examples (1×28×28), "
        f"{make_net.__name__}, 1 local epoch, batch {args.batch}, "
        f"{'DP-SGD (C 1, σ 1, engine auto)' if args.dp_sgd else 'SGD'} lr {lr}, FedAvg "
        f"{'(bare: non-private) ' if args.dp_sgd else ''}; "
        f"median of {args.reps} interleaved rounds after one warm-up round",
        f"- max |Δ_vectorised − Δ_sequential| over all clients: {max_diff:.2e} "
        f"(max |Δ|: {max_delta:.2e})",
        *(
            []
            if args.dp_sgd
            else [
                f"- ceiling: one shared model, {len(clients)} × {args.batch} examples a step, "
                f"{-(-args.examples // args.batch)} steps (same FLOPs as a perfect "
                "vectorisation)"
            ]
        ),
        "",
        "| variant | round s | clients/s | ÷ bare |",
        "|---|---|---|---|",
    ]
    for v in variants:
        cps = args.clients / med[v]
        lines.append(f"| {v} | {med[v]:.3f} | {cps:.1f} | {med['bare'] / med[v]:.2f}x |")
    return lines, times


if __name__ == "__main__":
    main()
