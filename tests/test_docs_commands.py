"""Every ``fl-lightning`` command in README.md and docs/*.md runs as written.

The commands are read from the fenced shell blocks (backslash continuations joined, comments
dropped) and run, in the order the docs give them, as ``python -m fl_lightning.cli`` in a
scratch folder holding the repository's ``configs/``, ``sweeps/`` and ``examples/``. Only
*tiny overrides* are added (two rounds, a one-round sweep, a short DLG), and the docs'
placeholders are filled in (``runs/.../last.ckpt`` by a checkpoint made first,
``--config ...`` by the quickstart, ``<name>`` by the quickstart sweep). A command that cannot
run on this machine is listed in ``CANNOT_RUN_HERE`` with the reason.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import SHARED_DATA, offline_mnist_args

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_LANGS = {"", "bash", "sh", "shell", "console"}

# command prefix -> why it cannot run on a CPU-only single machine
CANNOT_RUN_HERE = {
    "--trainer.accelerator gpu": "needs GPUs (and --trainer.num_nodes 2 needs a cluster)",
    "--profile paper": "downloads the papers' full datasets (internet) and wants a GPU",
}


def doc_commands() -> list[tuple[str, int, str]]:
    """``(file, line, command)`` of every ``fl-lightning`` line in a fenced shell block."""
    out = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        fence: str | None = None
        i = 0
        while i < len(lines):
            line = lines[i]
            stripped = line.strip()
            if stripped.startswith("```"):
                fence = None if fence is not None else stripped[3:].strip().lower()
                i += 1
                continue
            if fence is not None and fence in SHELL_LANGS:
                start = i
                logical = line.rstrip()
                while logical.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    logical = logical[:-1].rstrip() + " " + lines[i].strip()
                logical = re.sub(r"\s+#.*$", "", logical).strip()
                if logical.startswith("fl-lightning "):
                    out.append((path.name, start + 1, logical))
            i += 1
    return out


def _skip_reason(command: str) -> str | None:
    return next((why for key, why in CANNOT_RUN_HERE.items() if key in command), None)


def test_the_docs_commands_are_found() -> None:
    cmds = [c for _, _, c in doc_commands()]
    assert any(c.startswith("fl-lightning audit --config configs/experiment/quickstart.yaml")
               for c in cmds)  # fmt: skip
    for sub in ("fit", "test", "sweep", "report", "audit"):
        assert any(c.split()[1] == sub for c in cmds), sub
    skipped = [c for c in cmds if _skip_reason(c)]
    assert len(skipped) < len(cmds) / 4, skipped  # a skip list that grows hides breakage


class Workspace:
    """A scratch folder where the docs' relative paths resolve, and the command runner."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for name in ("configs", "examples"):
            (root / name).symlink_to(REPO / name)
        shutil.copytree(REPO / "sweeps", root / "sweeps")
        # `fl-lightning repro PAPER` reads its committed sweep store (docs/reproductions/store)
        # from the working directory and, every point being finished, only regenerates the
        # report: a copy keeps the command as written (seconds) and the checkout untouched.
        shutil.copytree(REPO / "docs" / "reproductions", root / "docs" / "reproductions")
        for spec in (root / "sweeps").glob("*.yaml"):  # tiny: one round a point
            data = yaml.safe_load(spec.read_text())
            if "trainer.max_steps" in data.get("parameters", {}):
                data["parameters"]["trainer.max_steps"] = {"value": 1}
                spec.write_text(yaml.safe_dump(data, sort_keys=False))
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
            "WANDB_MODE": "offline",
            "WANDB_SILENT": "true",
            "OMP_NUM_THREADS": "1",
            # the real MNIST test set (mnist_offline), where it is beside the checkout
            **({"FL_SHARED_DATA": str(SHARED_DATA)} if SHARED_DATA is not None else {}),
        }
        self.checkpoint: Path | None = None

    def run(self, argv: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "fl_lightning.cli", *argv],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def make_checkpoint(self) -> Path:
        before = set(self.root.glob("runs/**/last.ckpt"))
        res = self.run(["fit", "--config", "configs/experiment/quickstart.yaml",
                        "--trainer.max_steps", "2"])  # fmt: skip
        assert res.returncode == 0, res.stderr[-2000:]
        new = sorted(set(self.root.glob("runs/**/last.ckpt")) - before, key=os.path.getmtime)
        assert new, "the quickstart wrote no checkpoint"
        return new[-1]

    def make_wandb_export(self, store: Path) -> None:
        """A W&B project table exported as CSV (W&B's own run columns, the config and the
        summary metrics), from the sweep store's finished rows of one setting (its first σ, both
        seeds): the quickstart sweep's three σ would be three settings in one cell of a paper
        table, which the report refuses, as documented."""
        rows = [json.loads(line) for line in (store / "results.jsonl").read_text().splitlines()]
        rows = [r for r in rows if r.get("status") == "finished"]
        sigma = "strategy.init_args.noise_multiplier"
        rows = [r for r in rows if r["params"].get(sigma) == rows[0]["params"].get(sigma)]
        keys = sorted({k for r in rows for k in {**r["params"], **r["metrics"]}})
        with (self.root / "wandb_export.csv").open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["Name", "State", "Runtime", "_step", *keys])
            for r in rows:
                values = {**r["params"], **r["metrics"]}
                runtime = round(r.get("wall_time_s") or 0)
                w.writerow([r["id"], "finished", runtime, 9, *[values.get(k, "") for k in keys]])

    def sweep_store(self, name: str) -> Path:
        """``sweep_results/<name>``, made by running ``sweeps/<name>.yaml`` first if absent
        (the README's quickstart sweep; the docs' demo sweep of the paper report)."""
        store = self.root / "sweep_results" / name
        if "mnist_offline" in name:
            offline_mnist_args()  # skips, saying why, without the real MNIST test set
        if not (store / "results.jsonl").exists():
            res = self.run(["sweep", f"sweeps/{name}.yaml", "--parallel", "2"])
            assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        return store

    def prepare(self, command: str) -> list[str] | None:
        """The argv of a docs command, placeholders filled in and tiny overrides added."""
        argv = command.split()[1:]
        sub = argv[0]
        text = " ".join(argv)
        if "runs/" in text and "ckpt" in text:
            self.checkpoint = self.checkpoint or self.make_checkpoint()
            argv = [str(self.checkpoint) if a.endswith("last.ckpt") else a for a in argv]
        argv = [a.replace("<name>", "quickstart_eps") for a in argv]
        argv = [
            "configs/experiment/quickstart.yaml" if a == "..." and argv[i - 1] == "--config"
            else a
            for i, a in enumerate(argv)
        ]  # fmt: skip
        if sub in ("fit", "validate", "test"):
            resume = "--ckpt_path" in argv and sub == "fit"
            argv += ["--trainer.max_steps", "3" if resume else "2"]
        elif sub == "audit":
            argv += ["--trainer.max_steps=1", "--dlg-iterations", "3", "--dlg-examples", "2",
                     "--num-targets", "60"]  # fmt: skip
            if "--shadow-models" in argv:  # LiRA needs two
                argv[argv.index("--shadow-models") + 1] = "2"
        elif sub == "sweep" and "--count" in argv:  # a random spec: two points
            argv[argv.index("--count") + 1] = "2"
        elif sub == "report":
            if argv[1] == "runs" and not list(self.root.glob("runs/**/summary.json")):
                self.checkpoint = self.checkpoint or self.make_checkpoint()  # a fit run
            source = argv[1].removeprefix("sweep_results/")
            store = self.sweep_store(source if source != argv[1] else "quickstart_eps")
            if "wandb_export.csv" in argv:
                self.make_wandb_export(store)
        return argv


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("docs"))


RUNNABLE = [c for c in doc_commands() if not _skip_reason(c[2])]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "line", "command"), RUNNABLE, ids=[f"{n}:{ln}" for n, ln, _ in RUNNABLE]
)
def test_docs_command_runs_as_written(workspace: Workspace, name, line, command) -> None:
    """One command (xdist may spread them over workers: each prepares what it needs)."""
    argv = workspace.prepare(command)
    res = workspace.run(argv)
    tail = (res.stdout[-800:] + "\n" + res.stderr[-1500:]).strip()
    assert res.returncode == 0, f"{name}:{line}: {command}\n  ran: {' '.join(argv)}\n{tail}"
