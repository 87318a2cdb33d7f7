"""Issue 51, item 2: the shipped batch script (examples/slurm/fit.sbatch) as a SLURM job on one
machine, without a cluster.

``tests/cluster/emulate.py`` starts the script as sbatch would (the variables sbatch sets, the
script's ``#SBATCH`` lines with the test's overrides: 2 nodes x 1 task, CPU), and its ``srun``
stand-in starts the tasks as local processes with the variables srun sets; Lightning's
``SLURMEnvironment`` reads the ranks, the node list (``127.0.0.[1-2]``) and the port (from the
job id) from them itself. Checked:

* the directives agree with what the CLI receives (``sbatch --test-only``-style, no job);
* the job ends with the global weights (within the DDP tolerance, 1e-5), ε and test metrics
  of the same run in one plain process;
* SIGUSR1 (what ``#SBATCH --signal=SIGUSR1@90`` sends every task) makes the job save
  ``hpc_ckpt_1.ckpt`` after the current round, call ``scontrol requeue <job id>`` (the
  stand-in records it) and stop with one ``requeued:`` line; the requeued job (the same script,
  the same SLURM_JOB_ID, ``SLURM_RESTART_COUNT=1``) resumes from it in its own directory and
  ends with the weights and ε of the uninterrupted job.

What this does not prove: a real network between nodes, real ``srun``/``slurmstepd`` signal
delivery and a real requeue (docs/distributed.md, "Running on a cluster").
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.cluster.emulate import SLURM, directives, filled_in, free_job_id, sbatch, stop
from tests.conftest import QUICKSTART, REPO
from tests.reliability.runs import EVERY_ROUND, accountant_state, assert_same_result, load
from tests.server.conftest import COMMON
from tests.server.test_ddp_equivalence import assert_same_run

FIT = SLURM / "fit.sbatch"
ROUNDS = 10
# 2 nodes x 1 task on CPU; one CPU a task (the script sets OMP_NUM_THREADS from it).
OVERRIDES = {"--nodes": "2", "--ntasks-per-node": "1", "--cpus-per-task": "1"}
ARGS = [*COMMON, "--trainer.max_steps", str(ROUNDS), f"--trainer.callbacks={EVERY_ROUND}"]


def srun_command(script: Path) -> list[str]:
    """The words of the script's ``srun`` line (continuation lines joined)."""
    text = script.read_text().replace("\\\n", " ")
    (line,) = [ln for ln in text.splitlines() if ln.strip().startswith("srun ")]
    return shlex.split(line)


def expand(word: str, variables: dict[str, str]) -> str:
    """``${VAR}``, ``${VAR:-default}`` and ``${VAR:?message}`` as bash expands them, from
    ``variables`` (a missing ``:?`` variable fails, as bash would)."""

    def one(m: re.Match) -> str:
        value = variables.get(m.group(1))
        assert value or m.group(2) != ":?", f"bash would stop: {m.group(3)}"
        return value or (m.group(3) if m.group(2) == ":-" else "")

    return re.sub(r"\$\{(\w+)(?:(:[-?])([^}]*))?\}", one, word)


def flag(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


def test_sbatch_directives_agree_with_the_fit_flags():
    """``sbatch --test-only`` for the script: one task per GPU, the tasks per node and nodes
    that the CLI gets, the requeue signal and ``--requeue``; the fit command parses (the
    CLI's parse-only check, the sweep runner's) with the values a job would give it."""
    from fl_lightning.runs.arguments import argument_problem

    d = directives(FIT)
    assert d["--signal"] == "SIGUSR1@90" and "--requeue" in d
    gpus = int(d["--gres"].removeprefix("gpu:"))
    assert gpus == int(d["--ntasks-per-node"]) == 4  # one rank per GPU
    words = srun_command(FIT)
    assert words[1:4] == ["python", "-m", "fl_lightning.cli"] and words[4] == "fit"
    job = {"SLURM_NTASKS_PER_NODE": d["--ntasks-per-node"], "SLURM_NNODES": d["--nodes"],
           "SLURM_JOB_ID": "1234", "CONFIG": "", "ACCEL": ""}  # fmt: skip
    cli = [expand(w, job) for w in words[4:] if w != '"$@"' and w != "$@"]
    assert flag(cli, "--trainer.devices") == d["--ntasks-per-node"]
    assert flag(cli, "--trainer.num_nodes") == d["--nodes"]
    assert flag(cli, "--trainer.strategy") == "ddp"
    assert flag(cli, "--trainer.accelerator") == "gpu"
    assert flag(cli, "--trainer.default_root_dir") == "runs/slurm-1234"
    assert (REPO / flag(cli, "--config")).is_file()
    assert argument_problem(cli) is None


# the environment step as a user fills it in: modules to load (tests/cluster/bin/module), the venv
JOB_ENV = {"ACCEL": "cpu", "VENV": sys.prefix, "CONFIG": str(QUICKSTART), "MODULES": "cuda/12.1"}


def _job(tmp: Path, name: str, **kw) -> tuple:
    root = tmp / name
    root.mkdir()
    env = {**JOB_ENV, "FAKE_SRUN_PIDS": str(root / "tasks.pids")}
    # the example with its partition/account/GPU lines filled in, as a user submits it
    script = filled_in(FIT, root)
    proc = sbatch(script, *ARGS, log=root / "job.log", overrides=OVERRIDES, env=env, cwd=root, **kw)
    return proc, root


def _wait(proc, timeout: float = 300) -> int:
    return proc.wait(timeout=timeout)


@pytest.mark.ddp
@pytest.mark.fault
@pytest.mark.heavy
def test_a_slurm_job_equals_one_process_and_a_requeued_one_the_uninterrupted_job(
    tmp_path, monkeypatch
):
    from fl_lightning.cli import main

    uninterrupted = preempted = requeued = None
    try:
        # The uninterrupted job and the one to pre-empt run side by side.
        uninterrupted, u_root = _job(tmp_path, "uninterrupted", job_id=free_job_id())
        job = free_job_id()
        preempted, p_root = _job(tmp_path, "preempted", job_id=job)
        run = p_root / "runs" / f"slurm-{job}"
        deadline = time.monotonic() + 240
        while not (run / "checkpoints" / "last.ckpt").exists() and time.monotonic() < deadline:
            assert preempted.poll() is None, (p_root / "job.log").read_text()[-3000:]
            time.sleep(0.02)
        # Every task gets the signal (slurmstepd delivers --signal to each of them).
        for line in (p_root / "tasks.pids").read_text().splitlines():
            os.kill(int(line.split()[1]), signal.SIGUSR1)
        assert _wait(preempted) == 0, (p_root / "job.log").read_text()[-3000:]
        log = (p_root / "job.log").read_text()
        lines = [ln for ln in log.splitlines() if ln.startswith("requeued:")]
        assert len(lines) == 1, log[-3000:]
        hpc = run / "hpc_ckpt_1.ckpt"
        assert f"its state is in runs/slurm-{job}/hpc_ckpt_1.ckpt" in lines[0]
        assert (p_root / "job.slurm").read_text() == f"requeue {job}\n"
        saved = load(hpc)
        done = int(saved["global_step"])
        assert 1 <= done < ROUNDS and f"after round {done} of {ROUNDS}" in lines[0]
        # The state of a round boundary: the accountant counted exactly the rounds trained.
        assert accountant_state(saved)["rounds"] == done
        assert not (run / "summary.json").exists()  # the run is not over
        # The requeue: the same script, job id and directory.
        requeued = sbatch(p_root / FIT.name, *ARGS, job_id=job, log=p_root / "job.log",
                          overrides=OVERRIDES, env=JOB_ENV, cwd=p_root,
                          restart_count=1)  # fmt: skip
        # The same run in this process, while the jobs run.
        monkeypatch.chdir(REPO)
        one = tmp_path / "one_process"
        args = ["fit", "--config", str(QUICKSTART), *ARGS, "--trainer.accelerator", "cpu",
                "--trainer.devices", "1", "--trainer.default_root_dir", str(one)]  # fmt: skip
        assert main(args) == 0
        assert _wait(uninterrupted) == 0, (u_root / "job.log").read_text()[-3000:]
        assert _wait(requeued) == 0, (p_root / "job.log").read_text()[-3000:]
    finally:
        for proc in (uninterrupted, preempted, requeued):
            stop(proc)
    log = (p_root / "job.log").read_text()
    assert f"Resuming from runs/slurm-{job}/hpc_ckpt_1.ckpt (requeued SLURM job" in log
    assert f"Finished {ROUNDS} rounds" in log
    u_run = next((u_root / "runs").iterdir())
    # The SLURM job (2 tasks) = one process, within the DDP tolerance, same ε and metrics.
    assert_same_run(one, u_run)
    # The requeued job = the uninterrupted job: weights, ε, every round counted once.
    assert_same_result(u_run, run, rounds=ROUNDS, atol=0.0)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds"] == ROUNDS
