"""Per-round time of DP-FedASGP vs local DP-FedAvg on the MNIST CNN, 10 clients per round.

Goal (issue #5): DP-FedASGP's round costs at most 1.2× local DP-FedAvg's. Both run through the
real engine (``fl-lightning fit`` with ``configs/experiment/dp_fedasgp/mnist_offline_cnn.yaml``:
offline MNIST, 100 Dirichlet clients, 10 per round, MnistCNN 1.66M parameters, batch 128, one
local epoch); ``round/time_s`` is read from every round. A bare-PyTorch loop doing the same work
(10 clients × one epoch of SGD, clip, noise, weighted mean) runs in the same process as the
reference for the engine's overhead, once with Laplace-everywhere and once with the ASGP
client step (kthvalue threshold + sparse-vector test).

The machine (core count, torch threads, platform) and the load average before and after the
run are measured and recorded, never typed in. ``--out DIR`` (a directory; the older form
``DIR/asgp_round_time.md`` still means ``DIR``) appends the run to ``DIR/asgp_round_time.json``
and a section to ``DIR/asgp_round_time.md``; nothing recorded is rewritten.

    PYTHONPATH=. python benchmarks/asgp_round_time.py --rounds 6 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import lightning.pytorch as pl
import torch
from _record import out_dir, record_run
from lightning.pytorch.callbacks import Callback

from fl_lightning.privacy.mechanisms.laplace import sample_laplace
from fl_lightning.privacy.mechanisms.sparse_vector import (
    SparseVectorPerturbation,
    quantile_threshold,
    split_budget,
)
from fl_lightning.runs.cli_class import build_cli_class
from fl_lightning.utils.flat import flatten_into, load_flat_, trainable_parameters
from fl_lightning.utils.rng import generator_for

CONFIG = "configs/experiment/dp_fedasgp/mnist_offline_cnn.yaml"
STRATEGIES = {
    "dp_fedasgp": "configs/strategy/dp_fedasgp/dp_fedasgp.yaml",
    "dp_fedavg_local": "configs/strategy/dp_fedasgp/dp_fedavg_local.yaml",
}


class RoundTimes(Callback):
    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: object,
        batch: object,
        batch_idx: int,
    ) -> None:
        value = trainer.callback_metrics.get("round/time_s")
        if value is not None:
            self.times.append(float(value))


def engine_round_times(strategy: str, rounds: int) -> list[float]:
    make = build_cli_class()
    cli = make(
        [
            "--config",
            CONFIG,
            "--strategy",
            STRATEGIES[strategy],
            "--trainer.max_steps",
            str(rounds),
            "--trainer.logger",
            "false",
            "--model.eval_every",
            "0",
            "--trainer.default_root_dir",
            tempfile.mkdtemp(),
        ],
        run=False,
    )
    timer = RoundTimes()
    cli.trainer.callbacks.append(timer)
    cli.trainer.fit(cli.model, cli.datamodule)
    return timer.times


def bare_round_times(kind: str, rounds: int) -> list[float]:
    """Plain PyTorch: same data, model, cohort size and client work as the engine's round."""
    make = build_cli_class()
    cli = make(["--config", CONFIG, "--trainer.logger", "false"], run=False)
    data = cli.datamodule
    data.setup("fit")
    net = cli.model.client.net
    params = list(trainable_parameters(net))
    d = sum(p.numel() for p in params)
    global_flat = torch.empty(d)
    flatten_into(params, global_flat)
    local = torch.empty(d)
    mech = SparseVectorPerturbation(split=split_budget(epsilon=0.5, q=1.0, perturb_share=0.9))
    opt = torch.optim.SGD(params, lr=0.1)
    times = []
    for r in range(rounds):
        start = time.perf_counter()
        cohort = torch.randperm(data.num_clients, generator=generator_for(0, r, "c"))[:10]
        total = torch.zeros(d)
        n_total = 0
        for cid in cohort.tolist():
            x, y = data.client_data(cid)
            load_flat_(params, global_flat)
            order = torch.randperm(len(y), generator=generator_for(0, r, cid, "b"))
            for i in range(0, len(y), 128):
                idx = order[i : i + 128]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
                opt.step()
            delta = flatten_into(params, local).clone().sub_(global_flat)
            gen = generator_for(0, r, cid, "n")
            if kind == "laplace":
                delta.mul_(min(1.0, 1.0 / float(delta.norm())))
                delta.add_(sample_laplace(delta.shape, scale=2.0, generator=gen))
            else:
                g = delta.div_(-0.1)
                g.mul_(min(1.0, 1.0 / float(g.norm())))
                thr = quantile_threshold(g, min((r + 1) / 30, 0.9))
                delta = mech.privatize_with_threshold(g, thr, generator=gen)[0].mul_(-0.1)
            total.add_(delta, alpha=len(y))
            n_total += len(y)
        global_flat.add_(total / n_total)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", default=None, help="directory: append the run there")
    args = parser.parse_args()
    out = out_dir(parser, args.out, "asgp_round_time")
    torch.manual_seed(0)
    load_before = os.getloadavg()
    rows = {}
    # Interleave the runs so that load from other processes hits both sides alike.
    rows["dp_fedavg_local (engine)"] = engine_round_times("dp_fedavg_local", args.rounds)
    rows["dp_fedasgp (engine)"] = engine_round_times("dp_fedasgp", args.rounds)
    rows["bare PyTorch, Laplace everywhere"] = bare_round_times("laplace", args.rounds)
    rows["bare PyTorch, ASGP client step"] = bare_round_times("asgp", args.rounds)
    command = "python benchmarks/asgp_round_time.py " + " ".join(sys.argv[1:])
    lines = [
        f"- command: `{command}`; rounds: {args.rounds} (first dropped); CPU only.",
        "- config: `" + CONFIG + "` (offline MNIST test set, 100 Dirichlet(1) clients, 10 per "
        "round, MnistCNN 1,663,370 parameters, batch 128, one local epoch).",
        "",
        "| run | median s/round | mean s/round | rounds |",
        "|---|---|---|---|",
    ]
    med = {}
    for name, times in rows.items():
        kept = times[1:] if len(times) > 1 else times
        med[name] = statistics.median(kept)
        lines.append(f"| {name} | {med[name]:.3f} | {statistics.mean(kept):.3f} | {len(kept)} |")
    ratio = med["dp_fedasgp (engine)"] / med["dp_fedavg_local (engine)"]
    bare = med["bare PyTorch, ASGP client step"] / med["bare PyTorch, Laplace everywhere"]
    overhead = med["dp_fedavg_local (engine)"] / med["bare PyTorch, Laplace everywhere"]
    lines += [
        "",
        f"Ratio dp_fedasgp / dp_fedavg_local (engine): **{ratio:.2f}×** (goal <= 1.2×).",
        f"Ratio ASGP / Laplace (bare PyTorch): {bare:.2f}×.",
        f"Engine overhead vs bare PyTorch (dp_fedavg_local): {overhead:.2f}×.",
    ]
    record_run(
        out,
        "asgp_round_time",
        title=f"{args.rounds} rounds",
        intro="# DP-FedASGP round time vs local DP-FedAvg (MNIST CNN, 10 clients per round)\n\n"
        "`benchmarks/asgp_round_time.py`; each run appended as measured.\n",
        lines=["", *lines],
        load_before=load_before,
        command=command,
        round_seconds=rows,
        ratio_asgp_over_fedavg_local=ratio,
    )


if __name__ == "__main__":
    main()
