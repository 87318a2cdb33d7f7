"""Runs to report on: read from a sweep store (JSONL) or a W&B CSV export.

A :class:`Run` is what a report needs of a finished run: its parameters (the swept values, or
every config column of a W&B export), its final metrics, and the folder with its per-round
``metrics.csv`` (local runs only).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
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
    config: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        """A parameter, a metric or a value of the resolved config by key (in that order)."""
        if key in self.params:
            return self.params[key]
        if key in self.metrics:
            return self.metrics[key]
        return self.config.get(key)

    def setting(self) -> dict[str, Any]:
        """Everything that defines the run: its resolved config overlaid with its swept
        parameters."""
        return {**self.config, **self.params}

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
        elif run_dir is not None and not run_dir.exists() and len(run_dir.parts) >= 3:
            run_dir = store.root.joinpath(*run_dir.parts[-3:])  # a store moved or committed
        runs.append(
            Run(
                row["id"],
                dict(row.get("params", {})),
                dict(row["metrics"]),
                run_dir,
                row.get("wall_time_s"),
                dict(row.get("config") or {}),
            )
        )
    return runs


# Columns of a W&B project export that describe the run, not its setting.
WANDB_COLUMNS = {"Name", "State", "ID", "Notes", "User", "Tags", "Created", "Runtime", "Sweep",
                 "Hostname", "GPU Type", "GPU Count", "Group", "Job Type", "Updated",
                 "End Time", "Commit"}  # fmt: skip


def load_wandb_csv(path: str | Path) -> list[Run]:
    """Runs of a W&B project table exported as CSV; only rows whose ``State`` is ``finished``
    (or without a State column). A row holds three kinds of column, told apart here: the run's
    own (``WANDB_COLUMNS``: its name, state, runtime, ...; and W&B's ``_step``-like internals),
    its summary metrics (numbers under a ``group/name`` key such as ``test/accuracy``) and its
    config (everything else, e.g. ``client.lr``): only the config is the run's setting, so two
    seeds of one setting are averaged, not refused as different settings."""
    runs = []
    with Path(path).open(newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            state = row.get("State") or row.get("state") or "finished"
            if state.lower() != "finished":
                continue
            values = {k: _parse(v) for k, v in row.items() if k}
            metrics = {k: v for k, v in values.items() if isinstance(v, (int, float)) and "/" in k}
            params = {
                k: v
                for k, v in values.items()
                if k not in metrics and k not in WANDB_COLUMNS and not k.startswith("_")
            }
            name = str(row.get("Name") or row.get("ID") or f"row{i}")
            runs.append(Run(name, params, metrics, None))
    return runs


def load_runs(source: str | Path) -> list[Run]:
    """Runs from a store folder / ``.jsonl`` or a W&B ``.csv`` export."""
    source = Path(source)
    if source.suffix == ".csv":
        return load_wandb_csv(source)
    return load_store(source)


def finite(x: Any) -> TypeGuard[float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
