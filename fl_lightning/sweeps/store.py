"""The local result store: an append-only JSON-lines file, one row per event of a run, shared
safely by any number of sweep workers (threads, processes, machines on one filesystem).

A point's state is its last row: ``running`` (claimed by the worker named in ``worker``),
``finished`` (config, final metrics from the run's ``summary.json``, ε, wall time) or ``failed``
(the error). Rows are never rewritten, so the file is also the history of every attempt.

Concurrency (docs/reliability.md):

* **One writer at a time.** Every append, and every claim, happens under an exclusive
  ``flock`` of ``<store>.lock`` (plus a thread lock within a process). A claim reads the store,
  decides, and appends the ``running`` row inside one locked section, so two workers can never
  both claim a point.
* **Whole rows.** Each row is one ``write`` of one line, then ``fsync``. If a write fails
  part-way (disk full) the file is truncated back to where the row began; if an earlier writer
  died leaving a line without its newline, the next writer ends that line first, so the torn
  fragment can never swallow the row after it. The reader skips a line that does not parse.
* **Dead workers.** A worker holds an exclusive ``flock`` on ``.workers/<worker id>.lock`` for
  its lifetime; the kernel drops it when the process dies, however it dies. A ``running`` row
  whose worker's lock can be taken belongs to a dead worker, and the point may be claimed again
  (a new attempt, in its own run folder). Killing a worker therefore loses only the points it
  was running, and only their progress.

Why a file lock and not SQLite: committed results are JSONL and stay readable as they are, and
SQLite's WAL mode needs shared memory that network filesystems do not provide, whereas
``flock`` works across machines on NFSv4 and Lustre/GPFS mounted with locking (a filesystem
without locks fails with a one-line error instead of silently racing).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fl_lightning.utils.atomic import OutputWriteError, describe
from fl_lightning.utils.redact import redact

STORE_FILE = "results.jsonl"
WORKERS = ".workers"


class StoreLockError(OSError):
    """The store's filesystem refuses file locks (one line)."""

    def __str__(self) -> str:
        return str(self.strerror)


def resolve_store(path: str | Path) -> Path:
    """A store path: a ``.jsonl`` file as given, or ``<dir>/results.jsonl`` for a folder."""
    p = Path(path)
    return p if p.suffix == ".jsonl" else p / STORE_FILE


def new_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class ResultStore:
    """Append-only JSONL store of sweep rows, safe for concurrent workers (module docstring).

    Args:
        path: a ``.jsonl`` file or a folder (``<folder>/results.jsonl``).
        worker: this worker's id (default: host, pid and a random suffix).
    """

    def __init__(self, path: str | Path, worker: str | None = None) -> None:
        self.path = resolve_store(path)
        self.worker = worker or new_worker_id()
        self._lock = threading.RLock()
        self._worker_fd: int | None = None

    @property
    def root(self) -> Path:
        return self.path.parent

    @property
    def lock_path(self) -> Path:
        return self.path.with_name(self.path.name + ".lock")

    # -- locking -----------------------------------------------------------------------------
    def _flock(self, fd: int, how: int, what: Path) -> None:
        try:
            fcntl.flock(fd, how)
        except BlockingIOError:
            raise
        except OSError as err:
            if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise StoreLockError(
                    err.errno,
                    f"--store: the filesystem of {what} does not support file locks "
                    f"({describe(err)}); put the store on a local disk or on NFSv4 with locking",
                ) from err
            raise

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive access to the store, across threads, processes and machines."""
        with self._lock:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                self._flock(fd, fcntl.LOCK_EX, self.lock_path)
                yield
            finally:
                os.close(fd)  # releases the lock

    def register_worker(self) -> None:
        """Announces this worker alive until its process ends (idempotent)."""
        with self._lock:
            if self._worker_fd is not None:
                return
            folder = self.root / WORKERS
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{self.worker}.lock"
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            self._flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, path)
            self._worker_fd = fd

    def close(self) -> None:
        """Ends this worker's registration (its ``running`` points become claimable)."""
        with self._lock:
            if self._worker_fd is not None:
                os.close(self._worker_fd)
                self._worker_fd = None

    def worker_alive(self, worker: str | None) -> bool:
        """Whether the worker that wrote a ``running`` row still runs (its lock is held)."""
        if not worker:
            return False  # rows of runners older than the lock protocol: one runner, gone
        if worker == self.worker:
            return self._worker_fd is not None
        path = self.root / WORKERS / f"{worker}.lock"
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            self._flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, path)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    # -- writing -----------------------------------------------------------------------------
    def _append_unlocked(self, row: dict[str, Any]) -> None:
        line = (json.dumps(redact(row), sort_keys=True, default=str) + "\n").encode()
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            start = os.fstat(fd).st_size
            if start and os.pread(fd, 1, start - 1) != b"\n":
                line = b"\n" + line  # end a line torn by a writer that died
            try:
                written = os.write(fd, line)
                if written != len(line):
                    raise OSError(
                        errno.ENOSPC, f"only {written} of {len(line)} bytes written (disk full?)"
                    )
                os.fsync(fd)
            except OSError as err:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
                raise OutputWriteError(
                    err.errno, f"--store: cannot append to {self.path}: {describe(err)}"
                ) from err
        finally:
            os.close(fd)

    def append(self, row: dict[str, Any]) -> None:
        """Appends one whole row under the store lock (environment secrets redacted)."""
        with self.locked():
            self._append_unlocked(row)

    def claim(
        self,
        candidates: list[str],
        make_row: Callable[[str, int], dict[str, Any]],
        claimable: Callable[[str, dict[str, Any] | None, int], bool],
        sweep: str | None = None,
    ) -> dict[str, Any] | None:
        """Claims the first candidate point that ``claimable(id, last row, attempts)`` allows,
        appending ``make_row(id, attempt)`` (a ``running`` row) in the same locked section;
        None when no candidate may be claimed now. Only rows of ``sweep`` count, if given."""
        self.register_worker()
        with self.locked():
            latest: dict[str, dict[str, Any]] = {}
            attempts: dict[str, int] = {}
            for r in self.rows():
                if r.get("status") == "running":  # attempts of any sweep: one run folder each
                    attempts[r["id"]] = attempts.get(r["id"], 0) + 1
                if sweep is None or r.get("sweep") == sweep:
                    latest[r["id"]] = r
            for pid in candidates:
                if claimable(pid, latest.get(pid), attempts.get(pid, 0)):
                    row = {**make_row(pid, attempts.get(pid, 0) + 1), "worker": self.worker}
                    self._append_unlocked(row)
                    return row
        return None

    # -- reading -----------------------------------------------------------------------------
    def rows(self) -> Iterator[dict[str, Any]]:
        """Every readable row in order (a torn or corrupt line is skipped)."""
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            for raw in f:
                try:
                    row = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    continue
                if isinstance(row, dict) and "id" in row:
                    yield row

    def latest(self, sweep: str | None = None) -> dict[str, dict[str, Any]]:
        """The last row of every point (of one sweep, if given), keyed by point id."""
        out: dict[str, dict[str, Any]] = {}
        for row in self.rows():
            if sweep is None or row.get("sweep") == sweep:
                out[row["id"]] = row
        return out

    def attempts(self, point_id: str) -> int:
        return sum(1 for r in self.rows() if r["id"] == point_id and r["status"] == "running")

    def finished(self, sweep: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.latest(sweep).values() if r.get("status") == "finished"]
