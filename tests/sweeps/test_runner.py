import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fl_lightning.sweeps import runner
from fl_lightning.sweeps.store import ResultStore


def _calls(make, runner_pid: int | None = None) -> list[str]:
    """Point ids the fake program was started for (by one runner process, if given)."""
    lines = [ln.split() for ln in make.calls.read_text().splitlines() if ln]
    return [pid for pid, ppid in lines if runner_pid is None or int(ppid) == runner_pid]


def test_sweep_runs_every_point_and_stores_metrics(fake_sweep, tmp_path, capsys):
    spec = fake_sweep({"x": {"values": [1, 2, 3]}, "seed": {"values": [0, 1]}})
    store = tmp_path / "store"
    assert runner.main([str(spec), "--store", str(store), "--parallel", "2"]) == 0
    rows = ResultStore(store).finished("fake")
    assert len(rows) == 6
    by_params = {(r["params"]["x"], r["params"]["seed"]): r for r in rows}
    assert set(by_params) == {(x, s) for x in (1, 2, 3) for s in (0, 1)}
    r = by_params[(2, 1)]
    assert abs(r["metrics"]["test/accuracy"] - (0.7 + 0.02 + 0.001)) < 1e-9
    assert r["epsilon"] == 6 and r["wall_time_s"] > 0
    assert (Path(r["run_dir"]) / "metrics.csv").exists()
    out = capsys.readouterr().out
    assert "[6/6]" in out and "ETA" in out
    # a second invocation has nothing to do
    assert runner.main([str(spec), "--store", str(store)]) == 0
    assert len(_calls(fake_sweep)) == 6
    assert "6 already finished, 0 to run" in capsys.readouterr().out


def test_failing_point_is_recorded_and_the_rest_finish(fake_sweep, tmp_path):
    spec = fake_sweep({"x": {"values": [1, 2]}, "fail": {"values": [False, True, False]}})
    store = tmp_path / "store"
    assert runner.main([str(spec), "--store", str(store)]) == 1
    latest = ResultStore(store).latest("fake")
    assert len(latest) == 4  # (x, fail) with duplicates of (x, False) sharing an id
    failed = [r for r in latest.values() if r["status"] == "failed"]
    assert len(failed) == 2
    assert all("error: model.lr: boom" in r["error"] and r["returncode"] == 2 for r in failed)
    assert sum(r["status"] == "finished" for r in latest.values()) == 2
    # --skip-failed leaves them; a plain re-run retries only them
    n = len(_calls(fake_sweep))
    assert runner.main([str(spec), "--store", str(store), "--skip-failed"]) == 1
    assert len(_calls(fake_sweep)) == n
    runner.main([str(spec), "--store", str(store)])
    assert len(_calls(fake_sweep)) == n + 2


def test_killed_sweep_resumes_with_only_the_missing_points(fake_sweep, tmp_path):
    spec = fake_sweep({"x": {"values": [1, 2, 3, 4, 5]}, "sleep": {"value": 0.8}})
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "fl_lightning.cli", "sweep", str(spec), "--store", str(store)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = ResultStore(store)
    deadline = time.time() + 60
    while len(results.finished("fake")) < 2 and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # a crash: no clean-up at all
    proc.wait()
    done_before = {r["id"] for r in results.finished("fake")}
    assert 2 <= len(done_before) < 5
    time.sleep(0.6)  # the orphaned child (if any) got SIGTERM via PDEATHSIG
    assert runner.main([str(spec), "--store", str(store)]) == 0
    calls_after = _calls(fake_sweep, runner_pid=os.getpid())  # this runner's points
    latest = results.latest("fake")
    assert all(r["status"] == "finished" for r in latest.values()) and len(latest) == 5
    assert set(calls_after) == set(latest) - done_before  # only the missing points ran
    assert len(calls_after) == 5 - len(done_before)
    # the interrupted point's first attempt is in the history, its rerun is attempt 2
    reran = [r for r in latest.values() if r["attempt"] == 2]
    assert len(reran) <= 1


def test_sigterm_stops_the_sweep_and_kills_points_that_ignore_it(fake_sweep, tmp_path):
    spec = fake_sweep(
        {"x": {"values": [1, 2]}, "sleep": {"value": 60}, "ignore_term": {"value": True}}
    )
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "fl_lightning.cli", "sweep", str(spec), "--store", str(store),
           "--parallel", "2", "--grace", "1"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    pids_file = Path(str(fake_sweep.calls) + ".pids")
    deadline = time.time() + 60
    while time.time() < deadline and (
        not pids_file.exists() or len(pids_file.read_text().split()) < 2
    ):
        time.sleep(0.05)
    pids = [int(p) for p in pids_file.read_text().split()]
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=30) == 130
        assert b"run the same command to resume" in proc.stdout.read()
        time.sleep(0.2)
        for pid in pids:  # the points are gone (killed after the grace period)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            raise AssertionError(f"point process {pid} survived")
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    latest = ResultStore(store).latest("fake")
    assert {r["status"] for r in latest.values()} == {"running"}  # both run again on resume


def test_torn_last_line_is_ignored(tmp_path):
    store = ResultStore(tmp_path / "s.jsonl")
    store.append({"id": "a", "sweep": "s", "status": "finished"})
    with open(store.path, "ab") as f:
        f.write(b'{"id": "b", "sweep": "s", "sta')
    assert list(store.latest()) == ["a"]
    store2 = ResultStore(tmp_path / "s.jsonl")
    assert json.loads(store2.path.read_text().splitlines()[0])["id"] == "a"


def test_bayes_is_refused_with_one_line(fake_sweep, capsys):
    spec = fake_sweep({"x": {"values": [1]}}, method="bayes")
    assert runner.main([str(spec)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "wandb agent" in err


def test_sigterm_starts_no_queued_point(fake_sweep, tmp_path):
    """One point at a time, three queued: after SIGTERM the killed point is not followed by the
    next one (the worker thread must not start it while the runner waits for the grace)."""
    spec = fake_sweep({"x": {"values": [1, 2, 3]}, "sleep": {"value": 60},
                       "ignore_term": {"value": True}})  # fmt: skip
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "fl_lightning.cli", "sweep", str(spec), "--store", str(store),
           "--parallel", "1", "--grace", "1"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    pids_file = Path(str(fake_sweep.calls) + ".pids")
    deadline = time.time() + 60
    while time.time() < deadline and not (pids_file.exists() and pids_file.read_text().split()):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=30) == 130
    finally:
        for pid in [int(p) for p in pids_file.read_text().split()]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert len(fake_sweep.calls.read_text().splitlines()) == 1
    rows = list(ResultStore(store).rows())
    assert [r["status"] for r in rows] == ["running"]


def test_points_import_the_runners_package_whatever_their_working_directory(tmp_path):
    """A point's ``python -m fl_lightning.cli`` runs the checkout the runner runs, not a
    ``fl_lightning/`` folder in its working directory (one .venv shared by two checkouts)."""
    import os

    import fl_lightning
    from fl_lightning.sweeps.runner import same_package_env

    decoy = tmp_path / "fl_lightning"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise SystemExit('imported the decoy')\n")
    code = "import fl_lightning; print(fl_lightning.__file__)"
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    shadowed = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                              capture_output=True, text=True)  # fmt: skip
    assert "imported the decoy" in shadowed.stderr  # the folder shadows it without the fix
    env.update(same_package_env(env))
    proc = subprocess.run([sys.executable, "-m", "fl_lightning.cli", "--help"], cwd=tmp_path,
                          env=env, capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0 and "fl-lightning:" in proc.stdout, proc.stderr[-2000:]
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert out.strip() == fl_lightning.__file__
