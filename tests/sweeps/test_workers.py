"""Issue 23, item 2: several sweep workers on one store, some killed at random instants.

Every worker is a real ``fl-lightning sweep`` process on the same spec and store; the fake
program (conftest.py) logs each start. Nothing may run twice unless the worker running it was
killed, no row may be lost or torn, and every point ends ``finished`` exactly once.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from fl_lightning.sweeps import runner
from fl_lightning.sweeps.store import ResultStore

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.fault


def _worker(spec: Path, store: Path, jobs: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "fl_lightning.cli", "sweep", str(spec), "--store", str(store),
           "--jobs", str(jobs), "--grace", "1"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _starts(make) -> Counter:
    return Counter(ln.split()[0] for ln in make.calls.read_text().splitlines() if ln)


def check_store(store: Path, n_points: int, killed: set[int], starts: Counter) -> dict:
    """The invariants; returns counts for the report."""
    lines = (store / "results.jsonl").read_bytes().splitlines()
    rows = [json.loads(ln) for ln in lines if ln.strip()]  # every line parses: nothing torn
    assert len(rows) == len([ln for ln in lines if ln.strip()])
    finished = Counter(r["id"] for r in rows if r["status"] == "finished")
    assert len(finished) == n_points and set(finished.values()) == {1}
    attempts: dict[str, list[dict]] = {}
    for r in rows:
        if r["status"] == "running":
            attempts.setdefault(r["id"], []).append(r)
    for pid, runs in attempts.items():
        assert [r["attempt"] for r in runs] == list(range(1, len(runs) + 1))
        # every start of the program has its claim row, and vice versa
        assert starts[pid] <= len(runs), pid
        for r in runs[:-1]:  # an earlier attempt can only be one whose worker was killed
            assert int(r["worker"].split("-")[-2]) in killed, (pid, r["worker"])
        assert len({r["run_dir"] for r in runs}) == len(runs)
    return {"rows": len(rows), "reruns": sum(len(r) - 1 for r in attempts.values())}


def test_concurrent_workers_run_every_point_once(fake_sweep, tmp_path):
    spec = fake_sweep({"x": {"values": list(range(12))}, "sleep": {"value": 0.3}})
    store = tmp_path / "store"
    workers = [_worker(spec, store, jobs) for jobs in (1, 2, 2)]
    assert [w.wait(timeout=240) for w in workers] == [0, 0, 0]
    starts = _starts(fake_sweep)
    assert len(starts) == 12 and set(starts.values()) == {1}  # no point ran twice
    stats = check_store(store, 12, set(), starts)
    assert stats["reruns"] == 0
    workers_used = {r["worker"] for r in ResultStore(store).rows()}
    assert len(workers_used) >= 2  # the work really was shared


TRIALS = int(os.environ.get("FL_FAULT_TRIALS", "3"))


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(TRIALS))
def test_workers_killed_at_random_lose_only_their_points(fake_sweep, tmp_path, trial):
    rng = random.Random(f"workers-{trial}")
    n = 16
    spec = fake_sweep({"x": {"values": list(range(n))}, "sleep": {"value": 0.5}})
    store = tmp_path / "store"
    alive = [_worker(spec, store, rng.choice((1, 2))) for _ in range(3)]
    killed: set[int] = set()
    deadline = time.monotonic() + 300
    for _ in range(3):  # three random kills, each replaced by a fresh worker
        time.sleep(rng.uniform(0.3, 1.5))
        victim = rng.choice([w for w in alive if w.poll() is None] or alive)
        if victim.poll() is None:
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            killed.add(victim.pid)
        alive.remove(victim)
        alive.append(_worker(spec, store, rng.choice((1, 2))))
    for w in alive:
        w.wait(timeout=max(1.0, deadline - time.monotonic()))
    # The survivors took over what the killed workers held (their locks were released).
    latest = ResultStore(store).latest("fake")
    assert all(r["status"] == "finished" for r in latest.values()) and len(latest) == n
    stats = check_store(store, n, killed, _starts(fake_sweep))
    assert stats["reruns"] <= 2 * len(killed)  # at most the points the killed workers ran
    print(f"workers trial {trial}: {len(killed)} workers killed, {stats['reruns']} points re-run, "
          f"{stats['rows']} rows, all {n} points finished once")  # fmt: skip


# -- the store's own guarantees --------------------------------------------------------------
def test_a_torn_tail_cannot_swallow_the_next_row(tmp_path):
    store = ResultStore(tmp_path / "s.jsonl")
    store.append({"id": "a", "sweep": "s", "status": "finished"})
    with open(store.path, "ab") as f:  # a writer died inside its write
        f.write(b'{"id": "b", "sweep": "s", "sta')
    store.append({"id": "c", "sweep": "s", "status": "finished"})
    assert [r["id"] for r in store.rows()] == ["a", "c"]


def test_a_full_disk_leaves_no_partial_row(tmp_path):
    """A real short write: RLIMIT_FSIZE lets the append write only part of its row."""
    path = tmp_path / "s.jsonl"
    ResultStore(path).append({"id": "a", "sweep": "s", "status": "finished"})
    size = path.stat().st_size
    script = f"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({size} + 20, resource.RLIM_INFINITY))
from fl_lightning.sweeps.store import ResultStore
try:
    ResultStore({str(path)!r}).append({{"id": "b", "sweep": "s", "status": "finished",
                                       "metrics": {{"pad": "x" * 200}}}})
except OSError as err:
    print(err)
    sys.exit(3)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.startswith(f"--store: cannot append to {path}: only 20 of ")
    assert path.stat().st_size == size  # truncated back: no partial row
    store = ResultStore(path)
    store.append({"id": "c", "sweep": "s", "status": "finished"})
    assert [r["id"] for r in store.rows()] == ["a", "c"]


def test_legacy_store_rows_are_read_and_a_stale_running_point_reruns(fake_sweep, tmp_path):
    """Stores written before workers had locks (no ``worker`` field) keep working."""
    spec = fake_sweep({"x": {"values": [1, 2]}})
    store = tmp_path / "store"
    store.mkdir()
    from fl_lightning.sweeps.spec import expand, load_spec

    p1, p2 = expand(load_spec(spec))
    legacy = [
        {"id": p1.id, "sweep": "fake", "status": "running", "attempt": 1},
        {"id": p1.id, "sweep": "fake", "status": "finished", "attempt": 1,
         "metrics": {"test/accuracy": 0.5}},
        {"id": p2.id, "sweep": "fake", "status": "running", "attempt": 1},  # its runner died
    ]  # fmt: skip
    (store / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in legacy))
    assert runner.main([str(spec), "--store", str(store)]) == 0
    assert _starts(fake_sweep) == Counter({p2.id: 1})
    rows = list(ResultStore(store).rows())
    assert rows[: len(legacy)] == legacy  # nothing rewritten
    assert rows[-1]["id"] == p2.id and rows[-1]["attempt"] == 2


def test_a_live_workers_point_is_not_taken(tmp_path):
    """A point claimed by a worker that is alive stays its own, even across store objects."""
    store = tmp_path / "store"
    other = ResultStore(store, worker="elsewhere-1-aaaaaa")
    other.register_worker()
    other.append({"id": "p", "sweep": "fake", "status": "running", "worker": other.worker})
    me = ResultStore(store)
    assert me.worker_alive(other.worker)
    other.close()  # the worker ends (as a killed one would: the kernel drops its lock)
    assert not me.worker_alive(other.worker)
