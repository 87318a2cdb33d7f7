"""``fl-lightning sweep``: run a W&B sweep spec locally, resumably, one subprocess a point.

Usage::

    fl-lightning sweep sweeps/<spec>.yaml [--parallel N] [--count K] [--seed S]
        [--store PATH] [--wandb] [--dry-run] [--skip-failed]

Grid and random specs are expanded here (``bayes`` needs ``wandb agent``). Each point runs as a
subprocess (``python -m fl_lightning.cli fit --config ... --key=value ...``) with its output in
``<store>/runs/<point id>/a<attempt>/``; for ``fl-lightning fit`` commands the runner points the
CSV logger there (and a W&B logger with ``--wandb``, offline unless W&B is configured), so the
run's ``summary.json`` and ``metrics.csv`` land in a known folder. Every other program gets the
folder in the environment variable ``FL_SWEEP_RUN_DIR`` and should write ``summary.json`` there.

Resumable: points whose last row in the store is ``finished`` are skipped; a point left
``running`` by a killed sweep runs again; ``failed`` points run again unless ``--skip-failed``.
A failing point is recorded with its error and does not stop the others.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from fl_lightning.sweeps.spec import (
    Point,
    SpecError,
    SweepSpec,
    build_command,
    expand,
    is_fl_lightning_fit,
    load_spec,
)
from fl_lightning.sweeps.store import ResultStore
from fl_lightning.utils.argparse_lines import OneLineParser

RUN_DIR_ENV = "FL_SWEEP_RUN_DIR"
SUMMARY = "summary.json"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def format_eta(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"


def logger_override(run_dir: Path, *, sweep: str, point: Point, wandb: bool) -> list[str]:
    """``--trainer.logger`` putting the CSV logger's files (and summary.json) in ``run_dir``."""
    loggers: list[dict[str, Any]] = [
        {
            "class_path": "lightning.pytorch.loggers.CSVLogger",
            "init_args": {"save_dir": str(run_dir), "name": "", "version": ""},
        }
    ]
    if wandb:
        loggers.append(
            {
                # Project, entity and mode follow the environment (fl_lightning.loggers).
                "class_path": "fl_lightning.loggers.WandbLogger",
                "init_args": {
                    "save_dir": str(run_dir),
                    "group": sweep,
                    "name": f"{sweep}-{point.id}",
                },
            }
        )
    return [f"--trainer.logger={json.dumps(loggers)}"]


def _die_with_parent(parent_pid: int) -> None:  # pragma: no cover - runs in the child
    """Linux: the child gets SIGTERM if the runner dies (even by SIGKILL); if the runner died
    before this ran, the child exits at once."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:
        os._exit(1)


# Keys of a resolved config that say where a run wrote or read, not what it ran.
_NOT_SETTING = (
    "trainer.logger",
    "trainer.default_root_dir",
    "trainer.callbacks",
    "ckpt_path",
    "data.root",
    "config",
)


def resolved_config(run_dir: Path) -> dict[str, Any]:
    """The run's resolved ``config.yaml`` (written by ``fl-lightning fit``) flattened to dotted
    keys, without the keys that only say where it wrote or read; {} if there is none."""
    path = run_dir / "config.yaml"
    if not path.exists():
        return {}
    import yaml

    try:
        tree = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        return {}

    def flat(node: Any, prefix: str) -> dict[str, Any]:
        if not isinstance(node, dict):
            return {prefix: node}
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out

    return {
        k: v
        for k, v in flat(tree or {}, "").items()
        if not any(k == n or k.startswith(n + ".") for n in _NOT_SETTING)
    }


def _error_of(log: Path, returncode: int) -> str:
    """The most telling line of a failed run's output."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    pick = next((ln for ln in reversed(lines) if ln.startswith("error:")), None)
    if pick is None:
        pick = next((ln for ln in reversed(lines) if "Error" in ln or "error" in ln), None)
    if pick is None and lines:
        pick = lines[-1]
    return f"exit code {returncode}: {pick}" if pick else f"exit code {returncode}"


class SweepRunner:
    """Runs the points of one spec against one store."""

    def __init__(
        self,
        spec: SweepSpec,
        store: ResultStore,
        *,
        parallel: int = 1,
        wandb: bool = False,
        retry_failed: bool = True,
        grace_s: float = 10.0,
        poll_s: float = 1.0,
        out: TextIO | None = None,  # None: sys.stdout at print time
    ) -> None:
        self.spec = spec
        self.store = store
        self.parallel = max(1, parallel)
        self.wandb = wandb
        self.retry_failed = retry_failed
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.out = out
        self._mine: set[str] = set()
        self._initial_attempts: dict[str, int] = {}
        self._procs: dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._stopping = False
        self.extra_env: dict[str, str] = {}  # set in every point's environment (e.g. threads)

    def print(self, msg: str) -> None:
        print(msg, file=self.out or sys.stdout, flush=True)

    # -- one point ---------------------------------------------------------------------------
    def runs_fl_lightning_fit(self) -> bool:
        """Whether the spec's own ``program``/``command`` runs ``fl-lightning fit``; decided
        without the parameters, so no swept value can change what is run or how."""
        own = [t for t in self.spec.command if not t.startswith("${args")]
        return is_fl_lightning_fit(build_command(replace(self.spec, command=own), {}))

    def command_for(self, point: Point, run_dir: Path) -> list[str]:
        argv = build_command(self.spec, point.params, json_file=run_dir / "params.json")
        if self.runs_fl_lightning_fit():
            argv += logger_override(run_dir, sweep=self.spec.name, point=point, wandb=self.wandb)
        return argv

    def _running_row(self, point: Point, attempt: int) -> dict[str, Any]:
        run_dir = (self.store.root / "runs" / point.id / f"a{attempt}").resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        return {
            "id": point.id,
            "sweep": self.spec.name,
            "spec": str(self.spec.path),
            "index": point.index,
            "params": point.params,
            "attempt": attempt,
            "run_dir": str(run_dir),
            "command": self.command_for(point, run_dir),
            "status": "running",
            "started_at": _now(),
        }

    def run_point(self, point: Point, claimed: dict[str, Any] | None = None) -> dict[str, Any]:
        """Runs one point: ``claimed`` is its ``running`` row from :meth:`claim_next` (without
        one, the point is claimed here unconditionally)."""
        if claimed is None:
            claimed = self.store.claim(
                [point.id],
                lambda _pid, attempt: self._running_row(point, attempt),
                lambda *_: True,
                sweep=self.spec.name,
            )
            assert claimed is not None
        base = {k: v for k, v in claimed.items() if k not in ("status", "started_at")}
        run_dir = Path(base["run_dir"])
        argv = list(base["command"])
        env = {**os.environ, RUN_DIR_ENV: str(run_dir), "FL_SWEEP_POINT": point.id}
        env.setdefault("WANDB_SILENT", "true")
        env.update(same_package_env(env))
        env.update(self.extra_env)
        log = run_dir / "output.log"
        start = time.perf_counter()
        with log.open("wb") as fh:
            proc = subprocess.Popen(
                argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=functools.partial(_die_with_parent, os.getpid())
                if sys.platform.startswith("linux")
                else None,
            )
            with self._lock:
                self._procs[point.id] = proc
                stopping = self._stopping
            if stopping:  # the stop came while it was starting: end it like the others
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
            returncode = proc.wait()
            with self._lock:
                self._procs.pop(point.id, None)
        wall = time.perf_counter() - start
        row: dict[str, Any] = {**base, "finished_at": _now(), "wall_time_s": round(wall, 3)}
        row["returncode"] = returncode
        if self._stopping:
            return {**row, "status": "interrupted"}  # not stored: the point runs again
        summary_path = run_dir / SUMMARY
        if returncode != 0:
            row.update(status="failed", error=_error_of(log, returncode))
        elif not summary_path.exists():
            row.update(status="failed", error=f"exit code 0 but no {SUMMARY} in {run_dir}")
        else:
            try:
                metrics = json.loads(summary_path.read_text())
            except json.JSONDecodeError as err:
                row.update(status="failed", error=f"unreadable {SUMMARY}: {err}")
            else:
                row.update(
                    status="finished",
                    metrics=metrics,
                    epsilon=metrics.get("privacy/epsilon"),
                )
                config = resolved_config(run_dir)
                if config:
                    row["config"] = config
        self.store.append(row)
        return row

    # -- the sweep ---------------------------------------------------------------------------
    def pending(self, points: list[Point]) -> tuple[list[Point], int, int]:
        latest = self.store.latest(self.spec.name)
        todo, done, failed = [], 0, 0
        for p in points:
            status = latest.get(p.id, {}).get("status")
            if status == "finished":
                done += 1
            elif status == "failed" and not self.retry_failed:
                failed += 1
            else:
                todo.append(p)
        return todo, done, failed

    def stop(self) -> None:
        """Terminates the running points; kills those still alive after ``grace_s`` seconds
        (Lightning catches SIGTERM and may not exit on it)."""
        grace_s = self.grace_s
        with self._lock:
            self._stopping = True
            procs = list(self._procs.values())
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        deadline = time.monotonic() + grace_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()

    def claimable(self, point_id: str, last: dict[str, Any] | None, attempts: int) -> bool:
        """Whether this worker may start ``point_id`` now (decided under the store lock)."""
        if point_id in self._mine:
            return False  # at most one attempt per point and worker invocation
        if last is None:
            return True
        status = last.get("status")
        if status == "running":  # another worker's, or left by a dead one
            return not self.store.worker_alive(last.get("worker"))
        if status == "failed":
            # Retry a failure that predates this worker, once: not one a live worker just had.
            return self.retry_failed and attempts == self._initial_attempts.get(point_id, 0)
        return status != "finished"

    def claim_next(self, points: list[Point]) -> tuple[Point, dict[str, Any]] | None:
        """Claims the next point nobody else runs (the store's lock makes it exclusive)."""
        by_id = {p.id: p for p in points}
        row = self.store.claim(
            [p.id for p in points if p.id not in self._mine],
            lambda pid, attempt: self._running_row(by_id[pid], attempt),
            self.claimable,
            sweep=self.spec.name,
        )
        if row is None:
            return None
        self._mine.add(row["id"])
        return by_id[row["id"]], row

    def running_elsewhere(self, points: list[Point]) -> list[str]:
        """Points of this sweep that live workers other than this one are running."""
        latest = self.store.latest(self.spec.name)
        ids = {p.id for p in points}
        return [
            pid
            for pid, r in latest.items()
            if pid in ids
            and r.get("status") == "running"
            and r.get("worker") != self.store.worker
            and self.store.worker_alive(r.get("worker"))
        ]

    def run(self, points: list[Point]) -> int:
        """Runs every point no other worker runs; several workers (``--parallel`` threads,
        processes, machines) may share one store. Waits for points that other live workers
        hold, and takes over those whose worker died."""
        self.store.register_worker()
        self._initial_attempts = {p.id: self.store.attempts(p.id) for p in points}
        self._mine = set()
        todo, done, failed = self.pending(points)
        total = len(points)
        self.print(
            f"sweep {self.spec.name}: {total} points ({self.spec.method}), {done} already "
            f"finished, {len(todo)} to run, {self.parallel} in parallel; store {self.store.path} "
            f"(worker {self.store.worker})"
        )
        failed_here = failed
        start = time.perf_counter()
        completed_now = 0
        waiting_said = False
        with ThreadPoolExecutor(max_workers=self.parallel) as pool:
            futures: dict[Future, Point] = {}
            try:
                while True:
                    while len(futures) < self.parallel and not self._stopping:
                        claimed = self.claim_next(points)
                        if claimed is None:
                            break
                        point, row = claimed
                        futures[pool.submit(self.run_point, point, row)] = point
                    if not futures:
                        others = self.running_elsewhere(points)
                        if not others:
                            break
                        if not waiting_said:
                            self.print(f"waiting for {len(others)} points run by other workers")
                            waiting_said = True
                        time.sleep(self.poll_s)
                        continue
                    finished, _ = wait(set(futures), timeout=1.0, return_when=FIRST_COMPLETED)
                    for fut in finished:
                        point = futures.pop(fut)
                        try:
                            row = fut.result()
                        except Exception as err:  # noqa: BLE001 - recorded, the sweep goes on
                            row = {"status": "failed", "error": f"runner: {err!r}"}
                            self.store.append(
                                {
                                    "id": point.id,
                                    "sweep": self.spec.name,
                                    "index": point.index,
                                    "params": point.params,
                                    "worker": self.store.worker,
                                    **row,
                                }
                            )
                        completed_now += 1
                        if row["status"] != "finished":
                            failed_here += 1
                        latest = self.store.latest(self.spec.name)
                        done = sum(latest.get(p.id, {}).get("status") == "finished" for p in points)
                        self.print(
                            self._progress_line(
                                point,
                                row,
                                done,
                                failed_here,
                                total,
                                completed_now,
                                max(len(todo), completed_now),
                                start,
                            )  # fmt: skip
                        )
            except KeyboardInterrupt:
                self.stop()
                for fut in futures:
                    fut.cancel()
                self.print(f"interrupted: {done}/{total} finished; run the same command to resume")
                raise
        latest = self.store.latest(self.spec.name)
        done = sum(latest.get(p.id, {}).get("status") == "finished" for p in points)
        self.print(
            f"sweep {self.spec.name}: {done}/{total} finished, {failed_here} failed "
            f"({format_eta(time.perf_counter() - start)} elapsed)"
        )
        return 0 if failed_here == 0 else 1

    def _progress_line(
        self,
        point: Point,
        row: dict[str, Any],
        done: int,
        failed: int,
        total: int,
        completed_now: int,
        to_run: int,
        start: float,
    ) -> str:
        elapsed = time.perf_counter() - start
        left = to_run - completed_now
        eta = elapsed / completed_now * left if completed_now else math.inf
        params = " ".join(f"{k.split('.')[-1]}={v}" for k, v in point.params.items())
        if row["status"] == "finished":
            m = row.get("metrics", {})
            acc = m.get("test/accuracy")
            eps = m.get("privacy/epsilon")
            what = f"finished in {row.get('wall_time_s', 0):.1f}s"
            if acc is not None:
                what += f", acc {acc:.4f}"
            if eps is not None:
                what += f", ε {eps:.3g}"
        else:
            what = f"FAILED ({row.get('error', '?')})"
        return (
            f"[{done + failed}/{total}] {point.id} {params}: {what} | "
            f"{done} done, {failed} failed, {left} left, ETA {format_eta(eta)}"
        )


def validate_points(spec: SweepSpec, points: list[Point]) -> str | None:
    """Why a point of an ``fl-lightning fit`` spec would be refused while parsing (an unknown
    parameter, a value of the wrong type, a missing config), as one line naming the spec and
    the parameter; None if all parse. Parses the fewest points that together hold every
    non-float value of every parameter (a continuous value cannot fail to parse as a float),
    so a bad spec stops before any point runs."""
    from fl_lightning.runs.arguments import argument_problem

    covered: set[tuple[str, str]] = set()
    for point in points:
        argv = build_command(spec, point.params)
        if not is_fl_lightning_fit(argv):
            return None
        pairs = {(k, repr(v)) for k, v in point.params.items() if not isinstance(v, float)}
        if covered and pairs <= covered:
            continue
        covered |= pairs
        start = argv.index("fit")
        problem = argument_problem(argv[start:])
        if problem:
            key = problem.split(":", 1)[0]
            where = f"parameters.{key}" if key in spec.parameters else "command"
            return f"{spec.path}: {where}: {problem} (point {point.id})"
    return None


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="fl-lightning sweep",
        description="Run a W&B sweep spec (grid or random) locally, resumably.",
    )
    p.add_argument("spec", help="W&B sweep YAML (sweeps/<name>.yaml)")
    p.add_argument(
        "--parallel",
        "--jobs",
        "-j",
        dest="parallel",
        type=int,
        default=1,
        help="points this worker runs at once (default 1); other workers (processes, machines) "
        "may run the same spec on the same store at the same time",
    )
    p.add_argument("--count", type=int, default=None, help="points of a random sweep")
    p.add_argument("--seed", type=int, default=0, help="seed of a random sweep's points")
    p.add_argument(
        "--store",
        default=None,
        help="result store: a .jsonl file or a folder (default sweep_results/<spec name>/)",
    )
    p.add_argument(
        "--wandb",
        action="store_true",
        help="also log each point to W&B (offline unless WANDB_MODE or W&B credentials say "
        "otherwise)",
    )
    p.add_argument("--skip-failed", action="store_true", help="do not re-run failed points")
    p.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="seconds a point gets to exit after Ctrl-C / SIGTERM before it is killed",
    )
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    return p


def same_package_env(env: dict[str, str]) -> dict[str, str]:
    """What a point's ``python -m fl_lightning.cli`` needs to import the package this runner
    imported, whatever its working directory holds: the folder above that package first on
    ``PYTHONPATH``, and ``PYTHONSAFEPATH`` (Python's ``-P``: ``-m`` does not put the working
    directory first). A user's ``--import`` module beside the configs still imports: the CLI
    puts the working directory on ``sys.path`` itself, once the package is imported."""
    import fl_lightning

    root = str(Path(fl_lightning.__file__).resolve().parents[1])
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    return {"PYTHONPATH": os.pathsep.join([root, *rest]), "PYTHONSAFEPATH": "1"}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        spec = load_spec(args.spec)
        points = expand(spec, count=args.count, seed=args.seed)
    except (SpecError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.parallel < 1:
        print("error: --parallel: must be >= 1", file=sys.stderr)
        return 2
    problem = validate_points(spec, points)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from fl_lightning.sweeps.store import StoreLockError
    from fl_lightning.utils.atomic import OutputWriteError

    store = ResultStore(args.store or Path("sweep_results") / spec.name)
    runner = SweepRunner(
        spec,
        store,
        parallel=args.parallel,
        wandb=args.wandb,
        retry_failed=not args.skip_failed,
        grace_s=args.grace,
    )
    if args.dry_run:
        todo, done, _ = runner.pending(points)
        print(f"{len(points)} points, {done} finished, {len(todo)} to run")
        for p in todo:
            print(" ".join(runner.command_for(p, store.root / "runs" / p.id / "a?")))
        return 0

    def _term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _term)
    try:
        return runner.run(points)
    except KeyboardInterrupt:
        return 130
    except (StoreLockError, OutputWriteError) as err:
        runner.stop()
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        store.close()


if __name__ == "__main__":
    sys.exit(main())
