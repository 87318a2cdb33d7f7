"""One table's cells: per arm, its finished runs of the table's view read from the store (the
metric over seeds, ε, guarantees, curves, metrics) beside the paper's value of that cell."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from fl_lightning.reports.repro.definition import Arm, Definition, TableDef
from fl_lightning.reports.repro.points import ReproPoint
from fl_lightning.reports.repro.provenance import rerunnable
from fl_lightning.reports.repro.stored import _num, _pct, load_curves
from fl_lightning.reports.tables import PaperTable
from fl_lightning.sweeps.store import ResultStore


@dataclass
class CellResult:
    arm: Arm
    paper: float | None
    values: list[float]
    eps: list[float]
    guarantees: list[str]
    curves: list[dict[str, list]]
    metrics: list[dict[str, Any]]
    planned: int
    extra_metrics: dict[str, str] = field(default_factory=dict)
    eps_infinite: int = 0  # finished runs whose accountant printed ε = ∞ (no guarantee)
    seeds: list[int] = field(default_factory=list)  # the seed of each value (same order)
    ids: list[str] = field(default_factory=list)  # the point id of each value (same order)
    diverged: int = 0  # finished runs whose test loss was NaN or infinite in some round
    provenance: list[str] = field(default_factory=list)  # each value's (same order)
    other_rows: list[dict[str, Any]] = field(default_factory=list)  # groups not pooled here

    def by_seed(self) -> dict[int, tuple[float, str]]:
        """seed -> (value, point id): what a paired test pairs."""
        return {s: (v, i) for s, v, i in zip(self.seeds, self.values, self.ids)}

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None


#: Per table label: its cells and its reference cell (None: the table has no reference arm).
TableResults = dict[str, tuple[list[CellResult], CellResult | None]]
#: Per table label: every arm's cell in the table's view (its arms, reference, controls and
#: positive control), by arm name.
ArmCells = dict[str, dict[str, CellResult]]


MIN_SEEDS = 3  # the standard's seeds a cell


def provenance_of(row: dict[str, Any]) -> str:
    """A row's provenance: the plan it ran under (its ``plan_sha256``, else none) and whether
    it says how to re-run it (threads and a clean commit recorded). Rows of different
    provenance are not pooled in one cell."""
    plan = str(row.get("plan_sha256") or "")[:12] or "no plan"
    return f"{plan}, {'re-runnable' if rerunnable(row) else 'no threads or a +dirty commit'}"


def _subset(c: CellResult, keep: list[int]) -> CellResult:
    pick = [c.values[i] for i in keep]
    ids = [c.ids[i] for i in keep]
    return replace(
        c,
        values=pick,
        seeds=[c.seeds[i] for i in keep],
        ids=ids,
        metrics=[c.metrics[i] for i in keep],
        curves=[c.curves[i] for i in keep],
        provenance=[c.provenance[i] for i in keep],
        eps=[
            float(m["privacy/epsilon"])
            for m in (c.metrics[i] for i in keep)
            if isinstance(m.get("privacy/epsilon"), (int, float))
            and math.isfinite(m["privacy/epsilon"])
        ],
        eps_infinite=sum(
            1
            for m in (c.metrics[i] for i in keep)
            if isinstance(m.get("privacy/epsilon"), (int, float))
            and not math.isfinite(m["privacy/epsilon"])
        ),
        guarantees=[
            str(m["privacy/guarantee"])
            for m in (c.metrics[i] for i in keep)
            if m.get("privacy/guarantee")
        ],
        diverged=sum(_diverged(c.curves[i], c.metrics[i]) for i in keep),
    )


def one_provenance(
    c: CellResult, registered: set[str] | frozenset[str] = frozenset()
) -> CellResult:
    """The cell a table shows: the rows of one provenance (:func:`provenance_of`), the first
    group with at least :data:`MIN_SEEDS` rows in this order: re-runnable rows of a registered
    claim plan (``registered``: their sha256 prefixes), other re-runnable rows, the rest
    (else, while re-runs are under way, every row, its provenance marked mixed). The other
    groups are listed in ``other_rows`` (n, mean), not pooled. Verdicts pair by seed over
    every row (each test names its runs)."""
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(c.provenance):
        groups.setdefault(p, []).append(i)
    if len(groups) <= 1:
        return c

    def rank(key: str) -> tuple[int, int]:
        plan, _, rest = key.partition(", ")
        clean = rest == "re-runnable"
        return (0 if clean and plan in registered else 1 if clean else 2, -len(groups[key]))

    order = sorted(groups, key=rank)
    chosen = next((k for k in order if len(groups[k]) >= MIN_SEEDS), None)
    if chosen is None:  # mid re-run: no provenance has the standard's seeds yet; say so
        mixed = "; ".join(f"{k} ({len(groups[k])} rows)" for k in order)
        return replace(c, provenance=[f"mixed (re-runs in progress): {mixed}"] * len(c.values))
    out = _subset(c, groups[chosen])
    out.other_rows = [
        {
            "provenance": k,
            "n": len(groups[k]),
            "seeds": sorted(c.seeds[i] for i in groups[k]),
            "mean": round(statistics.fmean(c.values[i] for i in groups[k]), 3),
        }
        for k in order
        if k != chosen
    ]
    return out


def _diverged(curve: dict[str, Any], metrics: dict[str, Any]) -> bool:
    losses = [x for x in (curve or {}).get("test/loss", []) if x is not None]
    final = metrics.get("test/loss")
    if isinstance(final, (int, float)):
        losses.append(final)
    return any(not math.isfinite(float(x)) for x in losses)


def collect(
    defn: Definition,
    points: list[ReproPoint],
    store: ResultStore,
    table: TableDef,
    paper_table: PaperTable,
    metric: str,
    *,
    latest: dict[str, dict[str, Any]] | None = None,
    curves: dict[str, dict[str, list]] | None = None,
    extras: dict[str, CellResult] | None = None,
    registered: set[str] | frozenset[str] = frozenset(),
) -> tuple[list[CellResult], CellResult | None]:
    """The table's cells and reference, each of one provenance (:func:`one_provenance`;
    ``registered``: the sha256 prefixes of the registered claim plans); ``extras`` (if given)
    receives every arm's cell of the view with all its rows, by arm name: the table's arms,
    its reference, controls and positive control (what the verdicts pair)."""
    latest = store.latest() if latest is None else latest
    curves = load_curves(store) if curves is None else curves
    metric = table.metric or metric  # the table's own metric (e.g. an attack's) wins

    def cell(arm_name: str, paper: float | None, metric: str = metric) -> CellResult:
        arm = defn.arms[arm_name]
        mine = [rp for rp in points if rp.arm.name == arm_name and rp.variant == table.variant]
        res = CellResult(arm, paper, [], [], [], [], [], len(mine), dict(table.extra_metrics))
        for rp in mine:
            row = latest.get(rp.point.id)
            if not row or row.get("status") != "finished":
                continue
            curve: dict[str, Any] = curves.get(rp.point.id) or {}
            m = {**(row.get("metrics") or {}), **(curve.get("audit") or {})}
            m["_point_id"] = rp.point.id
            raw = m.get(metric)
            v = _pct(raw) if table.percent else _num(raw)
            if v is None:
                continue
            res.values.append(v)
            res.seeds.append(rp.seed)
            res.ids.append(rp.point.id)
            res.diverged += _diverged(curve, m)
            res.metrics.append(m)
            eps = m.get("privacy/epsilon")
            if isinstance(eps, (int, float)) and math.isfinite(eps):  # inf: non-private
                res.eps.append(float(eps))
            elif isinstance(eps, (int, float)):
                res.eps_infinite += 1
            if m.get("privacy/guarantee"):
                res.guarantees.append(str(m["privacy/guarantee"]))
            res.curves.append(curve)
            res.provenance.append(provenance_of(row))
        return res

    out = []
    for a in table.arms:
        name = table.paper_method.get(a, defn.arms[a].method)
        if a in table.paper_cells:
            hits = paper_table.select(**{**table.where, **table.paper_cells[a]})
        else:
            hits = paper_table.select(
                method=name,
                **{**table.where, **defn.arms[a].where, **table.paper_where.get(a, {})},
            )
        paper = hits[0]["value"] if len(hits) == 1 else None
        res = cell(a, paper)
        if name not in ("-", res.arm.method) and paper is not None and a not in table.paper_where:
            res.arm = replace(res.arm, method=name)  # the paper's name in this table
        out.append(res)
    ref = None
    if table.reference:
        ref = cell(table.reference, None, table.reference_metric or metric)
    if extras is not None:
        extras.update({c.arm.name: c for c in out})
        for a in [x for x in (*table.controls, table.positive_control) if x]:
            if a not in extras:
                extras[a] = cell(a, None)
        if ref is not None and ref.arm.name not in extras:  # its own metric (e.g. accuracy)
            extras[ref.arm.name] = ref
    shown = [one_provenance(c, registered) for c in out]
    return shown, None if ref is None else one_provenance(ref, registered)
