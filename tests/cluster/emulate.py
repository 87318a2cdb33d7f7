"""A SLURM job and torchrun nodes on one machine, for the cluster tests (issue 51).

* :func:`directives`: a batch script's ``#SBATCH`` lines as ``{option: value}``, the way sbatch
  reads them (before the first command; ``--flag`` alone is ``""``).
* :func:`sbatch`: runs a batch script as sbatch would start it on the first node, with the
  variables sbatch sets (``SLURM_JOB_ID``, ``SLURM_NNODES``, ``SLURM_NTASKS_PER_NODE``,
  ``SLURM_JOB_NODELIST``, ``SLURM_ARRAY_TASK_ID``, ...) and ``tests/cluster/bin`` first on
  ``PATH``: its ``srun`` starts the job's tasks as local processes with the variables srun
  sets, its ``scontrol`` expands node lists and records ``requeue`` calls. The node list is
  ``127.0.0.[1-N]`` (loopback addresses: the nodes are this machine), so Lightning's own parser
  finds node 0 at 127.0.0.1, and the job id is picked so that Lightning's port rule
  (15000 + its last 4 digits) gives a free port, as on a real cluster (no MASTER_PORT).
* :func:`stop`: kills a process group (every emulated job and node has its own session).
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

BIN = Path(__file__).resolve().parent / "bin"
SLURM = REPO / "examples" / "slurm"
# Launcher variables of an enclosing run (a test launched under torchrun or SLURM) that must
# not leak into the emulated ones.
LAUNCH_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
              "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")  # fmt: skip


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without launcher or SLURM variables, the checkout on PYTHONPATH, one
    thread a process, W&B offline, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCH_ENV and not k.startswith(("SLURM_", "SLURMD_"))}  # fmt: skip
    path = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return {**env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline",
            "FL_LIGHTNING_PLOTS": "0", "PATH": path, **extra}  # fmt: skip


def free_port(low: int = 1024, high: int = 65535) -> int:
    """A port in [low, high] nobody listens on now."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randint(low, high) if low > 1024 else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port")


def free_job_id() -> str:
    """A SLURM job id whose Lightning port (15000 + last 4 digits) is free."""
    port = free_port(15000, 24999)
    return f"7{port - 15000:04d}"


def directives(script: Path) -> dict[str, str]:
    """The ``#SBATCH`` options of ``script`` (``--name=value`` or ``--name value``), read up to
    the first command as sbatch does; comments after a value are dropped."""
    options: dict[str, str] = {}
    for line in script.read_text().splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        if not stripped.startswith("#SBATCH"):
            continue
        words = shlex.split(stripped[len("#SBATCH") :], comments=True)
        i = 0
        while i < len(words):
            key, eq, value = words[i].partition("=")
            if not eq and i + 1 < len(words) and not words[i + 1].startswith("-"):
                value, i = words[i + 1], i + 1
            options[key] = value
            i += 1
    return options


def filled_in(script: Path, folder: Path) -> Path:
    """A copy of ``script`` in ``folder`` with its commented cluster lines (``##SBATCH
    --partition=...``, ``--account``, ``--constraint``) switched on, as a user fills them in:
    the emulated jobs run the example as it is used, not only as it ships."""
    text = re.sub(r"^##SBATCH", "#SBATCH", script.read_text(), flags=re.MULTILINE)
    copy = folder / script.name
    copy.write_text(text)
    copy.chmod(0o755)
    return copy


def sbatch(
    script: Path,
    *args: str,
    job_id: str,
    log: Path,
    overrides: dict[str, str] | None = None,
    array_task: int | None = None,
    restart_count: int = 0,
    env: dict[str, str] | None = None,
    cwd: Path = REPO,
) -> subprocess.Popen:
    """Starts ``script`` as the batch step of job ``job_id`` (its own session); stdout and
    stderr go to ``log`` (appended, like ``--open-mode=append``). ``overrides`` are sbatch
    options given on the command line, which win over the script's ``#SBATCH`` lines."""
    opts = {**directives(script), **(overrides or {})}
    nodes = int(opts.get("--nodes", "1"))
    per_node = int(opts.get("--ntasks-per-node", "1"))
    variables = {
        "SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id,
        "SLURM_JOB_NAME": opts.get("--job-name", Path(script).name),
        "SLURM_NNODES": str(nodes), "SLURM_JOB_NUM_NODES": str(nodes),
        "SLURM_NTASKS_PER_NODE": str(per_node),
        "SLURM_NTASKS": str(nodes * per_node), "SLURM_NPROCS": str(nodes * per_node),
        "SLURM_JOB_NODELIST": f"127.0.0.[1-{nodes}]" if nodes > 1 else "127.0.0.1",
        "SLURM_CPUS_PER_TASK": opts.get("--cpus-per-task", "1"),
        "SLURM_SUBMIT_DIR": str(cwd), "SLURM_RESTART_COUNT": str(restart_count),
        # The batch step is task 0 of node 0 (srun sets these anew for each task it starts).
        "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
        "FAKE_SLURM_LOG": str(log.with_suffix(".slurm")),
    }  # fmt: skip
    variables["SLURM_NODELIST"] = variables["SLURM_JOB_NODELIST"]
    if array_task is not None:
        variables.update(SLURM_ARRAY_JOB_ID=job_id, SLURM_ARRAY_TASK_ID=str(array_task),
                         SLURM_JOB_ID=f"{job_id}{array_task:02d}")  # fmt: skip
        variables["SLURM_JOBID"] = variables["SLURM_JOB_ID"]
    full = clean_env(**variables, **(env or {}))
    full["PATH"] = os.pathsep.join([str(BIN), full["PATH"]])
    out = open(log, "a")  # noqa: SIM115 - handed to the process
    try:
        return subprocess.Popen(["bash", str(script), *args], cwd=cwd, env=full, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    finally:
        out.close()


def descendants(pid: int) -> list[int]:
    """``pid``'s children, their children, ... (torchrun starts its workers in sessions of
    their own, so killing a node's process group would leave them running)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    children = [int(p) for p in out.split()]
    return [d for c in children for d in (c, *descendants(c))]


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> list[int]:
    """Sends ``sig`` to ``pid`` and every descendant (a crashed node); returns their pids."""
    tree = [pid, *descendants(pid)]
    for p in tree:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)
    return tree


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, which an init that does not reap leaves, is dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def stop(proc: subprocess.Popen | None) -> None:
    """Kills ``proc``, its process group (its session) and every descendant still running."""
    if proc is None:
        return
    if proc.poll() is None:
        kill_tree(proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)
