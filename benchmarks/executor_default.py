"""Which ``model.executor`` a fresh ``fit`` should get by default (issue 59, item 4): the
sequential, the vectorised (stacked) and the ``auto`` path on the same configs, through the
real CLI, interleaved, with the path ``auto`` chose and whether each path's printed and stored
results equal the sequential path's to the last digit.

Workloads (``--workloads``):

- ``quickstart``: ``configs/experiment/quickstart.yaml`` as the README runs it (digits,
  logistic regression, client-level DP-FedAvg, cohort 20, 40 rounds);
- ``dpsgd100``: ``configs/experiment/sweep_demo_dpsgd.yaml`` (MnistCNN, record-level DP-SGD
  clients) at cohort 100: 100 clients of the offline MNIST test set, all in the cohort, 3 rounds
  (needs ``../shared/data``; skipped without it).

Each repeat runs the three paths in a rotating order (S V A, V A S, A S V, ...) in fresh
processes, one torch thread each (``OMP_NUM_THREADS=1``), and times the whole ``fit`` (process
start to exit) and the rounds (the run's ``time/round_s`` sum is not logged, so the wall clock of
the process is what a user waits for). Results: the final test accuracy, the loss and ε as the
run stores them in ``summary.json``, compared with the sequential run's of the same repeat.

    PYTHONPATH=. python benchmarks/executor_default.py --reps 3 --out benchmarks/results
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _record import commit, out_dir, record_run

REPO = Path(__file__).resolve().parents[1]
PATHS = ("sequential", "vectorized", "auto")
WORKLOADS: dict[str, list[str]] = {
    "quickstart": ["--config", str(REPO / "configs/experiment/quickstart.yaml")],
    "dpsgd100": [
        "--config",
        str(REPO / "configs/experiment/sweep_demo_dpsgd.yaml"),
        "--data.root",
        str(REPO.parent / "shared/data"),
        "--data.num_clients",
        "100",
        "--model.clients_per_round",
        "100",
        "--trainer.max_steps",
        "3",
        "--model.eval_every",
        "3",
    ],
}
# Runs fit with fl_lightning's INFO lines shown, so that auto's choice (an INFO line when it
# keeps the stacked path, a WARNING when it keeps the sequential one) reaches stderr.
INTRO = (
    "# Executor paths through `fit`\n\nWritten by `benchmarks/executor_default.py` (see its "
    "docstring for the workloads); one section per run, newest last.\n"
)
LAUNCH = (
    "import logging, sys; logging.basicConfig(level=logging.WARNING); "
    "logging.getLogger('fl_lightning.server.executor').setLevel(logging.INFO); "
    "from fl_lightning.cli import main; sys.exit(main(sys.argv[1:]))"
)


def run_fit(workload: str, path: str, root: Path) -> dict[str, Any]:
    """One ``fl-lightning fit`` in a fresh process; its wall time, auto's choice, its results."""
    run_dir = root / f"{workload}-{path}-{time.monotonic_ns()}"
    cmd = [
        sys.executable,
        "-c",
        LAUNCH,
        "fit",
        *WORKLOADS[workload],
        "--model.executor",
        path,
        "--trainer.default_root_dir",
        str(run_dir),
        "--trainer.enable_progress_bar",
        "false",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{workload}/{path}: fit failed\n{proc.stderr[-2000:]}")
    summary = json.loads(next(run_dir.rglob("summary.json")).read_text())
    chose = None
    for line in proc.stderr.splitlines():
        if "executor auto:" in line:
            chose = "sequential" if "sequential training" in line else "vectorized"
    results = {
        k: summary[k]
        for k in sorted(summary)
        if k.startswith(("test/", "privacy/epsilon", "train/loss"))
        and isinstance(summary[k], (int, float))
    }
    return {"wall_s": wall, "auto_chose": chose, "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", help="directory: append executor_default.{md,json}")
    parser.add_argument("--note", help="free text recorded with the machine")
    args = parser.parse_args()
    out = out_dir(parser, args.out, "executor_default")
    workloads = [
        w
        for w in args.workloads
        if w != "dpsgd100" or (REPO.parent / "shared/data/MNIST/raw").is_dir()
    ]
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for workload in workloads:
            runs: dict[str, list[dict[str, Any]]] = {p: [] for p in PATHS}
            for rep in range(args.reps):
                order = PATHS[rep % 3 :] + PATHS[: rep % 3]
                for path in order:
                    runs[path].append(run_fit(workload, path, Path(tmp)))
                    print(workload, rep, path, f"{runs[path][-1]['wall_s']:.1f} s", flush=True)
            seq = runs["sequential"]
            for path in PATHS:
                walls = [r["wall_s"] for r in runs[path]]
                ratios = [s["wall_s"] / r["wall_s"] for s, r in zip(seq, runs[path], strict=True)]
                same = [r["results"] == s["results"] for s, r in zip(seq, runs[path], strict=True)]
                diffs = [
                    max((abs(r["results"][k] - s["results"][k]) for k in s["results"]), default=0.0)
                    for s, r in zip(seq, runs[path], strict=True)
                ]
                rows.append(
                    {
                        "workload": workload,
                        "path": path,
                        "median_wall_s": statistics.median(walls),
                        "seq_over_path": statistics.median(ratios),
                        "auto_chose": sorted({str(r["auto_chose"]) for r in runs[path]}),
                        "identical_to_sequential": f"{sum(same)}/{len(same)}",
                        "max_abs_diff": max(diffs),
                        "results": runs[path][0]["results"],
                    }
                )
    lines = [
        "",
        "| workload | path | median wall s | sequential ÷ path (median of repeats) | auto chose "
        "| results identical to sequential | max abs diff in a stored result |",
        "|---|---|---:|---:|---|---|---:|",
    ]
    for r in rows:
        chose = ", ".join(r["auto_chose"]) if r["path"] == "auto" else "–"
        lines.append(
            f"| {r['workload']} | {r['path']} | {r['median_wall_s']:.1f} | "
            f"{r['seq_over_path']:.2f}× | {chose} | {r['identical_to_sequential']} | "
            f"{r['max_abs_diff']:.3g} |"
        )
    record_run(out, "executor_default", title=f"executor paths through fit at {commit()}, "
               f"{args.reps} rotating repeats", intro=INTRO, lines=lines,
               load_before=load_before, command=" ".join(sys.argv), threads=1, note=args.note,
               rows=rows, reps=args.reps)  # fmt: skip


if __name__ == "__main__":
    main()
