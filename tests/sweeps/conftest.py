"""A fake sweep program: a real subprocess that parses ``--key=value`` args, sleeps, logs its
call, and writes ``summary.json`` (or fails when ``--fail=True``)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import yaml

FAKE = textwrap.dedent(
    """
    import json, os, signal, sys, time
    args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
    if args.get("ignore_term") == "True":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with open(os.environ["FAKE_CALLS"], "a") as f:
        f.write(f"{os.environ['FL_SWEEP_POINT']} {os.getppid()}\\n")
    with open(os.environ["FAKE_CALLS"] + ".pids", "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(float(args.get("sleep", 0)))
    if args.get("fail") == "True":
        print("error: model.lr: boom", file=sys.stderr)
        sys.exit(2)
    run_dir = os.environ["FL_SWEEP_RUN_DIR"]
    x, seed = float(args.get("x", 0)), int(args.get("seed", 0))
    with open(os.path.join(run_dir, "metrics.csv"), "w") as f:
        f.write("step,test/accuracy,privacy/epsilon\\n")
        for r in range(3):
            f.write(f"{r},{0.5 + 0.1 * r + 0.01 * x},{(r + 1) * x}\\n")
    json.dump({"test/accuracy": 0.7 + 0.01 * x + 0.001 * seed, "privacy/epsilon": 3 * x,
               "rounds": 3}, open(os.path.join(run_dir, "summary.json"), "w"))
    """
)


@pytest.fixture
def fake_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Writes the fake program and returns a function making a spec file around it."""
    program = tmp_path / "fake_program.py"
    program.write_text(FAKE)
    calls = tmp_path / "calls.log"
    calls.touch()
    monkeypatch.setenv("FAKE_CALLS", str(calls))

    def make(parameters: dict, method: str = "grid", name: str = "fake") -> Path:
        spec = {
            "name": name,
            "method": method,
            "program": str(program),
            "command": ["${env}", "${interpreter}", "${program}", "${args}"],
            "parameters": parameters,
        }
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(spec))
        return path

    make.calls = calls  # type: ignore[attr-defined]
    make.python = sys.executable  # type: ignore[attr-defined]
    return make
