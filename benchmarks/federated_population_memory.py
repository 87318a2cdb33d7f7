"""Memory and round time of a lazy federated population (issue 61, item 4): 10², 10⁴, 10⁵ and
10⁶ clients in TFF's federated HDF5 layout, cohort 100.

The same run through the real stack (LightningCLI objects, Trainer, FederatedModule, DP-FedAvg
of the quickstart, RDP accountant) with the same model (the digits MLP 64-32-10), cohort (100
clients a round), rounds (2), δ (10⁻⁷, below 1/N for all) and test split (200 clients);
only the training file changes:
``examples/<client_id>/{pixels,label}``, 1-4 examples of 8×8 a client
(``benchmarks/_hdf5_population.py``, written once under ``--dir``). Clients are read when
sampled (``data/federated/``); the client index (ids and sizes) is built on the first run over a
file and cached. Each run is a fresh subprocess that prints

- peak RSS (``VmHWM``) of the whole process, with the index read from the cache (``warm``) and
  on the run that builds it (``cold``, first run per file),
- the index's arrays in MiB (ids as bytes + int64 sizes),
- the mean wall time of a round (sampling, reading 100 clients, local training, clipping,
  noise, accounting).

Goal: 10⁶ clients within +10 % of 10² in peak RSS (warm). The machine's core count and load
average are measured and printed; the machine is shared, so round times are indicative.

    PYTHONPATH=. python benchmarks/federated_population_memory.py --dir /tmp/fl_pop \\
        --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _hdf5_population import write_population
from _proc_status import status_mib
from _record import record_run

REPO = Path(__file__).resolve().parents[1]
POPULATIONS = (100, 10_000, 100_000, 1_000_000)
COHORT, TEST_CLIENTS = 100, 200
DELTA = 1e-7  # < 1/N for every population (the run refuses δ ≥ 1/N)


def child(directory: Path, num_clients: int, rounds: int) -> None:
    """One run in this (fresh) process; prints one JSON line."""
    import tempfile

    import lightning.pytorch as pl
    import torch

    from fl_lightning.runs.cli_class import build_cli_class

    torch.set_num_threads(1)
    times: list[float] = []

    class _Clock(pl.Callback):
        def on_train_batch_start(self, *args: object) -> None:
            times.append(time.perf_counter())

        def on_train_batch_end(self, *args: object) -> None:
            times[-1] = time.perf_counter() - times[-1]

    options = {
        "train": f"train_{num_clients}.h5", "test": "test.h5", "x": "pixels", "y": "label",
        "num_classes": 10, "index_cache": str(directory / "index"),
    }  # fmt: skip
    args = [
        "--config", str(REPO / "configs/experiment/quickstart.yaml"),
        "--data.dataset", "federated_hdf5", "--data.partitioner", "natural",
        "--data.root", str(directory), "--data.dataset_options", json.dumps(options),
        "--client", str(REPO / "configs/client/digits_mlp.yaml"),
        "--model.clients_per_round", str(COHORT), "--model.eval_every", "0",
        "--privacy.delta", str(DELTA),
        "--trainer.max_steps", str(rounds),
        "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
        "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
        "--trainer.default_root_dir", tempfile.mkdtemp(),
    ]  # fmt: skip
    start = time.perf_counter()
    cli = build_cli_class()(args, run=False)
    cli.datamodule.setup("fit")
    setup_s = time.perf_counter() - start
    cli.trainer.callbacks.append(_Clock())
    cli.trainer.fit(cli.model, cli.datamodule)
    store = cli.datamodule.clients
    assert len(store) == num_clients
    print(
        json.dumps(
            {
                "clients": num_clients,
                "peak_rss_mib": status_mib("VmHWM"),
                "index_mib": (store.ids.nbytes + store.sizes.nbytes) / 2**20,
                "data_setup_s": setup_s,
                "round_s": sum(times) / len(times),
                "rounds": len(times),
            }
        )
    )


def run_child(directory: Path, num_clients: int, rounds: int) -> dict:
    cmd = [sys.executable, __file__, "--dir", str(directory), "--child", str(num_clients),
           "--rounds", str(rounds)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if res.returncode != 0:
        raise SystemExit(f"child {num_clients} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True, help="folder of the population files (reused)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--populations", type=int, nargs="+", default=list(POPULATIONS))
    parser.add_argument("--out", default=None, help="directory for the .md/.json record")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    directory = Path(args.dir)
    if args.child:
        child(directory, args.child, args.rounds)
        return
    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    for n in [*args.populations, TEST_CLIENTS]:
        name = "test.h5" if n == TEST_CLIENTS else f"train_{n}.h5"
        if not (directory / name).is_file():
            start = time.perf_counter()
            write_population(directory / name, n)
            written[name] = time.perf_counter() - start
    load_before = os.getloadavg()
    cold = {}
    for n in args.populations:  # builds (or reads) each file's index once
        cold[n] = run_child(directory, n, args.rounds)
        print(json.dumps({"cold": cold[n]}), flush=True)
    warm = {}
    for n in args.populations:
        warm[n] = run_child(directory, n, args.rounds)
        print(json.dumps({"warm": warm[n]}), flush=True)
    base = warm[args.populations[0]]["peak_rss_mib"]
    lines = [
        "| clients | peak RSS MiB (warm index) | vs 10² | peak RSS MiB (first run) | "
        "index MiB | data set-up s (first / warm) | round s (warm) |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in args.populations:
        w, c = warm[n], cold[n]
        lines.append(
            f"| {n:,} | {w['peak_rss_mib']:.0f} | {w['peak_rss_mib'] / base - 1:+.1%} "
            f"| {c['peak_rss_mib']:.0f} | {w['index_mib']:.1f} "
            f"| {c['data_setup_s']:.1f} / {w['data_setup_s']:.1f} | {w['round_s']:.2f} |"
        )
    workload = (
        f"DP-FedAvg (quickstart), digits MLP 64-32-10, federated HDF5 populations, cohort "
        f"{COHORT}, {args.rounds} rounds, δ = {DELTA:g}, test {TEST_CLIENTS} clients"
    )
    record_run(
        args.out,
        "federated_population_memory",
        title=workload,
        intro="# Memory of a lazy federated population (issue 61, item 4)\n\n"
        "`benchmarks/federated_population_memory.py`; goal: peak RSS with 10⁶ clients within "
        "+10 % of 10² (same cohort).\n\n",
        lines=["", *lines, "", f"Files written this run (s): {written or 'none (reused)'}"],
        load_before=load_before,
        command="python benchmarks/federated_population_memory.py " + " ".join(sys.argv[1:]),
        benchmark="benchmarks/federated_population_memory.py",
        workload=workload,
        warm={str(n): v for n, v in warm.items()},
        cold={str(n): v for n, v in cold.items()},
        files_written_s=written,
    )


if __name__ == "__main__":
    main()
