"""Issue 51, item 3: examples/slurm/sweep_array.sbatch, a sweep on a SLURM job array.

The array's tasks are started as local processes the way sbatch starts array tasks (the
script itself, with ``SLURM_ARRAY_JOB_ID``/``SLURM_ARRAY_TASK_ID`` and the job variables set;
``tests/cluster/emulate.py``), each an ``fl-lightning sweep`` worker on one shared store. The
points run the sweep tests' fake program (tests/sweeps/conftest.py: a real subprocess that
logs its start, sleeps and writes ``summary.json``), so the test measures the workers, not
training. One task is killed in the middle of a point (it and its point process, as SLURM
ends a task's processes), then started again as a requeue would (same array task id).
Every point must end ``finished`` exactly once, no row may be torn, and only the killed
task's point may have run twice (tests/sweeps/test_workers.py: check_store).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.cluster.emulate import SLURM, free_job_id, kill_tree, sbatch, stop
from tests.sweeps.conftest import FAKE
from tests.sweeps.test_workers import check_store

pytestmark = pytest.mark.fault

SCRIPT = SLURM / "sweep_array.sbatch"
POINTS = 8
TASKS = 3


def rows(store: Path) -> list[dict]:
    path = store / "results.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a row being written right now
            out.append(json.loads(line))
    return out


def worker_pid(row: dict) -> int:
    return int(row["worker"].split("-")[-2])


def test_array_tasks_share_one_store_and_a_killed_task_reruns_only_its_point(tmp_path):
    program = tmp_path / "fake_program.py"
    program.write_text(FAKE)
    calls = tmp_path / "calls.log"
    calls.touch()
    spec = tmp_path / "array.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "array", "method": "grid", "program": str(program),
        "command": ["${env}", "${interpreter}", "${program}", "${args}"],
        "parameters": {"x": {"values": list(range(POINTS))}, "sleep": {"value": 1.0}},
    }))  # fmt: skip
    store = tmp_path / "store"
    job = free_job_id()
    env = {"SPEC": str(spec), "STORE": str(store), "VENV": sys.prefix, "FAKE_CALLS": str(calls)}

    def task(i: int, restart: int = 0):
        log = tmp_path / f"task{i}.log"
        return sbatch(SCRIPT, "--grace", "1", job_id=job, array_task=i, log=log, env=env,
                      cwd=tmp_path, restart_count=restart)  # fmt: skip

    tasks = [task(i) for i in range(TASKS)]
    requeued = None
    killed: set[int] = set()
    try:
        victim = tasks[1]  # bash execs the worker: the task's pid is the worker's
        deadline = time.monotonic() + 120
        mine: list[dict] = []
        while not mine and time.monotonic() < deadline:
            assert victim.poll() is None, (tmp_path / "task1.log").read_text()[-2000:]
            mine = [r for r in rows(store) if r.get("status") == "running"
                    and worker_pid(r) == victim.pid]  # fmt: skip
            time.sleep(0.05)
        assert mine, "array task 1 never claimed a point"
        held = mine[-1]["id"]
        time.sleep(0.3)  # inside the point (it sleeps 1 s)
        assert not any(r["id"] == held and r["status"] == "finished" for r in rows(store))
        kill_tree(victim.pid)  # the task's processes end, its point's too
        victim.wait(timeout=30)
        killed.add(victim.pid)
        requeued = task(1, restart=1)  # the requeued task: same array task id
        codes = [t.wait(timeout=180) for t in (tasks[0], tasks[2], requeued)]
    finally:
        for t in [*tasks, requeued]:
            stop(t)
    logs = "\n".join((tmp_path / f"task{i}.log").read_text() for i in range(TASKS))
    assert codes == [0, 0, 0], logs[-3000:]
    assert f"array task 1 of job {job}: a worker on {store}" in logs
    starts = Counter(ln.split()[0] for ln in calls.read_text().splitlines() if ln)
    stats = check_store(store, POINTS, killed, starts)  # every row parses, each point once
    assert stats["reruns"] == 1  # the killed task's point, and only it
    attempts = [r for r in rows(store) if r["id"] == held and r["status"] == "running"]
    assert [r["attempt"] for r in attempts] == [1, 2]
    assert worker_pid(attempts[0]) == victim.pid and worker_pid(attempts[1]) != victim.pid
    workers = {r["worker"] for r in rows(store) if r["status"] == "finished"}
    assert len(workers) >= 2  # the points really were shared between array tasks
