"""Registered analysis plans: each claim's plan frozen, hashed and committed *before* its runs.

A claim's **plan** is everything that decides its verdict: the arms it compares (with the ids of
the points it will use: an id hashes the arm's overrides, tuned value, seed and config files),
its seeds, the reading (``published``: the paper's algorithm as printed; ``variant``: an
implementer's reading), the test (paired t by seed, 95 % interval; for a pooled claim the
columns it pools, each tested on its own), the scope, the paper's value, the null value and a
minimum activity of the mechanism where the plan requires one.

``fl-lightning repro P --register`` writes every claim's plan and its sha256 into the
definition's registry ``repro_specs/<paper>.<profile>.plans.json`` with the commit of the
definition and the time. The runner then records in every row it adds the ``plan_sha256`` of
the plan whose points it ran, and a verdict is **confirmatory** only when every run it uses
was made under its registered plan after registration (:func:`confirmatory`); otherwise it is
exploratory and says so. A plan changed after registration is registered anew: the old entry
stays in the registry (``superseded``), with the verdict it had then, and the report lists it
as a deviation beside the new one."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fl_lightning.reports.repro.definition import READINGS, Definition, ReproError, claim_seeds
from fl_lightning.reports.repro.points import ReproPoint, claim_points
from fl_lightning.reports.repro.rules import rules_at, rules_id

PAIRED = "paired t (by seed), 95 % CI"
POOLED = "paired t (by seed), pooled over columns, each column also tested alone"


def registry_path(defn: Definition, definition: Path) -> Path:
    """``<paper>.<profile>.plans.json`` beside the definition file (the shipped ones:
    ``repro_specs/``)."""
    return definition.parent / f"{defn.paper}.{defn.profile}.plans.json"


def claim_plan(defn: Definition, i: int, points: list[ReproPoint]) -> dict[str, Any]:
    """The frozen analysis plan of ``defn.claims[i]`` (``points``: the claim's own points,
    :func:`~fl_lightning.reports.repro.points.claim_points`)."""
    c = defn.claims[i]
    where = f"claims[{i}]"
    reading = c.get("reading")  # checked when the definition loads (None: not stated)
    rule = {k: c[k] for k in ("better", "lower", "close", "pooled", "peak", "tracks") if k in c}
    seeds = claim_seeds(c, where)
    return {
        "paper": defn.paper,
        "profile": defn.profile,
        "claim": str(c.get("claim")),
        "headline": bool(c.get("headline")),
        "table": c.get("table"),
        "rule": rule,
        "seeds": sorted(seeds) if seeds is not None else None,
        "points": sorted(rp.point.id for rp in points),
        "reading": reading,
        "reading_note": str(c.get("reading_note", "")),
        "test": POOLED if "pooled" in c else PAIRED,
        "scope": str(c.get("scope", "value")),
        "paper_value": c.get("paper_value"),
        "null_value": float(c.get("null_value", 0.0)),
        "min_activity": c.get("min_activity"),
    }


def plan_sha256(plan: dict[str, Any]) -> str:
    text = json.dumps(plan, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def load_registry(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ReproError(f"{path.name}: not JSON ({err})") from None
    return list(data.get("plans") or [])


def current_plans(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """claim text -> its current (not superseded) registry entry."""
    return {e["claim"]: e for e in entries if e.get("status") == "current"}


def point_plans(entries: list[dict[str, Any]]) -> dict[str, str]:
    """point id -> the sha256 of the current plan that will use it (rows record it)."""
    out: dict[str, str] = {}
    for e in entries:
        if e.get("status") == "current":
            for pid in e["plan"].get("points") or []:
                out[pid] = e["sha256"]
    return out


def register(
    defn: Definition,
    plans: list[dict[str, Any]],
    path: Path,
    commit: str,
    *,
    old_verdicts: dict[str, dict[str, Any]] | None = None,
    now: datetime | None = None,
) -> tuple[int, int, int]:
    """Registers ``plans`` (one per claim, in order) in ``path``: a plan already registered
    with the same sha256 is kept; a claim whose plan changed has its entry superseded (kept,
    with ``old_verdicts[claim]``, the verdict its report showed then) and the new plan added.
    Refuses a point that two current plans would use. Returns (new, unchanged, superseded)."""
    if commit.endswith("+dirty"):
        raise ReproError(
            "--register: the checkout has uncommitted changes; commit the definition first "
            "so that registered_commit names the plans' code"
        )
    stamp = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    entries = load_registry(path)
    cur = current_plans(entries)
    new = same = superseded = 0
    owner: dict[str, str] = {}
    for plan in plans:
        sha = plan_sha256(plan)
        for pid in plan["points"]:
            if pid in owner and owner[pid] != plan["claim"]:
                raise ReproError(
                    f"claims: point {pid} would serve two plans ({owner[pid]!r} and "
                    f"{plan['claim']!r}); give the claims different seeds"
                )
            owner[pid] = plan["claim"]
        old = cur.get(plan["claim"])
        if old is not None and old["sha256"] == sha:
            same += 1
            continue
        if old is not None:
            old["status"] = "superseded"
            old["superseded_at"] = stamp
            if old_verdicts and plan["claim"] in old_verdicts:
                old["verdict_then"] = old_verdicts[plan["claim"]]
            superseded += 1
        entries.append(_entry(plan["claim"], sha, commit, stamp, plan))
        new += 1
    _write_registry(path, defn, entries)
    return new, same, superseded


RERUN = "re-run"


def register_reruns(
    defn: Definition,
    point_ids: list[str],
    path: Path,
    commit: str,
    *,
    now: datetime | None = None,
) -> tuple[str, int]:
    """Registers, before they run, the re-runs of stored rows that do not say how to re-run
    them (no ``threads``, a ``+dirty`` commit): one exploratory plan listing the points, so
    that each new row records the plan it ran under (``plan_sha256``). The verdicts that use
    these rows stay exploratory (their seeds were seen before). A later call adds the points
    not yet listed as a further plan. Returns (sha256, points newly listed)."""
    if commit.endswith("+dirty"):
        raise ReproError("--register: the checkout has uncommitted changes; commit first")
    entries = load_registry(path)
    owned = set(point_plans(entries))
    new = sorted(set(point_ids) - owned)
    if not new:
        return "", 0
    stamp = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    plan = {
        "paper": defn.paper,
        "profile": defn.profile,
        "kind": RERUN,
        "confirmatory": False,
        "why": "rows stored without a recorded thread count or at a +dirty commit, run "
        "again at a clean commit with threads recorded (same points: arm, seed, configs)",
        "points": new,
    }
    sha = plan_sha256(plan)
    entries.append(_entry(f"{RERUN} {sha[:12]}", sha, commit, stamp, plan))
    _write_registry(path, defn, entries)
    return sha, len(new)


def _entry(claim: str, sha: str, commit: str, stamp: str, plan: dict[str, Any]) -> dict[str, Any]:
    """One current plan of the registry: its claim, hash, commit and time of registration."""
    return {
        "claim": claim,
        "sha256": sha,
        "registered_commit": commit,
        "registered_at": stamp,
        "status": "current",
        "plan": plan,
    }


def _write_registry(path: Path, defn: Definition, entries: list[dict[str, Any]]) -> None:
    """Writes the paper's plan registry (``repro_specs/P.<profile>.plans.json``)."""
    path.write_text(
        json.dumps(
            {"paper": defn.paper, "profile": defn.profile, "plans": entries},
            indent=1,
            ensure_ascii=False,
            default=str,
        )
        + "\n"
    )


def _time(s: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(s).replace("Z", "+00:00"))
    except ValueError:
        return None


def confirmatory(
    entry: dict[str, Any], runs: list[str], rows: dict[str, dict[str, Any]]
) -> tuple[bool, str]:
    """Whether a verdict over ``runs`` is confirmatory under its registered ``entry``: every
    run is a finished store row made under the plan (its ``plan_sha256``) at or after
    registration, and the verdict uses every such row of its arms. The second item says why
    not (empty when it is)."""
    if not runs:
        return False, "no runs"
    t0 = _time(entry["registered_at"])
    for r in runs:
        row = rows.get(r)
        if row is None:
            return False, f"run {r} is not a finished store row"
        if row.get("plan_sha256") != entry["sha256"]:
            return False, f"run {r} was not made under the registered plan"
        started = _time(row.get("started_at") or row.get("finished_at"))
        if t0 is None or started is None or started < t0:
            return False, f"run {r} started before the plan was registered"
    mine = {
        rid
        for rid, row in rows.items()
        if row.get("plan_sha256") == entry["sha256"] and row.get("status") == "finished"
    }
    left = sorted(mine - set(runs))
    if left:
        return False, f"runs of its plan left out: {left[:4]}"
    return True, ""


def annotate(
    defn: Definition,
    verdict_rows: list[dict[str, Any]],
    entries: list[dict[str, Any]],
    plans_now: dict[str, dict[str, Any]],
    rows: dict[str, dict[str, Any]],
) -> list[dict[str, Any]]:
    """Adds to each verdict its reading, its registered plan and whether it is confirmatory
    (``plans_now``: claim -> the plan computed from the definition now; a plan that differs
    from the registered one is not registered). Returns the superseded plans (deviations)."""
    cur = current_plans(entries)
    by_claim = {str(c.get("claim")): c for c in defn.claims}
    for v in verdict_rows:
        claim = by_claim.get(v["claim"], {})
        v["reading"] = claim.get("reading")
        if claim.get("reading") == "published" and "gaps_filled" in claim:
            v["gaps_filled"] = [str(g) for g in claim["gaps_filled"] or []]
        e, now = cur.get(v["claim"]), plans_now.get(v["claim"])
        if e is None or now is None or e["sha256"] != plan_sha256(now):
            v["plan"] = None
            v["confirmatory"] = False
            v["confirmatory_note"] = (
                "its plan is not registered"
                if e is None
                else "its plan changed after registration (register it again)"
            )
            continue
        v["plan"] = {k: e[k] for k in ("sha256", "registered_commit", "registered_at")}
        v["plan"]["rules"] = rules_at(str(e["registered_commit"]))
        runs = v.get("runs") or [
            r for r in v.get("runs_inspected") or [] if r in set(e["plan"].get("points") or [])
        ]
        ok, why = confirmatory(e, runs, rows)
        v["confirmatory"] = ok
        if not ok:
            v["confirmatory_note"] = why
    return [
        {k: e.get(k) for k in ("claim", "sha256", "registered_at", "superseded_at", "verdict_then")}
        for e in entries
        if e.get("status") == "superseded"
    ] + rule_changes(defn, verdict_rows, rules_id())


def rule_changes(
    defn: Definition, verdict_rows: list[dict[str, Any]], now: str
) -> list[dict[str, Any]]:
    """A deviation for every confirmatory verdict whose plan was registered under other rules
    (:mod:`~fl_lightning.reports.repro.rules`) than the report's ``now``: the label the
    registered rules gave (the claim's ``registered_label`` in the definition, recorded for
    those rules) beside the label shown, with the reason for the change."""
    by_claim = {str(c.get("claim")): c for c in defn.claims}
    out = []
    for i, v in enumerate(verdict_rows):
        then = (v.get("plan") or {}).get("rules")
        if not v.get("confirmatory") or then is None or then == now:
            continue
        rec = by_claim.get(v["claim"], {}).get("registered_label") or {}
        known = rec.get("rules") == then
        out.append(
            {
                "verdict": i + 1,
                "claim": v["claim"],
                "rules_registered": then,
                "rules_now": now,
                "registered_label": rec["label"] if known else "not recorded",
                "label": v["verdict"],
                "reason": rec.get("reason", "")
                if known
                else f"the claim logic changed ({then} -> {now}) and the definition records no "
                "label under the registered rules",
            }
        )
    return out


__all__ = [
    "annotate",
    "POOLED",
    "PAIRED",
    "READINGS",
    "claim_plan",
    "claim_points",
    "confirmatory",
    "current_plans",
    "load_registry",
    "plan_sha256",
    "point_plans",
    "register",
    "register_reruns",
    "registry_path",
]
