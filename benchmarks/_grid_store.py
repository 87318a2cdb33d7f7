"""A grid of CLI runs kept in a JSON-lines store (one row per finished run, appended as it ends):
rerunning the script skips the points stored, so a long grid can be stopped and resumed.

Shared by the offline-MNIST comparisons (``dp_ftrl_mnist_offline.py``,
``distributed_dp_mnist_offline.py``): each point is ``(arm, ε target, seed)``, run as
``fl-lightning fit`` in a temporary directory whose summary and privacy ledger are read back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def read_rows(store: Path) -> list[dict]:
    """The rows stored so far (none when the store does not exist yet)."""
    return [json.loads(line) for line in store.read_text().splitlines()] if store.exists() else []


def fit(args: list[str]) -> dict[str, Any]:
    """``fl-lightning fit ARGS`` in a temporary root: its summary and ledger, the wall time, the
    load average around it and the command; on failure ``error`` (stderr's last line)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "fl_lightning.cli", "fit", *args,
               "--trainer.default_root_dir", tmp, "--trainer.enable_progress_bar", "false",
               "--trainer.logger", "false"]  # fmt: skip
        load, start = os.getloadavg(), time.time()
        done = subprocess.run(cmd, capture_output=True, text=True)
        out: dict[str, Any] = {"command": " ".join(cmd[1:])}
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            return {**out, "error": lines[-1] if lines else f"exit {done.returncode}"}
        return {
            **out,
            "summary": json.loads(next(Path(tmp).rglob("summary.json")).read_text()),
            "ledger": json.loads(next(Path(tmp).rglob("privacy_ledger.json")).read_text()),
            "seconds": time.time() - start,
            "load_before": load,
            "load_after": os.getloadavg(),
        }


def run_missing(
    store: Path,
    points: Iterable[tuple[str, float, int]],
    run_one: Callable[[str, float, int], dict],
    describe: Callable[[dict], str],
) -> None:
    """Runs every ``(arm, ε target, seed)`` not yet in ``store``, appending each row as it ends
    and printing ``describe(row)``."""
    done = {(r["arm"], r["epsilon_target"], r["seed"]) for r in read_rows(store)}
    for arm, eps, seed in points:
        if (arm, eps, seed) in done:
            continue
        row = run_one(arm, eps, seed)
        with store.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{arm} ε={eps:g} seed={seed}: {describe(row)}", flush=True)


def grid_main(
    description: str,
    arms: Iterable[str],
    run_one: Callable[[str, float, int], dict],
    describe: Callable[[dict], str],
    tables: Iterable[Callable[[list[dict]], str]],
    *,
    epsilons: list[float],
) -> int:
    """The grid scripts' command line: ``--store`` (required), ``--seeds``, ``--epsilons``,
    ``--arms``; ``--report`` prints ``tables`` of the store (a blank line between), otherwise
    the missing points run, ε by ε, seed by seed, arm by arm."""
    import argparse

    arms = list(arms)
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--store", required=True, help="JSON-lines file the runs are appended to")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--epsilons", type=float, nargs="+", default=epsilons)
    p.add_argument("--arms", nargs="+", default=arms, choices=arms)
    p.add_argument("--report", action="store_true", help="print the tables of the store")
    args = p.parse_args()
    store = Path(args.store)
    if args.report:
        rows = read_rows(store)
        print("\n\n".join(table(rows) for table in tables))
        return 0
    points = [(a, e, s) for e in args.epsilons for s in args.seeds for a in args.arms]
    run_missing(store, points, run_one, describe)
    return 0
