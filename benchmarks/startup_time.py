"""Start-up time of ``fl-lightning`` against a bare ``python -c "import torch"`` (issue 18).

Every command runs in a fresh process (the OS file cache is warm after the first repeat), with
``OMP_NUM_THREADS=1`` and W&B disabled, interleaved (the order rotates every repeat) and
repeated; medians are reported:

* ``torch``: ``python -c "import torch"``, the bare PyTorch reference;
* ``torch._dynamo``: ``python -c "import torch._dynamo"``, which Lightning imports itself
  (``lightning.fabric.wrappers``: ``from torch._dynamo import OptimizedModule``);
* ``torchmetrics``: ``python -c "import torchmetrics"``, which Lightning imports at start-up
  (``lightning.fabric.utilities.imports`` asks ``compare_version("torchmetrics", ...)``,
  which imports the package) and which imports all its metric domains;
* ``lightning``: ``python -c "import lightning.pytorch"``, what any Lightning program imports
  before its own code (third-party floor);
* ``fit --help``: ``python -m fl_lightning.cli fit --help``, the screenful of options (issue
  48; also reported as a ratio to ``import lightning.pytorch``);
* ``bad value``: ``fit --config quickstart.yaml --model.sampling bogus``, a one-line refusal
  (exit 2) of a bad value (issue 48; also as a ratio to ``import lightning.pytorch``);
* ``cli import``: ``python -c "import fl_lightning.cli"``, what the console script imports
  before it knows the subcommand (everything heavy is imported by the subcommand);
* ``tiny fit``: ``python -m fl_lightning.cli fit`` of one DP-FedAvg round on digits (3 of 10
  clients, MLP, no logger, no evaluation): what a test, a sweep point or a user pays at least.

Then the same tiny fit and ``import lightning.pytorch`` under ``python -X importtime`` (also
once per repeat): the summed self time of every import, the cumulative time of the pieces that
dominate it and the import it happened during (the nearest enclosing row of the import tree),
and the import time the run adds beyond ``import lightning.pytorch``. ``-X importtime`` has no
row for a module imported with ``importlib.import_module`` (``torchmetrics``): its time is the
sum of its submodules' rows, and what its ``__init__`` imports directly (``scipy.signal``)
shows the enclosing ``lightning.fabric.utilities.imports``. ``-X importtime`` slows imports down, so
its numbers are larger than the wall-clock ones; compare them with each other.

    python benchmarks/startup_time.py [--repeats 3] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _record import record_run

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"
TINY_FIT = [
    "-m", "fl_lightning.cli", "fit",
    "--config", str(CONFIGS / "experiment" / "quickstart.yaml"),
    "--data", str(CONFIGS / "data" / "digits.yaml"),
    "--client", str(CONFIGS / "client" / "digits_mlp.yaml"),
    "--model.clients_per_round", "3", "--data.num_clients", "10", "--model.eval_every", "0",
    "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
    "--trainer.max_steps", "1", "--trainer.accelerator", "cpu", "--trainer.devices", "1",
]  # fmt: skip
COMMANDS: dict[str, list[str]] = {
    "torch": ["-c", "import torch"],
    "torch._dynamo": ["-c", "import torch._dynamo"],
    "torchmetrics": ["-c", "import torchmetrics"],
    "lightning": ["-c", "import lightning.pytorch"],
    "fit --help": ["-m", "fl_lightning.cli", "fit", "--help"],
    "bad value": [
        "-m",
        "fl_lightning.cli",
        "fit",
        "--config",
        str(CONFIGS / "experiment" / "quickstart.yaml"),
        "--model.sampling",
        "bogus",
    ],
    "cli import": ["-c", "import fl_lightning.cli"],
    "tiny fit": TINY_FIT,
}
# Commands that succeed by failing: the one-line refusal of a bad value exits 2.
EXPECTED_RC = {"bad value": 2}
# Reported as a ratio to `import lightning.pytorch` too (issue 48: each <= 1.3x).
VS_LIGHTNING = ("fit --help", "bad value")
# Pieces of the import tree reported by their cumulative time (nested: torchvision's time is
# inside torchmetrics', torch._dynamo's inside torchvision's when torchvision imports it).
PIECES = ("torch", "lightning", "torchmetrics", "torchvision", "torch._dynamo", "scipy.signal",
          "matplotlib.pyplot", "wandb", "jsonargparse", "opacus", "dp_accounting",
          "sklearn.datasets")  # fmt: skip
_ROW = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| ( *)(\S+)")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
            "WANDB_MODE": "disabled"}  # fmt: skip


def _argv(name: str, out_dir: Path) -> list[str]:
    argv = [sys.executable, *COMMANDS[name]]
    if name == "tiny fit":
        argv += ["--trainer.default_root_dir", str(out_dir)]
    return argv


CPU_S: dict[str, list[float]] = {}  # CPU seconds (user + system) of every timed process


def timed(name: str, scratch: Path) -> float:
    """Wall-clock seconds of one fresh process running ``name`` (its CPU seconds go to
    ``CPU_S``: on a machine others load, CPU time moves far less than wall time)."""
    out_dir = Path(tempfile.mkdtemp(dir=scratch))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    res = subprocess.run(_argv(name, out_dir), cwd=scratch, env=_env(), capture_output=True,
                         text=True)  # fmt: skip
    seconds = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    CPU_S.setdefault(name, []).append(cpu)
    if res.returncode != EXPECTED_RC.get(name, 0):
        raise RuntimeError(f"{name}: exit {res.returncode}\n{res.stderr[-2000:]}")
    if name == "bad value" and len(res.stderr.strip().splitlines()) != 1:
        raise RuntimeError(f"{name}: not one line:\n{res.stderr[-2000:]}")
    return seconds


def import_rows(name: str, scratch: Path) -> list[tuple[int, int, int, str]]:
    """``(self µs, cumulative µs, depth, module)`` of every import of ``name``, in the order
    ``-X importtime`` prints them (children before their parent)."""
    out_dir = Path(tempfile.mkdtemp(dir=scratch))
    argv = _argv(name, out_dir)
    res = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], cwd=scratch, env=_env(),
                         capture_output=True, text=True)  # fmt: skip
    if res.returncode != 0:
        raise RuntimeError(f"{name} (-X importtime): exit {res.returncode}\n{res.stderr[-2000:]}")
    rows = []
    for line in res.stderr.splitlines():
        m = _ROW.match(line)
        if m:
            rows.append((int(m[1]), int(m[2]), len(m[3]) // 2, m[4]))
    return rows


def importer_of(rows: list[tuple[int, int, int, str]], i: int) -> str:
    """The first module outside row ``i``'s own package whose import triggered it (``-``: the
    script itself, e.g. a lazy import inside a function)."""
    name, depth = rows[i][3], rows[i][2]
    for j in range(i + 1, len(rows)):
        if rows[j][2] < depth:
            depth = rows[j][2]
            if rows[j][3] != name and not rows[j][3].startswith(name + "."):
                return rows[j][3]
    return "-"


def _inside(name: str, piece: str) -> bool:
    return name == piece or name.startswith(piece + ".")


def piece_time(rows: list[tuple[int, int, int, str]], piece: str) -> dict | None:
    """Cumulative seconds of ``piece`` and the import it happened during. Without a row of its
    own (imported by ``importlib.import_module``), the sum of its outermost submodule rows."""
    for i, (_, cum, _, name) in enumerate(rows):
        if name == piece:
            return {"s": cum / 1e6, "during": importer_of(rows, i)}
    outermost = []
    for i, (_, _, depth, name) in enumerate(rows):
        if not _inside(name, piece):
            continue
        enclosing = next((r for r in rows[i + 1 :] if r[2] < depth), None)
        if enclosing is None or not _inside(enclosing[3], piece):
            outermost.append(i)
    if not outermost:
        return None
    return {"s": sum(rows[i][1] for i in outermost) / 1e6,
            "during": importer_of(rows, outermost[0])}  # fmt: skip


def breakdown(rows: list[tuple[int, int, int, str]], floor: set[str]) -> dict:
    """Seconds: total self time, each piece's cumulative time and the import it happened
    during, the own package's self time and the self time of the modules not imported by
    ``import lightning.pytorch``."""
    out: dict = {"total": sum(r[0] for r in rows) / 1e6, "pieces": {}}
    for piece in PIECES:
        found = piece_time(rows, piece)
        if found is not None:
            out["pieces"][piece] = found
    out["fl_lightning"] = sum(r[0] for r in rows if r[3].split(".")[0] == "fl_lightning") / 1e6
    out["beyond_lightning"] = sum(r[0] for r in rows if r[3] not in floor) / 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="directory for startup_time.{md,json}")
    args = parser.parse_args()
    names = list(COMMANDS)
    load_before = os.getloadavg()
    wall: dict[str, list[float]] = {n: [] for n in names}
    imports: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="fl_startup_") as tmp:
        scratch = Path(tmp)
        for r in range(args.repeats):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                wall[name].append(timed(name, scratch))
            floor = {row[3] for row in import_rows("lightning", scratch)}
            imports.append(breakdown(import_rows("tiny fit", scratch), floor))
            print(json.dumps({n: round(v[-1], 3) for n, v in wall.items()}), flush=True)
    med = {n: statistics.median(v) for n, v in wall.items()}
    ref = med["torch"]

    def median_of(get) -> float:  # noqa: ANN001
        return statistics.median(get(b) for b in imports)

    pieces = [p for p in PIECES if all(p in b["pieces"] for b in imports)]
    lines = [
        f"| command (fresh process) | median wall s | ÷ `import torch` | all {args.repeats} runs |",
        "|---|---|---|---|",
    ]
    for n in names:
        runs = ", ".join(f"{v:.2f}" for v in wall[n])
        lines.append(f"| {n} | {med[n]:.2f} | {med[n] / ref:.2f}× | {runs} |")
    cpu = {n: statistics.median(v) for n, v in CPU_S.items()}
    lines += [
        "",
        "| command | ÷ `import lightning.pytorch` (median wall) | median CPU s | ÷ (median CPU) |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {n} | {med[n] / med['lightning']:.2f}× | {cpu[n]:.2f} | "
        f"{cpu[n] / cpu['lightning']:.2f}× |"
        for n in ("lightning", *VS_LIGHTNING)
    ]
    lines += [
        "",
        "`-X importtime` of the tiny fit (median of the repeats; cumulative seconds, nested):",
        "",
        "| import | seconds | imported during |",
        "|---|---|---|",
        f"| all imports (sum of self times) | {median_of(lambda b: b['total']):.2f} | |",
    ]
    for p in pieces:
        by = imports[0]["pieces"][p]["during"]
        by = "the command (a lazy import)" if by == "-" else f"`{by}`"
        lines.append(f"| `{p}` | {median_of(lambda b, p=p: b['pieces'][p]['s']):.2f} | {by} |")
    lines += [
        f"| modules not imported by `import lightning.pytorch` (self) "
        f"| {median_of(lambda b: b['beyond_lightning']):.2f} | |",
        f"| of which `fl_lightning.*` (self) | {median_of(lambda b: b['fl_lightning']):.2f} | |",
    ]
    python = platform.python_version()
    record_run(
        args.out,
        "startup_time",
        title=f"{args.repeats} interleaved repeats (median), Python {python}",
        intro="# Start-up time (issue 18)\n\n"
        "`benchmarks/startup_time.py`: fresh processes, interleaved, median; the bare\n"
        'reference is `python -c "import torch"` in the same run.\n',
        lines=["", *lines],
        load_before=load_before,
        command="python benchmarks/startup_time.py " + " ".join(sys.argv[1:]),
        benchmark="benchmarks/startup_time.py",
        python=python,
        repeats=args.repeats,
        wall_s=wall,
        median_wall_s=med,
        vs_lightning={n: med[n] / med["lightning"] for n in VS_LIGHTNING},
        cpu_s=CPU_S,
        vs_lightning_cpu={n: cpu[n] / cpu["lightning"] for n in VS_LIGHTNING},
        imports=imports,
    )


if __name__ == "__main__":
    main()
