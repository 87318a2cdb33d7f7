"""Our runs against a paper table: group runs into the table's cells and compare.

Runs are labelled by a method (``--method-key``, mapped to the paper's names through
``--method-map`` and the paper's aliases; several keys joined by commas label an arm defined by
two parameters, e.g. ``client.optimizer,strategy.init_args.anr`` with ``--method-map
adam,true=DPFL-AGN``) and an ε (``--eps-key``). ``--where`` fixes the table's other dimensions
(e.g. ``dataset=MNIST``) *and* filters our runs on the same value (a run's ``data.dataset``, or
any run parameter / resolved config key, e.g. ``client.lr=0.01``). Seeds of one cell are
averaged; runs of different settings (anything but the seed differing) are never pooled into
one cell: that is an error naming the keys to fix. A table with a single ε matches runs of any
ε label (their measured ε is shown).
"""

from __future__ import annotations

import json
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
SEED_KEYS = ("seed_everything", "seed", "data.seed", "model.seed")
# Where a table dimension lives in a run's parameters / resolved config.
DIM_KEYS = {
    "dataset": ("data.dataset", "dataset"),
    "model": ("client.net.class_path", "model"),
    "clients": ("data.num_clients", "clients"),
}
# A run's dataset name -> the paper's (normalised).
DATASET_ALIASES = {"mnistoffline": "mnist", "femnist": "femnist", "cifar10": "cifar10"}
VARIANT_WORDS = {"published": "", "paper": "", "corrected": "sound", "sound": "sound"}


@dataclass
class Cell:
    """One (method, ε) cell: our runs' summary and the paper's value."""

    method: str
    epsilon: float | None
    paper: float | None = None
    runs: list[Run] = field(default_factory=list)
    ours: list[float] = field(default_factory=list)
    measured_eps: list[float] = field(default_factory=list)
    setting: tuple = ()

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
    filtered_runs: int = 0

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
    for k in keys:  # not swept: from the runs' resolved configs
        if any(k in r.config for r in runs):
            return k
    return None


def _label(run: Run, key: str | None) -> str | None:
    """The run's method label: the value of ``key``, or of each comma-separated key joined
    with commas (an arm defined by several parameters)."""
    if not key:
        return None
    parts = [run.get(k.strip()) for k in key.split(",")]
    if all(p is None for p in parts):
        return None
    return ",".join(str(p) for p in parts)


def _same_label(text: str, pattern: str) -> bool:
    a, b = text.split(","), pattern.split(",")
    if len(a) != len(b):
        return False
    return all(x == y or normalize(x) == normalize(y) or _num_eq(x, y) for x, y in zip(a, b))


def run_method(
    run: Run,
    key: str | None,
    mapping: dict[str, str],
    paper: Paper,
    default: str,
    among: list[str] | None = None,
) -> str:
    """The paper's method name of a run: ``--method-map`` first, then the paper's names and
    aliases (the project's class and baseline names among them); a composite label maps through
    its method part, with a ``published`` variant as the method itself and a ``corrected`` /
    ``sound`` one as "<method> (sound)"."""
    text = _label(run, key)
    if text is None:
        return default
    for k, v in mapping.items():
        if _same_label(text, k):
            return paper.method_for(v, among) or v
    found = paper.method_for(text, among)
    if found:
        return found
    parts = text.split(",")
    methods = [paper.method_for(p, among) for p in parts]
    hits = [m for m in methods if m]
    if len(hits) == 1:
        rest = [p for p, m in zip(parts, methods) if not m]
        suffix = []
        for p in rest:
            word = VARIANT_WORDS.get(normalize(p))
            if word is None:
                suffix.append(p)
            elif word:
                suffix.append(word)
        return hits[0] + (f" ({', '.join(suffix)})" if suffix else "")
    return text


def run_value(run: Run, dim: str) -> Any:
    """A run's value of a table dimension or a parameter key (None when it does not say)."""
    value = run.get(dim)
    if value is not None:
        return value
    for key in DIM_KEYS.get(dim, ()):
        value = run.get(key)
        if value is not None:
            return value
    for k, v in run.setting().items():
        if k.endswith("." + dim):
            return v
    return None


def matches(value: Any, wanted: Any, dim: str) -> bool:
    """Whether a run's value equals a ``--where`` value (numbers as floats, names on letters and
    digits, dataset aliases such as ``mnist_offline`` = MNIST, class paths by class name)."""
    try:
        return math.isclose(float(value), float(wanted))
    except (TypeError, ValueError):
        pass
    a, b = normalize(value), normalize(wanted)
    if dim == "dataset":
        a, b = DATASET_ALIASES.get(a, a), DATASET_ALIASES.get(b, b)
    return a == b or normalize(str(value).rsplit(".", 1)[-1]) == b


def setting_key(run: Run, ignore: set[str]) -> tuple:
    """What defines a run's setting beyond the cell's labels: every parameter and resolved config
    value except the seed and the keys that label the cell."""
    items = []
    for k, v in sorted(run.setting().items()):
        if k in ignore or k in SEED_KEYS or k.startswith("trainer.logger"):
            continue
        items.append((k, json.dumps(v, sort_keys=True, default=str)))
    return tuple(items)


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
    table_where = {k: v for k, v in where.items() if k in table.dims}
    for k in where:
        if k not in table.dims and not any(r.get(k) is not None for r in runs):
            raise ValueError(
                f"--where {k}: neither a dimension of table {table.id} ({list(table.dims)}) nor "
                "a parameter of any run"
            )
    free = [d for d in table.dims if d not in where and d not in ("method", "epsilon")]
    selected = table.select(**table_where)
    if not selected:
        raise ValueError(f"--where: no cell of table {table.id} has {table_where}")
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
    eps_levels = {float(c["epsilon"]) for c in selected if c.get("epsilon") is not None}
    use_eps = "epsilon" in table.dims and "epsilon" not in where and len(eps_levels) > 1
    # --where filters our runs too: a run that says it has another value is left out.
    kept = []
    for run in runs:
        ok = True
        for dim, wanted in where.items():
            if dim == "epsilon":
                continue  # a run's ε label is the accountant's target, the paper's ε is printed
            value = run_value(run, dim)
            if value is not None and not matches(value, wanted, dim):
                ok = False
                break
        if ok:
            kept.append(run)
    filtered_out = len(runs) - len(kept)
    if runs and not kept:  # every run says it has another value: an empty table is no answer
        seen = {
            dim: sorted({str(v) for r in runs if (v := run_value(r, dim)) is not None})
            for dim in where
            if dim != "epsilon"
        }
        have = "; ".join(f"{d} in runs: {', '.join(v[:8])}" for d, v in seen.items() if v)
        raise ValueError(
            f"--where: 0 of {len(runs)} runs matched "
            + ", ".join(f"{k}={v}" for k, v in where.items() if k != "epsilon")
            + (f" ({have})" if have else "")
        )
    runs = kept
    cells: dict[tuple[str, float | None], Cell] = {}
    for c in selected:
        eps = float(c["epsilon"]) if use_eps and c.get("epsilon") is not None else None
        key = (str(c.get("method", default_method)), eps)
        cells[key] = Cell(key[0], eps, paper=c["value"])
    among = [str(c.get("method")) for c in selected]
    labels = {k.strip() for k in (method_key or "").split(",") if k.strip()}
    labels |= {eps_key} if eps_key and use_eps else set()
    labels |= set(where)
    values = [r.get(metric) for r in runs if finite(r.get(metric))]
    scale = 100.0 if table.unit == "%" and values and max(values) <= 1.0 else 1.0
    unmatched = 0
    for run in runs:
        value = run.get(metric)
        if not finite(value):
            unmatched += 1
            continue
        method = run_method(run, method_key, method_map or {}, paper, default_method, among)
        eps = None
        run_eps = run.get(eps_key) if use_eps and eps_key else None
        if finite(run_eps):
            eps = float(run_eps)
        key = (method, eps)
        if key not in cells:
            cells[key] = Cell(method, eps)
        cell = cells[key]
        signature = setting_key(run, labels)
        if cell.runs and signature != cell.setting:
            diff = sorted(
                {k for k, _ in set(signature) ^ set(cell.setting)}  # type: ignore[arg-type]
            )
            raise ValueError(
                f"runs of different settings fall into cell {method!r}"
                + (f" at ε {eps:g}" if eps is not None else "")
                + f": they differ in {', '.join(diff[:6])}; select one with --where KEY=VALUE "
                "or label them apart with --method-key"
            )
        cell.setting = signature
        cell.runs.append(run)
        cell.ours.append(float(value) * scale)
        measured = run.metrics.get("privacy/epsilon")
        if finite(measured):
            cell.measured_eps.append(float(measured))
    ordered = sorted(
        cells.values(),
        key=lambda c: (not c.runs, c.epsilon is None, c.epsilon or 0, c.method),
    )
    return Comparison(
        paper, table, where, metric, scale, method_key, eps_key, ordered, unmatched, filtered_out
    )


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
    # Ours at the two decimals the report prints: equal printed values are ties (τ-b).
    res = kendalltau([round(v, 2) for v in ours], paper)
    tau = float(res.statistic)
    note = "" if finite(tau) else "undefined (ties)"
    return Ranking(methods, ours, paper, tau if finite(tau) else None, float(res.pvalue), note)
