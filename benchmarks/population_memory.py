"""Memory of registered clients (issue 22, item 4): RSS with 100, 10,000 and 100,000 clients.

The same run through the real stack (LightningCLI objects, Trainer, FederatedModule, DP-FedAvg
strategy, accountant) with the same data, model and cohort; only ``data.num_clients`` changes:
synthetic data (250,000 examples of 64 features, 200,000 for training after the 20 % test
split, so 2 examples a client at 100,000 clients), the digits MLP (64-32-10), 10 clients a round,
``--rounds`` rounds, no evaluation, no logger. Each population runs in a fresh subprocess, which
prints

- peak RSS (``VmHWM``) of the whole process (import, dataset, partition, rounds),
- RSS after setup (dataset and partition built, before the first round) and after the rounds,
- the number of live ``torch.Tensor`` objects after the rounds (a per-client index tensor would
  add one per client).

Goal: 10,000 and 100,000 clients within +10 % of 100 (client data as index views of one
``ClientIndex``, no per-client object). The machine's core count and load average are measured
and printed. Populations run interleaved (100, 10k, 100k, 100k, 10k, 100 ...), median of
``--repeats``.

    PYTHONPATH=. python benchmarks/population_memory.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _proc_status import status_mib
from _record import record_run

REPO = Path(__file__).resolve().parents[1]
POPULATIONS = (100, 10_000, 100_000)
EXAMPLES, FEATURES, COHORT = 250_000, 64, 10


def child(num_clients: int, rounds: int) -> None:
    """One run in this (fresh) process; prints one JSON line."""
    import gc
    import tempfile

    import lightning.pytorch as pl
    import torch

    from fl_lightning.runs.cli_class import build_cli_class

    torch.set_num_threads(1)
    after_setup: dict[str, float] = {}

    class _Probe(pl.Callback):
        def on_train_start(self, *args) -> None:  # noqa: ANN002
            after_setup["rss"] = status_mib("VmRSS")

    args = [
        "--config", str(REPO / "configs/experiment/quickstart.yaml"),
        "--data.dataset", "synthetic", "--data.partitioner", "iid",
        "--data.num_clients", str(num_clients),
        "--data.dataset_options", json.dumps({"num_examples": EXAMPLES,
                                              "num_features": FEATURES}),
        "--client", str(REPO / "configs/client/digits_mlp.yaml"),
        "--model.clients_per_round", str(COHORT), "--model.eval_every", "0",
        "--trainer.max_steps", str(rounds),
        "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.default_root_dir", tempfile.mkdtemp(),
    ]  # fmt: skip
    cli = build_cli_class()(args, run=False)
    cli.trainer.callbacks.append(_Probe())
    cli.trainer.fit(cli.model, cli.datamodule)
    gc.collect()
    tensors = sum(1 for o in gc.get_objects() if issubclass(type(o), torch.Tensor))
    assert len(cli.datamodule.client_indices) == num_clients
    print(
        json.dumps(
            {
                "clients": num_clients,
                "peak_rss_mib": status_mib("VmHWM"),
                "rss_after_setup_mib": after_setup["rss"],
                "rss_after_rounds_mib": status_mib("VmRSS"),
                "live_tensors": tensors,
            }
        )
    )


def run_child(num_clients: int, rounds: int) -> dict:
    cmd = [sys.executable, __file__, "--child", str(num_clients), "--rounds", str(rounds)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline"}
    res = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="directory for population_memory.{md,json}")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.rounds)
        return
    load_before = os.getloadavg()
    runs: dict[int, list[dict]] = {n: [] for n in POPULATIONS}
    for r in range(args.repeats):
        for n in POPULATIONS if r % 2 == 0 else POPULATIONS[::-1]:
            runs[n].append(run_child(n, args.rounds))
            print(json.dumps(runs[n][-1]), flush=True)
    keys = ("peak_rss_mib", "rss_after_setup_mib", "rss_after_rounds_mib", "live_tensors")
    med = {n: {k: statistics.median(m[k] for m in runs[n]) for k in keys} for n in POPULATIONS}
    base = med[POPULATIONS[0]]
    growth = {n: {k: med[n][k] / base[k] - 1 for k in keys[:3]} for n in POPULATIONS}
    workload = (
        f"DP-FedAvg (quickstart), digits MLP 64-32-10, synthetic {EXAMPLES} x "
        f"{FEATURES} (80 % train), iid, cohort {COHORT}, {args.rounds} rounds, "
        f"{args.repeats} interleaved repeats (median)"
    )
    lines = [
        "| registered clients | peak RSS MiB | RSS after setup MiB | RSS after rounds MiB "
        "| live tensors | peak / setup / after vs 100 clients |",
        "|---|---|---|---|---|---|",
    ]
    for n in POPULATIONS:
        m, g = med[n], growth[n]
        lines.append(
            f"| {n:,} | {m['peak_rss_mib']:.0f} | {m['rss_after_setup_mib']:.0f} "
            f"| {m['rss_after_rounds_mib']:.0f} | {m['live_tensors']:.0f} "
            f"| {g['peak_rss_mib']:+.1%} / {g['rss_after_setup_mib']:+.1%} "
            f"/ {g['rss_after_rounds_mib']:+.1%} |"
        )
    record_run(
        args.out,
        "population_memory",
        title=workload,
        intro="# Memory of registered clients (issue 22, item 4)\n\n"
        "`benchmarks/population_memory.py`; goal: RSS with 10,000 and 100,000 "
        "registered clients within +10 % of 100.\n\n",
        lines=["", *lines],
        load_before=load_before,
        command="python benchmarks/population_memory.py " + " ".join(sys.argv[1:]),
        benchmark="benchmarks/population_memory.py",
        workload=workload,
        median={str(n): v for n, v in med.items()},
        growth_vs_100={str(n): v for n, v in growth.items()},
        runs={str(n): v for n, v in runs.items()},
    )


if __name__ == "__main__":
    main()
