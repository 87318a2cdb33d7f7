"""An arm's whole setting as flat ``section.key`` entries (its config files in order, then the
view's and the arm's overrides) and the keys in which two arms' settings differ: what a table's
reference shares with its private arms (``same_setting_except``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fl_lightning.reports.repro.definition import Arm, Definition, TableDef

REPO = Path(__file__).resolve().parents[3]
# keys that say how a run is set up rather than how private it is: a reference that differs
# from the private arms in one of them is not in the same setting
SETTING_KEYS = (
    "data.",
    "client.net",
    "model.clients_per_round",
    "model.client_rate",
    "trainer.max_steps",
    "client.local_epochs",
    "client.local_steps",
)
IGNORED = ("seed_everything",)


def _flatten(obj: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(obj, dict) and obj:
        if "class_path" in obj and out.get(prefix + "class_path") != obj["class_path"]:
            for k in [k for k in out if k.startswith(prefix + "init_args.")]:
                del out[k]  # a new class: the previous class's arguments no longer apply
        for k, v in obj.items():
            _flatten(v, f"{prefix}{k}.", out)
    else:
        out[prefix.rstrip(".")] = obj


def _set(out: dict[str, Any], key: str, value: Any) -> None:
    if key.endswith("class_path") and out.get(key) != value:
        base = key[: -len("class_path")]
        for k in [k for k in out if k.startswith(base + "init_args.")]:
            del out[k]
    for k in [k for k in out if k.startswith(key + ".") or k == key]:
        if not (isinstance(value, dict) and "class_path" not in value and k != key):
            del out[k]  # a value replaces what was under its key (a mapping merges into it)
    if isinstance(value, dict):
        _flatten(value, key + ".", out)
    else:
        out[key] = value


def flat_setting(
    defn: Definition, arm: Arm, view: TableDef | None = None, root: Path = REPO
) -> dict[str, Any]:
    """``section.key -> value`` of the arm's run: the base and arm configs in order, then the
    view's overrides and the arm's (as the runs apply them)."""
    out: dict[str, Any] = {}
    for c in defn.base + arm.configs:
        path = Path(c) if Path(c).is_absolute() else root / c
        if path.exists():
            for k, v in (yaml.safe_load(path.read_text()) or {}).items():
                _set(out, str(k), v)
    for k, v in {**(view.overrides if view else {}), **arm.overrides}.items():
        _set(out, str(k), v)
    for k in IGNORED:
        out.pop(k, None)
    return out


def differing_keys(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The keys whose values differ (or that only one side sets), sorted."""
    return sorted(k for k in set(a) | set(b) if a.get(k, object()) != b.get(k, object()))


def same_setting_except(defn: Definition, table: TableDef, reference: str) -> dict[str, Any]:
    """Where ``reference`` differs from the table's private arms (union over the arms):
    ``keys`` (all), ``setting_keys`` (those that change the setting, not the privacy: data,
    model, cohort, steps; must be empty for a same-setting reference) and per arm."""
    ref = flat_setting(defn, defn.arms[reference], table)
    per: dict[str, list[str]] = {}
    for name in table.arms:
        if name == reference:
            continue
        per[name] = differing_keys(ref, flat_setting(defn, defn.arms[name], table))
    keys = sorted({k for ks in per.values() for k in ks})
    return {
        "keys": keys,
        "setting_keys": [k for k in keys if k.startswith(SETTING_KEYS)],
        "per_arm": per,
    }
