"""Clients per second with 1 and 2 DDP processes (gloo, CPU, 1 thread each).

Runs the real CLI and reads the per-round wall time ``round/time_s`` that rank 0 logs (it
includes waiting for the round's all-reduce) and the wall time between consecutive rounds
(``round/time_s`` plus everything outside the round: accounting, logging, Lightning's loop);
the first round is dropped as warm-up. Workloads:

* ``digits`` (default, the original one): digits, MLP, 40 clients, 40 a round, 10 local epochs,
  DP-FedAvg (rounds of ~0.5 s: fixed per-round costs matter);
* ``mnist``: offline MNIST (8,000 training images), the small MnistCNN, 100 clients, 50 a
  round, 1 local epoch, DP-FedAvg (a heavier, more realistic round).

A bare-PyTorch reference (``benchmarks/_bare_reference.py``: the same local training in a
plain loop, same shards, no framework, no collectives) is measured with 1 and 2 processes in
the same run: its ratio is what the machine allows; ``--no-bare`` skips it.

``--profile`` also runs every process under ``benchmarks/_profiled_cli.py`` and prints, per
rank, where a round's time goes (local training, waiting for the slower rank, the collectives,
accounting, logging, Lightning's loop between rounds).

Usage: ``python benchmarks/scaling.py [--workload digits|mnist] [--rounds 12] [--profile]``.
Writes ``benchmarks/results/scaling_<workload>.md`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's package (also in the spawned reference processes)
os.environ.setdefault("FL_MNIST_ROOT", str(REPO.parent / "shared" / "data"))

WORKLOADS = {
    "digits": {
        "args": ["--client", str(REPO / "configs/client/digits_mlp.yaml"),
                 "--data.num_clients", "40", "--client.local_epochs", "10"],
        "cohort": 40,
        "text": "digits, MLP, 40 clients (Dirichlet 0.5), {cohort} clients a round, 10 local "
                "epochs, DP-FedAvg",
    },
    "mnist": {
        "args": ["--client", str(REPO / "configs/client/mnist_cnn_small.yaml"),
                 "--data.dataset", "mnist_offline", "--data.root", os.environ["FL_MNIST_ROOT"],
                 "--data.num_clients", "100", "--client.local_epochs", "1"],
        "cohort": 50,
        "text": "offline MNIST (8,000 training images), MnistCNN (8/16 channels, 64 hidden), "
                "100 clients (Dirichlet 0.5), {cohort} clients a round, 1 local epoch, "
                "batch 32, DP-FedAvg",
    },
}  # fmt: skip
PARTS = ("busy", "imbalance", "collective", "accounting", "log", "step", "between")


def run(processes: int, rounds: int, cohort: int, workload: str, root: Path, profile: bool):
    entry = ([str(REPO / "benchmarks/_profiled_cli.py")] if profile
             else ["-m", "fl_lightning.cli"])  # fmt: skip
    cmd = [sys.executable, *entry, "fit",
           "--config", str(REPO / "configs/experiment/quickstart.yaml"),
           *WORKLOADS[workload]["args"],
           "--model.clients_per_round", str(cohort), "--model.eval_every", "0",
           "--trainer.max_steps", str(rounds), "--trainer.enable_progress_bar", "false",
           "--trainer.enable_checkpointing", "false", "--trainer.accelerator", "cpu",
           "--trainer.devices", str(processes), "--trainer.default_root_dir", str(root),
           "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
           "--trainer.logger.save_dir", str(root)]  # fmt: skip
    if processes > 1:
        cmd += ["--trainer.strategy", "ddp"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "FL_PROFILE_DIR": str(root), "PYTHONPATH": str(REPO)}  # fmt: skip
    subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True)
    (metrics,) = root.rglob("metrics.csv")
    with metrics.open() as f:
        times = [float(r["round/time_s"]) for r in csv.DictReader(f) if r.get("round/time_s")]
    profiles = {}
    for rank in range(processes):
        path = root / f"rank{rank}.json"
        if path.exists():
            profiles[rank] = {k: v[1:] for k, v in json.loads(path.read_text()).items()}
    return times[1:], profiles


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="digits")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--cohort", type=int, default=None)
    p.add_argument("--profile", action="store_true", help="per-rank time split (see module doc)")
    p.add_argument("--shared", action="store_true", help="note: the machine was shared")
    p.add_argument("--no-bare", action="store_true", help="skip the bare-PyTorch reference")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    cohort = args.cohort or WORKLOADS[args.workload]["cohort"]
    out = Path(args.out or REPO / f"benchmarks/results/scaling_{args.workload}.md")
    rows, prof_rows = [], []
    base = base_wall = None
    for procs in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            times, profiles = run(procs, args.rounds, cohort, args.workload, Path(tmp),
                                  args.profile)  # fmt: skip
        med = _median(times)
        cps = cohort / med
        base = base or cps
        wall = None
        if 0 in profiles:
            steps = [s + b for s, b in zip(profiles[0]["step"][1:], profiles[0]["between"][1:])]
            wall = cohort / _median(steps)
            base_wall = base_wall or wall
        rows.append((procs, med, cps, cps / base, wall, wall / base_wall if wall else None))
        for rank, prof in sorted(profiles.items()):
            prof_rows.append((procs, rank, {k: statistics.fmean(prof[k]) for k in PARTS}))
        print(f"{procs} process(es): median round {med:.3f} s, {cps:.1f} clients/s, "
              f"{cps / base:.2f}x", flush=True)  # fmt: skip
    bare_rows = []
    if not args.no_bare:
        from _bare_reference import bare_round_times

        for procs in (1, 2):
            med = _median(bare_round_times(args.workload, procs, args.rounds, cohort)[1:])
            bare_rows.append((procs, med, cohort / med, bare_rows[0][1] / med if bare_rows else 1))
            print(f"bare PyTorch, {procs} process(es): median round {med:.3f} s, "
                  f"{bare_rows[-1][3]:.2f}x", flush=True)  # fmt: skip
    shared = ("**The machine was shared with other agents' jobs while measuring**: absolute "
              "numbers and the speed-up are noisy." if args.shared else
              "Idle machine (no other jobs).")  # fmt: skip
    cmd = f"python benchmarks/scaling.py --workload {args.workload} --rounds {args.rounds}"
    cmd += f" --cohort {cohort}" + (" --profile" if args.profile else "")
    cmd += " --no-bare" if args.no_bare else ""
    lines = [
        f"# Scaling ({args.workload}): clients per second with 1 and 2 processes (DDP, gloo, CPU)",
        "",
        f"Machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, torch threads 1 per process; {datetime.date.today()}. {shared}",
        "",
        f"Workload: {WORKLOADS[args.workload]['text'].format(cohort=cohort)}; median over "
        f"rounds 2..{args.rounds} of rank 0's round wall time `round/time_s` (includes the "
        "all-reduce). Reference: the same run in 1 process (the unsharded engine).",
        "",
        "| processes | median round (s) | clients / s | speed-up |"
        + (" clients / s, step to step | speed-up |" if args.profile else ""),
        "|---:|---:|---:|---:|" + ("---:|---:|" if args.profile else ""),
    ]
    for procs, med, cps, speed, wall, wspeed in rows:
        extra = f" {wall:.1f} | {wspeed:.2f}x |" if args.profile and wall else ""
        lines.append(f"| {procs} | {med:.3f} | {cps:.1f} | {speed:.2f}x |{extra}")
    if bare_rows:
        engine = rows[1][3]
        lines += [
            "",
            "Bare-PyTorch reference, same run (the same local training in a plain loop, same "
            "shards, no framework, no collectives; `benchmarks/_bare_reference.py`):",
            "",
            "| processes | median round (s) | clients / s | speed-up |",
            "|---:|---:|---:|---:|",
            *[f"| {p} | {m:.3f} | {c:.1f} | {s:.2f}x |" for p, m, c, s in bare_rows],
            "",
            f"Engine speed-up / bare speed-up: {engine:.2f} / {bare_rows[1][3]:.2f} = "
            f"{engine / bare_rows[1][3]:.0%} of what the machine allows.",
        ]
    if prof_rows:
        lines += [
            "",
            "Per-rank split of a round (mean seconds; `busy` local training, `imbalance` "
            "waiting for the slower rank, `collective` all-reduce + records gather, `between` "
            "Lightning's loop between rounds; see `benchmarks/_profiled_cli.py`):",
            "",
            "| processes | rank | " + " | ".join(PARTS) + " |",
            "|---:|---:|" + "---:|" * len(PARTS),
            *[f"| {procs} | {rank} | " + " | ".join(f"{t[k]:.4f}" for k in PARTS) + " |"
              for procs, rank, t in prof_rows],
        ]  # fmt: skip
    lines += ["", f"Command: `{cmd}`", ""]
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
