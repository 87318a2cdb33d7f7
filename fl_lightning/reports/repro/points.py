"""The runs of a reproduction: the (arm, seed) points of its tables and of its tuning grid (a
point's id hashes its parameters, arm and config files), the grid value each tuned arm takes,
and the sweep runner that runs them and appends each finished point's curve to the store."""

from __future__ import annotations

import functools
import hashlib
import json
import statistics
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fl_lightning.reports.repro.definition import (
    Arm,
    Definition,
    ReproError,
    TableDef,
    claim_seeds,
)
from fl_lightning.reports.repro.provenance import rerunnable
from fl_lightning.reports.repro.stored import _pct, read_audit, read_curve
from fl_lightning.sweeps.runner import SweepRunner, logger_override
from fl_lightning.sweeps.spec import Point, SweepSpec, build_command, point_id
from fl_lightning.sweeps.store import ResultStore
from fl_lightning.utils.shared import find_shared_data  # noqa: F401  (one lookup, re-exported)

REPO = Path(__file__).resolve().parents[3]
SEED_KEY = "seed_everything"


def numeric_versions() -> dict[str, str]:
    """The versions of the libraries that decide a run's numerics (a row re-runs to the last
    digit with the same ones, the same threads and the same commit)."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for dist in ("torch", "numpy", "opacus", "lightning", "dp-accounting", "scipy"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out


def machine() -> dict[str, str]:
    """The processor a run computes on: its model name and the vector instruction set torch
    dispatches to (``torch.backends.cpu.get_cpu_capability``). The same commit, threads and
    versions give other float sums on another processor (AVX-512 against AVX2 kernels, MKL's
    code paths), so a row re-runs to the last digit on a machine with the same fingerprint."""
    import platform

    import torch

    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": name, "isa": str(torch.backends.cpu.get_cpu_capability())}


def processor_label(m: Any) -> str:
    """A recorded :func:`machine` as one phrase ("not recorded" for rows made before rows
    recorded it)."""
    return f"{m.get('cpu')} ({m.get('isa')})" if isinstance(m, dict) else "not recorded"


def _file_digest(paths: list[str]) -> str:
    return _digest(tuple(paths))


@functools.lru_cache(maxsize=256)
def _digest(paths: tuple[str, ...]) -> str:
    """The configs' text, hashed once per process (a point id is computed for every seed a
    report looks for)."""
    h = hashlib.sha1()
    for p in paths:
        f = Path(p) if Path(p).is_absolute() else REPO / p
        if not f.exists():
            raise ReproError(f"config: {p} does not exist")
        h.update(p.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


@dataclass
class ReproPoint:
    point: Point
    arm: Arm
    seed: int
    configs: list[str]
    variant: str = "{}"


def _repro_point(
    defn: Definition,
    arm: Arm,
    seed: int,
    extra: dict[str, Any],
    index: int,
    view: TableDef | None = None,
) -> ReproPoint:
    """One run: the arm's configs and overrides over the view's (a table's own setting, e.g.
    one epsilon column); an arm's own settings are the more specific ones."""
    cfgs = defn.base + arm.configs
    params = {**(view.overrides if view else {}), **arm.overrides, **extra, SEED_KEY: seed}
    salt = f"{defn.paper}:{defn.profile}:{arm.name}:{_file_digest(cfgs)}"
    pid = f"{arm.name}-s{seed}-{point_id(params, salt)}"
    variant = view.variant if view else "{}"
    return ReproPoint(Point(index, params, pid), arm, seed, cfgs, variant)


def plan(
    defn: Definition,
    *,
    seeds: int,
    extra: dict[str, Any],
    tables: list[TableDef],
    arm_seeds: bool = True,
) -> list[ReproPoint]:
    """The (arm, seed) points of ``tables`` (with their references, controls and positive
    controls), seed-major (every arm's seed 0 first, so a sweep stopped early has every arm).
    An arm runs ``seeds`` seeds, or its own ``seeds`` where that is more (headline arms) unless
    ``arm_seeds`` is false (an explicit ``--seeds N``: exactly N for every arm), counted from
    its ``first_seed``."""
    names: list[tuple[str, TableDef]] = []
    seen: set[tuple[str, str]] = set()
    for t in tables:
        for a in t.arms + t.extra_arms:
            if (a, t.variant) not in seen:
                seen.add((a, t.variant))
                names.append((a, t))

    def wanted(name: str) -> range:
        n = max(seeds, defn.arms[name].seeds or 0) if arm_seeds else seeds
        first = defn.arms[name].first_seed
        return range(first, first + n)

    most = max([seeds] + [wanted(n).stop for n, _ in names])
    out: list[ReproPoint] = []
    for seed in range(most):
        for name, view in names:
            if seed in wanted(name):
                out.append(_repro_point(defn, defn.arms[name], seed, extra, len(out), view))
    have = {rp.point.id for rp in out}
    labels = {t.label for t in tables}
    for i in range(len(defn.claims)):  # the fresh seeds of the confirmatory claims' plans
        for rp in claim_points(defn, i, extra, labels):
            if rp.point.id not in have:
                have.add(rp.point.id)
                out.append(replace(rp, point=replace(rp.point, index=len(out))))
    return out


def claim_arms(claim: dict[str, Any]) -> list[tuple[str, str]]:
    """The (table label, arm) pairs a claim compares (empty for ``peak`` and ``tracks``)."""
    if "pooled" in claim:
        return [(str(p["table"]), str(a)) for p in claim["pooled"] for a in (p["arm"], p["than"])]
    rule: Any = claim.get("better") or claim.get("lower")
    if "close" in claim:
        rule = {"arm": claim["close"]["arm"], "than": [claim["close"]["to"]]}
    if not isinstance(rule, dict):
        return []
    t = str(claim.get("table"))
    return [(t, str(rule["arm"]))] + [(t, str(b)) for b in rule.get("than") or []]


def claim_points(
    defn: Definition, i: int, extra: dict[str, Any], labels: set[str] | None = None
) -> list[ReproPoint]:
    """The points of a confirmatory claim's own seeds (``confirmatory: true`` and ``seeds:
    [...]``: fresh points run under its registered plan): each arm it compares at each seed,
    in the view of the claim's table (none for an exploratory claim, whose ``seeds`` only
    select among the stored runs, or for a table outside ``labels``)."""
    claim = defn.claims[i]
    seeds = claim_seeds(claim, f"claims[{i}]")
    if seeds is None or not claim.get("confirmatory"):
        return []
    views = {t.label: t for t in defn.tables}
    out: list[ReproPoint] = []
    for seed in sorted(seeds):
        for label, arm in claim_arms(claim):
            if label not in views or (labels is not None and label not in labels):
                continue
            out.append(_repro_point(defn, defn.arms[arm], seed, extra, len(out), views[label]))
    return out


def with_stored_seeds(
    defn: Definition,
    points: list[ReproPoint],
    store_ids: set[str],
    extra: dict[str, Any],
    *,
    limit: int = 64,
) -> list[ReproPoint]:
    """``points`` and, per (arm, view), the further seeds below ``limit`` the store holds (run
    with a larger ``--seeds`` than the definition's, or for an earlier plan): a report uses
    every seed stored for an arm, also where a claim's fresh seeds lie beyond a gap."""
    views = {t.variant: t for t in defn.tables}
    planned: dict[tuple[str, str], set[int]] = {}
    for rp in points:
        planned.setdefault((rp.arm.name, rp.variant), set()).add(rp.seed)
    out = list(points)
    for (name, variant), seeds in planned.items():
        for seed in range(limit):
            if seed in seeds:
                continue
            rp = _repro_point(defn, defn.arms[name], seed, extra, len(out), views.get(variant))
            if rp.point.id in store_ids:
                out.append(rp)
    return out


def tuning_points(
    defn: Definition, *, extra: dict[str, Any], arms: set[str] | None = None
) -> list[ReproPoint]:
    """The tuning grid's points (seed-major, then arm, then value); ``arms``: only these."""
    tune = defn.tune
    if tune is None:
        return []
    out: list[ReproPoint] = []
    for seed in range(tune.seeds):
        for name, values in tune.values.items():
            if arms is not None and name not in arms:
                continue
            base = defn.arms[name]
            for v in values:
                arm = replace(base, overrides={**base.overrides, tune.param: v})
                out.append(_repro_point(defn, arm, seed, extra, len(out)))
    return out


@dataclass
class TuneResult:
    arm: str
    method: str
    values: list[Any]
    scores: dict[str, list[float]]  # repr(value) -> the metric (%) of each finished seed
    chosen: Any = None
    runs: dict[str, dict[int, tuple[float, str]]] = field(default_factory=dict)
    """repr(value) -> seed -> (the metric, the point id)."""

    def mean(self, v: Any) -> float | None:
        got = self.scores.get(repr(v)) or []
        return statistics.fmean(got) if got else None


def choose(defn: Definition, tpoints: list[ReproPoint], store: ResultStore) -> list[TuneResult]:
    """Per tuned arm, the grid value with the best mean metric over its finished seeds (the
    first in grid order on a tie; None where no value finished), applied to the arm and its
    heirs in ``defn.arms`` (``defn.chosen`` records it)."""
    tune = defn.tune
    if tune is None:
        return []
    latest = store.latest()
    out = []
    for name, values in tune.values.items():
        res = TuneResult(name, defn.arms[name].method, values, {})
        for rp in tpoints:
            if rp.arm.name != name:
                continue
            row = latest.get(rp.point.id)
            v = _pct(((row or {}).get("metrics") or {}).get(tune.metric))
            if row and row.get("status") == "finished" and v is not None:
                key = repr(rp.arm.overrides[tune.param])
                res.scores.setdefault(key, []).append(v)
                res.runs.setdefault(key, {})[rp.seed] = (v, rp.point.id)
        scored = [(res.mean(v), -i, v) for i, v in enumerate(values) if res.mean(v) is not None]
        if scored:
            res.chosen = max(scored)[2]
            for a in [name, *tune.inherit[name]]:
                arm = defn.arms[a]
                defn.arms[a] = replace(arm, overrides={**arm.overrides, tune.param: res.chosen})
                defn.chosen[a] = res.chosen
        out.append(res)
    return out


class ReproRunner(SweepRunner):
    """The sweep runner with a command per arm and a curve per finished point."""

    def __init__(
        self,
        points: list[ReproPoint],
        store: ResultStore,
        *,
        name: str,
        data_root: str | None,
        threads: int = 1,
        plans: dict[str, str] | None = None,
        rerun: set[str] | None = None,
        elsewhere: str | None = None,
        **kw: Any,
    ) -> None:
        self.by_id = {rp.point.id: rp for rp in points}
        spec = SweepSpec(Path(name), "grid", {}, ["fl-lightning", "fit"], name=name)
        super().__init__(spec, store, **kw)
        self.data_root = data_root
        self.curves = store.root / "curves.jsonl"
        # torch's intra-op threads decide the float sums, so a row re-runs to the last digit
        # only with its own count: every point runs with it explicitly, and its row says so
        self.threads = threads
        self.extra_env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        self.plans = plans or {}  # point id -> the sha256 of the registered plan it serves
        # finished points whose row does not say how to re-run it (no threads, a +dirty
        # commit): run once more, a new attempt that records both (the old row stays)
        self.rerun = rerun or set()
        # with ``elsewhere`` (the reason): the ``rerun`` points run once more on this machine
        # even if their row says how to re-run it, because it was made on another processor
        self.elsewhere = elsewhere
        self.machine = machine()

    def _stale(self, point_id: str, last: dict[str, Any] | None) -> bool:
        if point_id not in self.rerun or last is None:
            return False
        if self.elsewhere is not None and last.get("machine") != self.machine:
            return True
        return not rerunnable(last)

    def pending(self, points: list[Point]) -> tuple[list[Point], int, int]:
        todo, done, failed = super().pending(points)
        latest = self.store.latest(self.spec.name)
        stale = [
            p
            for p in points
            if latest.get(p.id, {}).get("status") == "finished"
            and self._stale(p.id, latest.get(p.id))
        ]
        return todo + stale, done - len(stale), failed

    def claimable(self, point_id: str, last: dict[str, Any] | None, attempts: int) -> bool:
        if point_id not in self._mine and self._stale(point_id, last):
            return last is not None and last.get("status") == "finished"
        return super().claimable(point_id, last, attempts)

    def _running_row(self, point: Point, attempt: int) -> dict[str, Any]:
        row = super()._running_row(point, attempt)
        row["threads"] = self.threads
        row["versions"] = numeric_versions()
        row["machine"] = self.machine
        if self.elsewhere is not None and point.id in self.rerun:
            row["rerun_reason"] = self.elsewhere
        if point.id in self.plans:
            row["plan_sha256"] = self.plans[point.id]
        return row

    def command_for(self, point: Point, run_dir: Path) -> list[str]:
        rp = self.by_id[point.id]
        cmd = ["fl-lightning", "fit"]
        for c in rp.configs:
            cmd += ["--config", str(Path(c) if Path(c).is_absolute() else REPO / c)]
        if self.data_root is not None:
            cmd.append(f"--data.root={self.data_root}")
        cmd.append("${args}")
        spec = SweepSpec(self.spec.path, "grid", {}, cmd, name=self.spec.name)
        argv = build_command(spec, point.params)
        return argv + logger_override(run_dir, sweep=self.spec.name, point=point, wandb=False)

    def run_point(self, point: Point, claimed: dict[str, Any] | None = None) -> dict[str, Any]:
        row = super().run_point(point, claimed)
        if row.get("status") == "finished":
            curve: dict[str, Any] = read_curve(Path(row["run_dir"]))
            audit = read_audit(Path(row["run_dir"]), self.curves.parent / "images", point.id)
            if audit:  # metrics of an attack run at the end of fit (after summary.json)
                curve["audit"] = audit  # type: ignore[assignment]
            line = json.dumps({"id": point.id, "curve": curve}, sort_keys=True)
            with self._lock, self.curves.open("a") as f:
                f.write(line + "\n")
        return row
