"""The local result store: an append-only JSON-lines file, one row per event of a run.

Each row is written with one ``write`` on a file opened ``O_APPEND`` and then ``fsync``-ed, so a
crash can at worst leave a torn last line, which the reader skips. A point's state is its last
row: ``running`` (started; if nothing follows, the runner died and the point runs again),
``finished`` (config, final metrics from the run's ``summary.json``, ε, wall time) or ``failed``
(the error). Rows are never rewritten, so the file is also the history of every attempt.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STORE_FILE = "results.jsonl"


def resolve_store(path: str | Path) -> Path:
    """A store path: a ``.jsonl`` file as given, or ``<dir>/results.jsonl`` for a folder."""
    p = Path(path)
    return p if p.suffix == ".jsonl" else p / STORE_FILE


class ResultStore:
    """Append-only JSONL store of sweep rows (thread-safe within one process)."""

    def __init__(self, path: str | Path) -> None:
        self.path = resolve_store(path)
        self._lock = threading.Lock()

    @property
    def root(self) -> Path:
        return self.path.parent

    def append(self, row: dict[str, Any]) -> None:
        """Appends one row atomically (a single ``write`` + ``fsync``)."""
        line = (json.dumps(row, sort_keys=True, default=str) + "\n").encode()
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)

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
