"""What a finished run leaves for the report: its per-round curve (``metrics.csv``), its
attacks' results (``audit.json`` and images), the ``curves.jsonl`` kept beside the store, and
a stored metric read as a number."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

from fl_lightning.sweeps.store import ResultStore

CURVE_COLUMNS = (
    "test/accuracy",
    "test/loss",
    "privacy/epsilon",
    "strategy/noise_multiplier",
    "strategy/anr_fired",
    "strategy/anr_loss",
    "strategy/abs_cos_mean",
    "strategy/mean_cosine",
    "strategy/cos_negative_fraction",
    "strategy/abs_cos_noise_only",
    "strategy/projected",
    # asynchronous local-DP strategies (paper 004): the simulated clock, exits, dispatches,
    # the paper's per-client ε and the sound one of a run that claims no guarantee
    "strategy/async/sim_time",
    "strategy/clients_exited",
    "strategy/dispatched",
    "strategy/eps_paper_max",
    "strategy/epsilon_sound",
    "strategy/weight_max",
    "strategy/frozen_total",
    # DP-FedASGP (paper 000): the sparse-vector selection against the λ_t quantile
    "strategy/threshold_level",
    "clients/selected_fraction",
    "clients/selection_recall",
)


def read_curve(run_dir: Path) -> dict[str, list]:
    """The per-round columns of a run's ``metrics.csv`` (rounds from 1)."""
    out: dict[str, list] = {"round": []}
    path = run_dir / "metrics.csv"
    if not path.exists():
        return out
    by_round: dict[int, dict[str, float]] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            idx = row.get("round/index") or row.get("step")
            if idx in (None, ""):
                continue
            values = by_round.setdefault(int(float(idx)) + 1, {})
            for c in CURVE_COLUMNS:
                if row.get(c) not in (None, ""):
                    values[c] = float(row[c])
    for r in sorted(by_round):
        out["round"].append(r)
        for c in CURVE_COLUMNS:
            out.setdefault(c, []).append(by_round[r].get(c))
    return {k: v for k, v in out.items() if any(x is not None for x in v) or k == "round"}


def read_audit(run_dir: Path, images: Path, point_id: str) -> dict[str, float]:
    """The numeric results of ``audit.json`` (written by the attacks' callback at the end of
    fit, after ``summary.json``) as ``audit/<attack>/<key>``; the attacks' PNG grids are copied
    into ``images/<point id>_<file>`` beside the store (the run folders are not kept)."""
    path = run_dir / "audit.json"
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}
    out: dict[str, float] = {}
    for attack, entry in (data.get("attacks") or {}).items():
        for k, v in (entry or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                out[f"audit/{attack}/{k}"] = float(v)
    for png in sorted(run_dir.glob("audit_*.png")):
        images.mkdir(parents=True, exist_ok=True)
        (images / f"{point_id}_{png.name}").write_bytes(png.read_bytes())
    return out


def load_curves(store: ResultStore) -> dict[str, dict[str, list]]:
    path = store.root / "curves.jsonl"
    out: dict[str, dict[str, list]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn last line of a killed run
            out[row["id"]] = row["curve"]
    return out


def _pct(x: Any) -> float | None:
    return None if not isinstance(x, (int, float)) or math.isnan(x) else 100.0 * float(x)


def _num(x: Any) -> float | None:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None
