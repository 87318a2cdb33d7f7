"""Several runs in one process: ``python -m tests.server.ddp_batch SPEC.json``.

Importing torch, Lightning and fl_lightning costs a CLI process seconds of CPU, more than the
tiny runs of the DDP tests themselves; a 2-process run pays it twice. The DDP tests therefore
launch their runs in batches: one process (or one pair of ranks) runs every step of SPEC in
order, each a real ``fl_lightning.cli.main`` call (or a function on a fresh gloo group), with
its own ``MASTER_PORT``. The CLI destroys the process group after every run, so each run sets
up its own group exactly as a lone command would.

SPEC is a JSON list of steps ``{"name", "port", "cli": [args]}`` or ``{"name", "port",
"call": "module:function", "out": path}`` (the function gets the rank and the world size and
returns a JSON-able value, written by every rank to ``out.rank<R>.json``), with ``"expect"``:
the exit codes that count as success (``[0]``). Every rank prints ``@@step NAME`` to stdout
and stderr before a step and ``@@rc NAME CODE SECONDS`` after it (code 1 and a traceback where
the step raised), then goes on with the next step, so one failing step fails only its own
test; :func:`split` cuts the output back into steps. Ranks above 0 write their output to
``SPEC.rank<R>.log``.

Launch it like the CLI: as one process, with Lightning's launcher (its first DDP run
re-executes this command as rank 1, which then runs every step too; later runs find
``LOCAL_RANK`` set and launch nothing), or torchrun-style with ``RANK``/``WORLD_SIZE`` set.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback


def _rank_and_world() -> tuple[int, int]:
    rank = os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))
    return int(rank), int(os.environ.get("WORLD_SIZE", "1"))


def _call(target: str, out: str) -> int:
    import torch.distributed as dist

    rank, world = _rank_and_world()
    module, name = target.split(":")
    function = getattr(importlib.import_module(module), name)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = function(rank, world)
    finally:
        dist.destroy_process_group()
    with open(f"{out}.rank{rank}.json", "w") as f:
        json.dump(result, f)
    return 0


def _step(step: dict) -> int:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(step["port"])
    if "call" in step:
        return _call(step["call"], step["out"])
    from fl_lightning.cli import main

    return int(main(list(step["cli"])) or 0)


def run(steps: list[dict]) -> int:
    failed = 0
    for step in steps:
        for stream in (sys.stdout, sys.stderr):
            print(f"@@step {step['name']}", file=stream, flush=True)
        start = time.monotonic()
        try:
            rc = _step(step)
        except SystemExit as err:  # LightningCLI's argument errors
            rc = err.code if isinstance(err.code, int) else 1
        except Exception:
            traceback.print_exc()
            rc = 1
        failed |= rc not in step.get("expect", (0,))
        for stream in (sys.stdout, sys.stderr):
            print(f"@@rc {step['name']} {rc} {time.monotonic() - start:.1f}s", file=stream,
                  flush=True)  # fmt: skip
    return int(failed)


def split(output: str) -> dict[str, tuple[int | None, str]]:
    """``{step name: (return code or None where the step never ended, its output)}``."""
    steps: dict[str, tuple[int | None, str]] = {}
    name, lines = None, []
    for line in output.splitlines():
        if line.startswith("@@step "):
            name, lines = line.split(" ", 1)[1], []
            steps[name] = (None, "")
        elif line.startswith("@@rc ") and name is not None:
            steps[name] = (int(line.split(" ")[2]), "\n".join(lines))
            name = None
        elif name is not None:
            lines.append(line)
            steps[name] = (None, "\n".join(lines))
    return steps


def main(spec: str) -> int:
    rank, _ = _rank_and_world()
    if rank > 0:  # Lightning's launcher gives rank 1 rank 0's console: keep the two apart
        log = os.open(f"{spec}.rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
    with open(spec) as f:
        return run(json.load(f))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
