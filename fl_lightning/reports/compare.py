"""Our runs against a paper table: group runs into the table's cells and compare.

Runs are labelled by a method (``--method-key``, mapped to the paper's names through
``--method-map`` and the paper's aliases) and an ε (``--eps-key``); the table's other dimensions
are fixed with ``--where`` (e.g. ``dataset=MNIST model=CNN``). Seeds of one cell are averaged.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from fl_lightning.reports.runs import Run, finite
from fl_lightning.reports.tables import Paper, PaperTable, normalize

EPS_KEYS = (
    "privacy.target_epsilon",
    "strategy.init_args.epsilon",
    "strategy.init_args.target_epsilon",
    "epsilon",
)
METHOD_KEYS = ("method", "strategy.class_path", "strategy", "strategy.init_args.variant")


@dataclass
class Cell:
    """One (method, ε) cell: our runs' summary and the paper's value."""

    method: str
    epsilon: float | None
    paper: float | None = None
    runs: list[Run] = field(default_factory=list)
    ours: list[float] = field(default_factory=list)
    measured_eps: list[float] = field(default_factory=list)

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.ours) if self.ours else None

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.ours) if len(self.ours) > 1 else None

    @property
    def eps_mean(self) -> float | None:
        return statistics.fmean(self.measured_eps) if self.measured_eps else None

    @property
    def difference(self) -> float | None:
        if self.mean is None or self.paper is None:
            return None
        return self.mean - self.paper


@dataclass
class Comparison:
    paper: Paper
    table: PaperTable
    where: dict[str, Any]
    metric: str
    scale: float
    method_key: str | None
    eps_key: str | None
    cells: list[Cell]
    unmatched_runs: int = 0

    def methods(self) -> list[str]:
        out: list[str] = []
        for c in self.cells:
            if c.method not in out:
                out.append(c.method)
        return out

    def epsilons(self) -> list[float | None]:
        return sorted({c.epsilon for c in self.cells}, key=lambda e: (e is None, e or 0))


def _auto_key(runs: list[Run], keys: tuple[str, ...]) -> str | None:
    for k in keys:
        if any(k in r.params for r in runs):
            return k
    return None


def run_method(run: Run, key: str | None, mapping: dict[str, str], paper: Paper, default: str):
    raw = run.get(key) if key else None
    if raw is None:
        return default
    text = str(raw)
    for k, v in mapping.items():
        if text == k or normalize(text) == normalize(k) or _num_eq(text, k):
            return paper.method_for(v) or v
    return paper.method_for(text) or text


def _num_eq(a: str, b: str) -> bool:
    try:
        return math.isclose(float(a), float(b))
    except ValueError:
        return False


def compare(
    runs: list[Run],
    paper: Paper,
    table: PaperTable,
    *,
    where: dict[str, Any] | None = None,
    metric: str | None = None,
    method_key: str | None = None,
    method_map: dict[str, str] | None = None,
    eps_key: str | None = None,
    default_method: str = "ours",
) -> Comparison:
    """Groups ``runs`` into (method, ε) cells of ``table`` restricted by ``where``."""
    where = dict(where or {})
    for k in where:
        if k not in table.dims:
            raise ValueError(f"--where {k}: table {table.id} has dimensions {list(table.dims)}")
    free = [d for d in table.dims if d not in where and d not in ("method", "epsilon")]
    selected = table.select(**where)
    ambiguous = [d for d in free if len({str(c.get(d)) for c in selected}) > 1]
    if ambiguous:
        levels = {d: sorted({str(c.get(d)) for c in selected}) for d in ambiguous}
        raise ValueError(
            "fix the table's other dimensions with --where: "
            + "; ".join(f"{d} in {v}" for d, v in levels.items())
        )
    if metric is None:
        metric = table.metric_columns.get(str(where.get("metric")), table.metric)
    method_key = method_key or _auto_key(runs, METHOD_KEYS)
    eps_key = eps_key or _auto_key(runs, EPS_KEYS)
    use_eps = "epsilon" in table.dims and "epsilon" not in where
    cells: dict[tuple[str, float | None], Cell] = {}
    for c in selected:
        eps = float(c["epsilon"]) if use_eps and c.get("epsilon") is not None else None
        key = (str(c.get("method", default_method)), eps)
        cells[key] = Cell(key[0], eps, paper=c["value"])
    values = [r.get(metric) for r in runs if finite(r.get(metric))]
    scale = 100.0 if table.unit == "%" and values and max(values) <= 1.0 else 1.0
    unmatched = 0
    for run in runs:
        value = run.get(metric)
        if not finite(value):
            unmatched += 1
            continue
        method = run_method(run, method_key, method_map or {}, paper, default_method)
        eps = None
        run_eps = run.get(eps_key) if use_eps and eps_key else None
        if finite(run_eps):
            eps = float(run_eps)
        key = (method, eps)
        if key not in cells:
            cells[key] = Cell(method, eps)
        cell = cells[key]
        cell.runs.append(run)
        cell.ours.append(float(value) * scale)
        measured = run.metrics.get("privacy/epsilon")
        if finite(measured):
            cell.measured_eps.append(float(measured))
    ordered = sorted(
        cells.values(),
        key=lambda c: (not c.runs, c.epsilon is None, c.epsilon or 0, c.method),
    )
    return Comparison(paper, table, where, metric, scale, method_key, eps_key, ordered, unmatched)


@dataclass
class Ranking:
    methods: list[str]
    ours: list[float]
    paper: list[float]
    tau: float | None
    p_value: float | None
    note: str = ""


def ranking(comp: Comparison) -> Ranking:
    """Methods ranked by ours and by the paper's values, averaged over the ε both have.

    Kendall τ (scipy.stats.kendalltau, τ-b) compares the two orders; it needs at least two
    methods in common. Lower-is-better tables are ranked ascending.
    """
    from scipy.stats import kendalltau

    both = [c for c in comp.cells if c.mean is not None and c.paper is not None]
    eps_sets: dict[str, set] = {}
    for c in both:
        eps_sets.setdefault(c.method, set()).add(c.epsilon)
    common = set.intersection(*eps_sets.values()) if eps_sets else set()
    methods = sorted(eps_sets)
    ours, paper = [], []
    for m in methods:
        cs = [c for c in both if c.method == m and c.epsilon in common]
        means = [c.mean for c in cs if c.mean is not None]
        papers = [c.paper for c in cs if c.paper is not None]
        ours.append(statistics.fmean(means) if means else math.nan)
        paper.append(statistics.fmean(papers) if papers else math.nan)
    keep = [i for i in range(len(methods)) if finite(ours[i]) and finite(paper[i])]
    methods = [methods[i] for i in keep]
    ours = [ours[i] for i in keep]
    paper = [paper[i] for i in keep]
    sign = 1 if comp.table.higher_is_better else -1
    order = sorted(range(len(methods)), key=lambda i: -sign * paper[i])
    methods = [methods[i] for i in order]
    ours = [ours[i] for i in order]
    paper = [paper[i] for i in order]
    if len(methods) < 2:
        return Ranking(methods, ours, paper, None, None, "fewer than two methods in common")
    res = kendalltau(ours, paper)
    tau = float(res.statistic)
    note = "" if finite(tau) else "undefined (ties)"
    return Ranking(methods, ours, paper, tau if finite(tau) else None, float(res.pvalue), note)
