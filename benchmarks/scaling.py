"""Clients per second with 1 and 2 DDP processes (gloo, CPU, 1 thread each).

Runs the real CLI (digits, MLP, 40 clients, 40 a round, 10 local epochs) and reads the per-round
wall time ``round/time_s`` that rank 0 logs (it includes waiting for the round's all-reduce);
the first round is dropped as warm-up. Usage: ``python benchmarks/scaling.py [--rounds 6]``.
Writes benchmarks/results/scaling.md.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(processes: int, rounds: int, cohort: int, root: Path) -> list[float]:
    cmd = [sys.executable, "-m", "fl_lightning.cli", "fit",
           "--config", str(REPO / "configs/experiment/quickstart.yaml"),
           "--client", str(REPO / "configs/client/digits_mlp.yaml"),
           "--model.clients_per_round", str(cohort), "--model.eval_every", "0",
           "--data.num_clients", "40", "--client.local_epochs", "10",
           "--trainer.max_steps", str(rounds), "--trainer.enable_progress_bar", "false",
           "--trainer.enable_checkpointing", "false", "--trainer.accelerator", "cpu",
           "--trainer.devices", str(processes), "--trainer.default_root_dir", str(root),
           "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
           "--trainer.logger.save_dir", str(root)]  # fmt: skip
    if processes > 1:
        cmd += ["--trainer.strategy", "ddp"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True)
    (metrics,) = root.rglob("metrics.csv")
    with metrics.open() as f:
        times = [float(r["round/time_s"]) for r in csv.DictReader(f) if r.get("round/time_s")]
    return times[1:]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--cohort", type=int, default=40)
    p.add_argument("--out", default=str(REPO / "benchmarks/results/scaling.md"))
    args = p.parse_args()
    rows = []
    base = None
    for procs in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            times = run(procs, args.rounds, args.cohort, Path(tmp))
        med = statistics.median(times)
        cps = args.cohort / med
        base = base or cps
        rows.append((procs, med, cps, cps / base))
        print(f"{procs} process(es): median round {med:.3f} s, {cps:.1f} clients/s, "
              f"{cps / base:.2f}x", flush=True)  # fmt: skip
    lines = [
        "# Scaling: clients per second with 1 and 2 processes (DDP, gloo, CPU)",
        "",
        f"Machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, torch threads 1 per process; {datetime.date.today()}. "
        "**The machine was shared with other agents' jobs while measuring**, so absolute "
        "numbers and the speed-up are noisy (lower bounds of what an idle machine gives).",
        "",
        f"Workload: digits, MLP, 40 clients (Dirichlet 0.5), {args.cohort} clients a round, "
        f"10 local epochs, DP-FedAvg; median over rounds 2..{args.rounds} of rank 0's round "
        "wall time (includes the all-reduce). Reference: the same run in 1 process "
        "(the unsharded engine).",
        "",
        "| processes | median round (s) | clients / s | speed-up |",
        "|---:|---:|---:|---:|",
        *[f"| {p} | {m:.3f} | {c:.1f} | {s:.2f}x |" for p, m, c, s in rows],
        "",
        f"Command: `python benchmarks/scaling.py --rounds {args.rounds} --cohort {args.cohort}`",
        "",
    ]
    Path(args.out).write_text("\n".join(lines))


if __name__ == "__main__":
    main()
