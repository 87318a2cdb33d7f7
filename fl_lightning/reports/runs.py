"""Runs to report on: read from a sweep store (JSONL) or a W&B CSV export.

A :class:`Run` is what a report needs of a finished run: its parameters (the swept values, or
every config column of a W&B export), its final metrics, and the folder with its per-round
``metrics.csv`` (local runs only).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from fl_lightning.sweeps.store import ResultStore, resolve_store


@dataclass
class Run:
    id: str
    params: dict[str, Any]
    metrics: dict[str, Any]
    run_dir: Path | None = None
    wall_time_s: float | None = None

    def get(self, key: str) -> Any:
        """A parameter or a metric by key (parameters first)."""
        if key in self.params:
            return self.params[key]
        return self.metrics.get(key)

    def history(self, column: str) -> list[tuple[int, float]]:
        """(round, value) pairs of one column of the run's ``metrics.csv`` (rounds from 1)."""
        if self.run_dir is None or not (self.run_dir / "metrics.csv").exists():
            return []
        out = []
        with (self.run_dir / "metrics.csv").open() as f:
            for row in csv.DictReader(f):
                value = row.get(column)
                if value in (None, ""):
                    continue
                idx = row.get("round/index") or row.get("step") or "0"
                out.append((int(float(idx)) + 1, float(value)))
        return out


def _parse(value: str) -> Any:
    if value == "":
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        try:
            return float(value)
        except ValueError:
            return value


def load_store(path: str | Path) -> list[Run]:
    """The finished runs of a sweep store (a ``.jsonl`` file or its folder)."""
    store = ResultStore(path)
    if not store.path.exists():
        raise FileNotFoundError(f"no sweep store at {resolve_store(path)}")
    runs = []
    for row in store.latest().values():
        if row.get("status") != "finished":
            continue
        run_dir = Path(row["run_dir"]) if row.get("run_dir") else None
        if run_dir is not None and not run_dir.is_absolute():
            run_dir = store.root / run_dir
        runs.append(
            Run(
                row["id"],
                dict(row.get("params", {})),
                dict(row["metrics"]),
                run_dir,
                row.get("wall_time_s"),
            )
        )
    return runs


def load_wandb_csv(path: str | Path) -> list[Run]:
    """Runs of a W&B project table exported as CSV (config and summary columns); only rows
    whose ``State`` is ``finished`` (or without a State column)."""
    runs = []
    with Path(path).open(newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            state = row.get("State") or row.get("state") or "finished"
            if state.lower() != "finished":
                continue
            values = {k: _parse(v) for k, v in row.items() if k}
            metrics = {k: v for k, v in values.items() if isinstance(v, (int, float)) and "/" in k}
            name = str(row.get("Name") or row.get("ID") or f"row{i}")
            runs.append(Run(name, values, metrics, None))
    return runs


def load_runs(source: str | Path) -> list[Run]:
    """Runs from a store folder / ``.jsonl`` or a W&B ``.csv`` export."""
    source = Path(source)
    if source.suffix == ".csv":
        return load_wandb_csv(source)
    return load_store(source)


def finite(x: Any) -> TypeGuard[float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
