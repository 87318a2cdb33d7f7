"""Paper-scale reproduction cells for a GPU session (issue 37, section 1): the queue, its CPU
estimate and its runner.

A *cell* is one paper's table with the arms of one headline claim, at the paper profile of
``fl-lightning repro P --profile paper`` (the paper's rounds, clients, cohort, local steps and
model on the offline data, the real MNIST test set: configs/repro/<P>/paper.yaml), with the
profile's seeds. The queue lists one cell per paper first, then the next ones; within a pass
the cells run cheapest first, so that a short device session finishes the most cells.

``run`` works the queue down against a time budget (``--budget-s``): a cell whose estimate
does not fit in what is left is skipped (the next, cheaper one may fit), a cell that runs past
the budget is stopped with SIGTERM (``repro`` then keeps the finished runs and writes its
documents), and each finished run is a row of ``docs/reproductions/store/<P>-paper`` (or
``--store-root``), which ``fl-lightning repro P --profile paper --report-only`` reads. Each
cell's measured wall time goes to ``OUT/queue.jsonl``.

``estimate`` times every cell's first arm on this CPU at 1 and 2 rounds (one seed, one torch
thread, the children's CPU time, so the machine's load hardly matters) and derives each cell's
GPU time as

    runs × (start-up + paper rounds × CPU seconds a round ÷ S)

with S the GPU ÷ CPU clients/s of the *sequential* executor on record for MnistCNN, 6 local
steps of batch 10 (benchmarks/results/cohort_speed.md: GPU run V on one NVIDIA H200, CPU runs
G and AD on the 2-core CPU, 1 thread): 94.3 ÷ 12.7 = 7.4 without DP-SGD, 41.4 ÷ 6.9 = 6.0 with
it. Assumptions, stated with the estimate: a cell's work speeds up on the GPU as that
benchmark's did (the small models here are launch-bound on the GPU, so larger batches than 10
make the estimate pessimistic); the start-up (imports, data, model) costs the same there; runs
stopped early by a privacy budget are counted at full length. No GPU time is measured here.

``--toy`` (the CPU dry run of ``benchmarks/gpu_paper_scale.sh``, in
tests/test_gpu_paper_scale.py): the first cell runs for real at one seed, one round and one
local step into a store under OUT, every other cell is resolved by ``repro --dry-run``
(definitions, arms, tables, config files), and the first cell's documents are rebuilt by
``--report-only`` from that store.

    PYTHONPATH=. python benchmarks/gpu_paper_scale.py plan
    PYTHONPATH=. python benchmarks/gpu_paper_scale.py estimate --out benchmarks/results
    PYTHONPATH=. python benchmarks/gpu_paper_scale.py run --budget-s 480 --out OUT
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
ESTIMATES = REPO / "benchmarks" / "results" / "gpu_paper_scale_estimates.json"
#: GPU ÷ CPU clients/s of the sequential executor on record (see the module docstring).
SPEEDUP = {"dp_sgd": 41.4 / 6.9, "other": 94.3 / 12.7}
#: Seconds left for the documents and the last log lines when the budget stops a cell.
GRACE_S = 20


@dataclass(frozen=True)
class Cell:
    """One paper's table at the arms of one claim; ``rounds``: the paper profile's rounds;
    ``tuned``: the tuning points ``repro`` runs first for these arms (one seed each)."""

    paper: str
    table: str
    arms: tuple[str, ...]
    claim: str
    rounds: int
    dp_sgd: bool = False
    tuned: int = 0
    seeds: int = 3
    passes: int = 1  # 1: the first pass (one cell per paper), 2: the next cells
    #: overrides that keep a run cut to fewer rounds (estimate, toy) at the paper's horizon
    horizon: tuple[str, ...] = ()
    why: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        return f"{self.paper}/{self.table}/{'+'.join(self.arms)}"

    @property
    def runs(self) -> int:
        return len(self.arms) * self.seeds + self.tuned


QUEUE: tuple[Cell, ...] = (
    Cell(
        "000",
        "VI",
        ("asgp_e01", "fedavg_e01"),
        "Table VI, MNIST, epsilon = 0.1: DP-FedASGP beats DP-FedAvg by the paper's margin",
        rounds=200,
        why="the scaled private curves still climb at round 20 of the paper's 200",
    ),
    Cell(
        "002",
        "5.3",
        ("dpfl_agn", "dpsgd"),
        "§5.3: DPFL-AGN beats non-adaptive constant-noise DP-SGD",
        rounds=1000,
        dp_sgd=True,
        why="ANR fires once the loss plateaus, which 80 scaled DP steps never reach",
    ),
    Cell(
        "003",
        "2 (C=30)",
        ("spm", "nodp"),
        "Table 2: SPM is within about 1 pt of NoDP at eps = 0.3 (30 clients), as published "
        "(on the model)",
        rounds=50,
        why="the paper's MLP, 3 local epochs and 50 rounds",
    ),
    Cell(
        "004",
        "2",
        ("adp_rising_e5", "even_rounds_e5"),
        "Table 2, eps = 5: ADP-FL beats the even-budget baseline",
        rounds=100,
        horizon=("strategy.init_args.rounds=100",),  # ADP-FL's budget schedule
        why="the paper's LSTM instead of the scaled MLP",
    ),
    Cell(
        "001",
        "II",
        ("gcfl", "fedavg"),
        "Table II (MNIST, eps = 2): GCFL beats DP-FedAvg, DP-FedProx, DP-Scaffold and DP-FedExP "
        "by the paper's margins",
        rounds=60,
        dp_sgd=True,
        tuned=6,
        why="~60,000 DP-SGD steps a client where the scaled profile takes 315",
    ),
    Cell(
        "000",
        "IV",
        ("asgp_e01", "fedavg_e01", "cpsgd_e01", "snlc_e01", "fedsmp_e01"),
        "Table IV, MNIST CNN, epsilon = 0.1: DP-FedASGP is the most accurate of the five methods",
        rounds=200,
        passes=2,
    ),
    Cell(
        "002",
        "5.3",
        ("dpfl_agn", "agn", "anr"),
        "§5.3: DPFL-AGN (AGN + ANR) is more accurate than AGN alone and ANR alone",
        1000,
        True,
        passes=2,
    ),
    Cell(
        "003",
        "2 (C=30, update)",
        ("spm_update", "nodp"),
        "Table 2: SPM is within about 1 pt of NoDP at eps = 0.3 (30 clients), SPM on the update",
        rounds=50,
        passes=2,
    ),
    Cell(
        "004",
        "2",
        ("adp_rising_e10", "even_rounds_e10"),
        "Table 2, eps = 10: ADP-FL beats the even-budget baseline",
        rounds=100,
        horizon=("strategy.init_args.rounds=100",),
        passes=2,
    ),
)


def load_estimates(path: Path = ESTIMATES) -> dict[str, dict]:
    """Each cell's latest estimate over the ``estimate`` records (empty when none)."""
    if not path.exists():
        return {}
    found = {}
    for record in json.loads(path.read_text()):
        found.update({c["key"]: c for c in record["cells"] if "gpu_s_estimate" in c})
    return found


def ordered(queue: tuple[Cell, ...], estimates: dict[str, dict]) -> list[Cell]:
    """Pass by pass; within a pass the cheapest estimate first (unknown estimates last, in
    the queue's order)."""
    inf = float("inf")
    return sorted(
        queue,
        key=lambda c: (c.passes, estimates.get(c.key, {}).get("gpu_s_estimate", inf)),
    )


def repro_command(cell: Cell, *, seeds: int, out: Path, store: Path, extra: list[str]) -> list:
    cmd = [sys.executable, "-m", "fl_lightning.reports.repro", cell.paper, "--profile", "paper"]
    cmd += ["--table", cell.table, "--seeds", str(seeds), "--data-root", "shared"]
    cmd += ["--store", str(store), "--out", str(out)]
    for arm in cell.arms:
        cmd += ["--arm", arm]
    for item in extra:
        cmd += ["--set", item]
    return cmd


def _log(out: Path, row: dict) -> None:
    with open(out / "queue.jsonl", "a") as fh:
        fh.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)


def _run_bounded(cmd: list[str], limit_s: float, log: Path) -> tuple[int, float]:
    """Runs ``cmd`` (output to ``log``); SIGTERM once ``limit_s`` has passed (``repro`` keeps
    what finished and writes its documents), SIGKILL ``GRACE_S`` later."""
    start = time.monotonic()
    with open(log, "a") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            proc.wait(timeout=max(1.0, limit_s))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return proc.returncode, time.monotonic() - start


def run(args: argparse.Namespace) -> int:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    estimates = load_estimates(Path(args.estimates))
    queue = ordered(QUEUE, estimates)
    start = time.monotonic()
    toy = ["trainer.max_steps=1", "client.local_steps=1"] if args.toy else []
    store_root = out / "toy-store" if args.toy else Path(args.store_root)
    for i, cell in enumerate(queue):
        left = args.budget_s - (time.monotonic() - start)
        est = estimates.get(cell.key, {}).get("gpu_s_estimate")
        row = {"cell": cell.key, "claim": cell.claim, "estimate_s": est, "left_s": round(left)}
        dry = args.toy and i > 0
        if not dry and left < GRACE_S + 10:
            _log(out, {**row, "status": "skipped: budget spent"})
            continue
        if not dry and not args.toy and est is not None and est > left - GRACE_S:
            _log(out, {**row, "status": "skipped: estimate exceeds what is left"})
            continue
        cmd = repro_command(
            cell,
            seeds=1 if args.toy else cell.seeds,
            out=out / "reports",
            store=store_root / f"{cell.paper}-paper",
            extra=[*toy, *cell.horizon] if args.toy else [],
        )
        if dry:
            cmd.append("--dry-run")
        rc, wall = _run_bounded(cmd, left - GRACE_S if not dry else 600, out / "repro.log")
        status = "resolved (dry run)" if dry else ("finished" if rc == 0 else f"rc {rc}")
        _log(out, {**row, "status": status, "wall_s": round(wall, 1)})
        if rc != 0 and args.toy:
            return rc
    if args.toy:  # the store's rows read back by --report-only, as after a GPU session
        first = queue[0]
        cmd = repro_command(
            first,
            seeds=1,
            out=out / "reports",
            store=store_root / f"{first.paper}-paper",
            extra=[*toy, *first.horizon],
        )
        rc, _ = _run_bounded([*cmd, "--report-only"], 600, out / "repro.log")
        _log(out, {"cell": first.key, "status": f"report-only rc {rc}"})
        return rc
    return 0


def _fit_command(cell: Cell, rounds: int, store: Path) -> list[str]:
    """The ``fl-lightning fit`` command of seed 0 of the cell's first arm at ``rounds`` rounds,
    as ``repro`` builds it (its tuning points left out)."""
    from fl_lightning.reports.repro.definition import load_definition
    from fl_lightning.reports.repro.points import ReproRunner, find_shared_data, plan
    from fl_lightning.sweeps.store import ResultStore

    defn = load_definition(cell.paper, "paper")
    tables = [t for t in defn.tables if cell.table in (t.label, t.table)][:1]
    extra: dict = {"trainer.max_steps": rounds}
    for item in cell.horizon:
        key, value = item.split("=", 1)
        extra[key] = yaml.safe_load(value)
    points = plan(defn, seeds=1, extra=extra, tables=tables)
    points = [rp for rp in points if rp.arm.name == cell.arms[0]]
    if not points:
        raise RuntimeError(f"{cell.key}: arm {cell.arms[0]} not in table {cell.table}")
    shared = find_shared_data()
    runner = ReproRunner(
        points, ResultStore(store), name="estimate", data_root=str(shared) if shared else None
    )
    return runner.command_for(points[0].point, store / f"run-{cell.paper}-{rounds}")


def _cpu_run(cell: Cell, rounds: int, store: Path) -> float:
    """Children's CPU seconds of one seed of the cell's first arm at ``rounds`` rounds."""
    cmd = _fit_command(cell, rounds, store)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{cell.key} at {rounds} rounds: {proc.stderr[-1500:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def estimate(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    from _record import record_run

    load_before = os.getloadavg()
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, cell in enumerate(QUEUE):
            if args.cells and cell.key not in args.cells:
                continue
            try:
                one, two = (_cpu_run(cell, r, Path(tmp) / str(i)) for r in (1, 2))
            except RuntimeError:  # recorded, and the other cells still estimated
                error = traceback.format_exc().splitlines()[-1][-300:]
                cells.append(
                    {"key": cell.key, "claim": cell.claim, "runs": cell.runs, "error": error}
                )
                continue
            per_round = max(two - one, 0.0)
            startup = max(one - per_round, 0.0)
            speedup = SPEEDUP["dp_sgd" if cell.dp_sgd else "other"]
            per_run = startup + cell.rounds * per_round / speedup
            cells.append(
                {
                    "key": cell.key,
                    "claim": cell.claim,
                    "runs": cell.runs,
                    "cpu_s_1_round": round(one, 1),
                    "cpu_s_2_rounds": round(two, 1),
                    "cpu_s_per_round": round(per_round, 2),
                    "startup_cpu_s": round(startup, 1),
                    "paper_rounds": cell.rounds,
                    "gpu_over_cpu": round(speedup, 2),
                    "gpu_s_estimate": round(cell.runs * per_run),
                }
            )
    lines = [
        "",
        "Estimate only (no GPU measured): runs × (start-up + paper rounds × CPU s a round ÷ "
        "S), S = GPU ÷ CPU clients/s of the sequential executor on record (H200 run V vs CPU "
        "runs G / AD: 7.4 non-private, 6.0 DP-SGD); CPU seconds of one seed of the cell's "
        "first arm at 1 and 2 rounds, 1 thread.",
        "",
        "| cell | claim | runs | CPU s, 1 / 2 rounds | CPU s a round | paper rounds "
        "| S | GPU s (estimate) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        if "error" in c:
            lines.append(f"| {c['key']} | {c['claim']} | {c['runs']} | failed: {c['error']} |")
            continue
        lines.append(
            f"| {c['key']} | {c['claim']} | {c['runs']} | {c['cpu_s_1_round']} / "
            f"{c['cpu_s_2_rounds']} | {c['cpu_s_per_round']} | {c['paper_rounds']} | "
            f"{c['gpu_over_cpu']} | {c['gpu_s_estimate']} |"
        )
    record_run(
        args.out,
        "gpu_paper_scale_estimates",
        title="paper-scale cells: CPU run at 1 and 2 rounds → GPU time estimate",
        intro="# Paper-scale cells: GPU time estimates from CPU runs (issue 37)\n\n"
        "`benchmarks/gpu_paper_scale.py estimate`; each run appended as measured.\n",
        lines=lines,
        load_before=load_before,
        command="python benchmarks/gpu_paper_scale.py " + " ".join(sys.argv[1:]),
        threads=1,
        cells=cells,
    )


def plan(args: argparse.Namespace) -> None:
    estimates = load_estimates(Path(args.estimates))
    total = 0.0
    for cell in ordered(QUEUE, estimates):
        est = estimates.get(cell.key, {}).get("gpu_s_estimate")
        total += est or 0.0
        print(
            f"pass {cell.passes}  {cell.key:45s} runs {cell.runs:2d}  "
            f"estimate {'?' if est is None else f'{est:.0f} s'} (cumulative {total:.0f} s)  "
            f"{cell.claim}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="work the queue down within a time budget")
    r.add_argument("--out", required=True, help="folder for the log, queue.jsonl, documents")
    r.add_argument("--budget-s", type=float, default=480.0)
    r.add_argument("--store-root", default=str(REPO / "docs" / "reproductions" / "store"))
    r.add_argument("--toy", action="store_true", help="the CPU dry run (see the docstring)")
    e = sub.add_parser("estimate", help="CPU runs at 1 and 2 rounds → GPU time estimates")
    e.add_argument("--out", default=None, help="directory: append the record there")
    e.add_argument("--cells", nargs="*", default=None, help="only these cell keys")
    for s in (r, sub.add_parser("plan", help="print the ordered queue with estimates")):
        s.add_argument("--estimates", default=str(ESTIMATES))
    args = p.parse_args(argv)
    if args.command == "run":
        if args.budget_s <= 0:
            p.error(f"--budget-s: must be > 0, got {args.budget_s}")
        return run(args)
    if args.command == "estimate":
        if args.out is not None and not os.path.isdir(args.out):
            p.error(f"--out: {args.out} is not a directory (the run is appended there)")
        estimate(args)
        return 0
    plan(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
