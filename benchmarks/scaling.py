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

Each repeat runs engine 1 process, engine 2 processes, bare 1, bare 2 back to back, in the
reverse order every other repeat (the VM's speed drifts by 20-30 % over minutes, so ratios are
taken within a repeat); the result is the median ratio over ``--repeats`` (default 3) with its
range. The machine's core count and its load average (``os.getloadavg``, before the run and
after every repeat) are measured and printed, never typed in. ``--mnist-root`` (or
``FL_MNIST_ROOT``) points at the offline MNIST files; by default the shipped root
``../shared/data`` finds them (``$FL_SHARED_DATA``, else ``shared/data`` inside, beside or above
the checkout). An existing ``--out`` file is kept: the new run is appended below it.

Usage: ``python benchmarks/scaling.py [--workload digits|mnist] [--rounds 12] [--repeats 3]
[--cohort N] [--profile]``.
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
if "--mnist-root" in sys.argv:  # before WORKLOADS reads it
    os.environ["FL_MNIST_ROOT"] = sys.argv[sys.argv.index("--mnist-root") + 1]
os.environ.setdefault("FL_MNIST_ROOT", "../shared/data")  # the shipped root: looked up

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


def run(
    processes: int, rounds: int, cohort: int, workload: str, root: Path, profile: bool
) -> tuple[list[float], dict[int, dict[str, list[float]]]]:
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


def _engine_round(procs: int, args, cohort: int) -> tuple[float, float | None, dict]:  # noqa: ANN001
    """Median round time and (with ``--profile``) median step-to-step time of one engine run."""
    with tempfile.TemporaryDirectory() as tmp:
        times, profiles = run(procs, args.rounds, cohort, args.workload, Path(tmp), args.profile)
    step_to_step = None
    if 0 in profiles:
        steps = [s + b for s, b in zip(profiles[0]["step"][1:], profiles[0]["between"][1:])]
        step_to_step = _median(steps)
    return _median(times), step_to_step, profiles


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="digits")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--cohort", type=int, default=None)
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="interleaved repeats (1 process, 2 processes, bare 1, bare 2 in turn)",
    )
    p.add_argument("--profile", action="store_true", help="per-rank time split (see module doc)")
    p.add_argument("--shared", action="store_true", help="note: the machine was shared")
    p.add_argument("--no-bare", action="store_true", help="skip the bare-PyTorch reference")
    p.add_argument("--out", default=None)
    p.add_argument("--mnist-root", default=None, help="offline MNIST directory (mnist workload)")
    args = p.parse_args()
    load_before = os.getloadavg()
    loads = []
    cohort = args.cohort or WORKLOADS[args.workload]["cohort"]
    out = Path(args.out or REPO / f"benchmarks/results/scaling_{args.workload}.md")
    if not args.no_bare:
        from _bare_reference import bare_round_times
    repeats, prof_rows = [], []
    # Interleaved: a slow patch of a shared VM hits both sides of a ratio, not one.
    for rep in range(args.repeats):
        engine, bare = {}, {}
        order = [("engine", 1), ("engine", 2)]
        order += [] if args.no_bare else [("bare", 1), ("bare", 2)]
        for kind, procs in order if rep % 2 == 0 else order[::-1]:
            if kind == "engine":
                engine[procs] = _engine_round(procs, args, cohort)
            else:
                times = bare_round_times(args.workload, procs, args.rounds, cohort)
                bare[procs] = _median(times[1:])
        engine = {procs: engine[procs] for procs in (1, 2)}
        loads.append(os.getloadavg())
        repeats.append((engine, bare))
        for procs, (_, _, profiles) in engine.items():
            for rank, prof in sorted(profiles.items()):
                prof_rows.append((rep + 1, procs, rank,
                                  {k: statistics.fmean(prof[k]) for k in PARTS}))  # fmt: skip
        e1, e2 = engine[1][0], engine[2][0]
        line = f"repeat {rep + 1}: engine {e1:.3f} s -> {e2:.3f} s, {e1 / e2:.2f}x"
        line += f" (load average after: {', '.join(f'{v:.1f}' for v in loads[-1])})"
        if bare:
            line += f"; bare {bare[1]:.3f} s -> {bare[2]:.3f} s, {bare[1] / bare[2]:.2f}x"
        print(line, flush=True)
    engine_speedups = [e[1][0] / e[2][0] for e, _ in repeats]
    bare_speedups = [b[1] / b[2] for _, b in repeats if b]
    shared = ("**The machine was shared with other agents' jobs while measuring**: absolute "
              "numbers and the speed-up are noisy." if args.shared else "")  # fmt: skip
    load_text = (f"Load average (1/5/15 min, measured) before: "
                 f"{', '.join(f'{v:.1f}' for v in load_before)}; after each repeat (1 min): "
                 f"{', '.join(f'{v[0]:.1f}' for v in loads)}.")  # fmt: skip
    cmd = f"python benchmarks/scaling.py --workload {args.workload} --rounds {args.rounds}"
    cmd += f" --cohort {cohort} --repeats {args.repeats}" + (" --profile" if args.profile else "")
    cmd += " --no-bare" if args.no_bare else ""
    header = "| repeat | 1 process (s) | 2 processes (s) | engine speed-up |"
    rule = "|---:|---:|---:|---:|"
    header += " load (1 min) after |"
    rule += "---:|"
    if args.profile:
        header += " step to step, 1 / 2 (s) | speed-up |"
        rule += "---:|---:|"
    if bare_speedups:
        header += " bare 1 process (s) | bare 2 processes (s) | bare speed-up |"
        rule += "---:|---:|---:|"
    lines = [
        f"# Scaling ({args.workload}): clients per second with 1 and 2 processes (DDP, gloo, CPU)",
        "",
        f"Machine: {platform.node()}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores (os.cpu_count), torch threads 1 per process; "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC. {load_text}"
        + (f" {shared}" if shared else ""),
        "",
        f"Workload: {WORKLOADS[args.workload]['text'].format(cohort=cohort)}. Per run: median "
        f"over rounds 2..{args.rounds} of rank 0's round wall time `round/time_s` (includes the "
        "all-reduce). Engine speed-up = 1-process round time / 2-process round time of the "
        "same repeat. Bare: the same local training in a plain loop, same shards, no "
        "framework, no collectives (`benchmarks/_bare_reference.py`), in the same repeat: "
        "its speed-up is what the machine allows. The four runs of a repeat are interleaved "
        "(reversed every other repeat) so that a slow patch of the VM hits both sides of a "
        "ratio.",
        "",
        header,
        rule,
    ]
    for rep, (engine, bare) in enumerate(repeats, 1):
        (e1, w1, _), (e2, w2, _) = engine[1], engine[2]
        row = f"| {rep} | {e1:.3f} | {e2:.3f} | {e1 / e2:.2f}x | {loads[rep - 1][0]:.1f} |"
        if args.profile:
            row += f" {w1:.3f} / {w2:.3f} | {w1 / w2:.2f}x |" if w1 and w2 else " - | - |"
        if bare:
            row += f" {bare[1]:.3f} | {bare[2]:.3f} | {bare[1] / bare[2]:.2f}x |"
        lines.append(row)
    med_e = _median(engine_speedups)
    lines += [
        "",
        f"**Engine speed-up, median of {len(engine_speedups)} repeats: {med_e:.2f}x** "
        f"(range {min(engine_speedups):.2f}-{max(engine_speedups):.2f}x; "
        f"{cohort / _median([e[2][0] for e, _ in repeats]):.1f} clients/s with 2 "
        "processes).",
    ]
    if bare_speedups:
        med_b = _median(bare_speedups)
        lines.append(
            f"Bare-PyTorch speed-up, median: {med_b:.2f}x (range {min(bare_speedups):.2f}-"
            f"{max(bare_speedups):.2f}x); engine / bare: {med_e / med_b:.0%}."
        )
    if prof_rows:
        lines += [
            "",
            "Per-rank split of a round (mean seconds; `busy` local training, `imbalance` "
            "waiting for the slower rank, `collective` all-reduce + records gather, `between` "
            "Lightning's loop between rounds; see `benchmarks/_profiled_cli.py`):",
            "",
            "| repeat | processes | rank | " + " | ".join(PARTS) + " |",
            "|---:|---:|---:|" + "---:|" * len(PARTS),
            *[f"| {rep} | {procs} | {rank} | " + " | ".join(f"{t[k]:.4f}" for k in PARTS) + " |"
              for rep, procs, rank, t in prof_rows],
        ]  # fmt: skip
    lines += ["", f"Command: `{cmd}`", ""]
    text = "\n".join(lines)
    if out.exists():  # keep the earlier runs: the new one goes below them
        text = out.read_text().rstrip("\n") + "\n\n---\n\n#" + text
    out.write_text(text)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
