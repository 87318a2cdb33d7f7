"""``fl-lightning repro``: reproduce a paper's tables with one command.

Usage::

    fl-lightning repro PAPER [--table T] [--profile scaled|paper] [--seeds N] [--jobs J]
        [--store DIR] [--out DIR] [--set KEY=VALUE ...] [--report-only] [--dry-run]

A paper's reproduction is defined in ``fl_lightning/reports/repro_specs/<paper>.yaml``: its
*arms* (a method label, config files and overrides, per profile), its *tables* (which arms, the
paper's table in ``paper_tables/<paper>.json``, the non-private reference arm), its *claims*
(how a verdict is computed) and its *deviations* from the paper. The command

1. runs every (arm, seed) point of the chosen tables as ``fl-lightning fit`` subprocesses through
   the sweep runner, against an append-only store (``docs/reproductions/store/<paper>-<profile>/
   results.jsonl``); a point already finished there is not run again, a killed command resumes
   where it stopped, and each finished point's per-round curve is appended to ``curves.jsonl``
   beside the store (the run folders under ``runs/`` are not needed afterwards);
2. writes ``<out>/<paper>.json`` (the machine-readable result), ``<out>/<paper>.md`` and PNG
   plots beside them (accuracy vs round per method; ε vs round; accuracy vs ε where the table has
   an ε axis).

A point's id hashes its parameters, its arm and the text of its config files, so a changed arm
never reuses (or pools with) results of another setting. With every point finished the command
only regenerates the documents (seconds).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import re
import signal
import statistics
import sys
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from fl_lightning.reports.tables import PaperTable, list_papers, load_paper
from fl_lightning.sweeps.runner import SweepRunner, logger_override
from fl_lightning.sweeps.spec import Point, SweepSpec, build_command, point_id
from fl_lightning.sweeps.store import ResultStore

PROFILES = ("scaled", "paper")
REPO = Path(__file__).resolve().parents[2]
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
VERDICTS = ("confirmed", "contradicted", "inconclusive")
# the diagnostic columns of a table in the Markdown (key of ``_diagnostics``, header, decimals)
DEFAULT_COLUMNS = [
    {"key": "rounds_mean", "header": "Rounds", "digits": 1},
    {"key": "anr_fired_mean", "header": "ANR firings", "digits": 1},
    {"key": "final_noise_multiplier_mean", "header": "Final σ", "digits": 3},
]
# asynchronous local DP (paper 004): shown when a table's runs log them
BUDGET_COLUMNS = [
    {"key": "clients_exited_mean", "header": "Clients exited", "digits": 1},
    {"key": "last_round_dispatched_mean", "header": "Uploads in the last round", "digits": 1},
    {"key": "epsilon_paper_max_mean", "header": "Paper ε spent (max)", "digits": 3},
    {"key": "weight_max_mean", "header": "Largest weight of one upload", "digits": 3},
    {"key": "epsilon_frozen_mean", "header": "Uploads with ε frozen", "digits": 1},
]
_DIGITS = {"rounds_mean": 1, "anr_fired_mean": 1}  # decimals of a column given as key: header
PLOT_KINDS = ("accuracy_vs_round", "accuracy_vs_epsilon", "selection")
SEED_KEY = "seed_everything"
ALPHA = 0.05


class ReproError(ValueError):
    """A bad definition or argument (the message is one line: ``<field>: <why>``)."""


# -- the definition ---------------------------------------------------------------------------
@dataclass
class Arm:
    name: str
    method: str
    configs: list[str]
    overrides: dict[str, Any]
    note: str = ""
    where: dict[str, Any] = field(default_factory=dict)  # the arm's own paper cell (e.g. its ε)
    paper_epsilon: float | None = None  # the paper's ε this arm stands for (printed beside ours)


@dataclass
class TableDef:
    """One table of the report. ``table`` is the paper's table id; ``label`` names this view of
    it (several views of one paper table, e.g. one per client count, each with its own
    ``overrides`` applied to every arm of the view). ``metric`` / ``percent`` / ``unit`` replace
    the paper table's metric (e.g. an attack's SSIM, not a percentage); ``paper_cells`` selects
    an arm's paper cell by dimensions instead of by method; ``extra_metrics`` maps a diagnostic
    name to a run metric (mean over seeds); ``columns`` the diagnostics shown (key: header)."""

    table: str
    where: dict[str, Any]
    arms: list[str]
    reference: str | None
    paper_method: dict[str, str] = field(default_factory=dict)
    note: str = ""
    # our name of the table (default: the paper's); one paper table may be reproduced at
    # several settings (e.g. one per epsilon column or per reading), each under its own label
    label: str = ""
    overrides: dict[str, Any] = field(default_factory=dict)
    metric: str | None = None
    percent: bool = True
    unit: str = "test accuracy (%)"
    paper_cells: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra_metrics: dict[str, str] = field(default_factory=dict)
    columns: list[dict[str, Any]] | None = None  # None: the definition's columns
    images: list[str] = field(default_factory=list)
    kind: str = "accuracy"
    paper_where: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per arm, more ``dim: value`` of the paper's cell (e.g. the arm's ε in a table with an
    ε axis), over the table's ``where``."""

    reference_metric: str | None = None  # the reference's metric (default: ``metric``)
    plots: list[str] | None = None  # PLOT_KINDS drawn for arms with a paper ε (000)

    def __post_init__(self) -> None:
        self.label = self.label or self.table

    @property
    def variant(self) -> str:
        """The identity of this view's overrides (points of equal variant are shared)."""
        return json.dumps(self.overrides, sort_keys=True, default=str)


@dataclass
class TuneDef:
    """A per-arm grid search run before the tables: each tuned arm runs ``seeds`` seeds at
    every value of ``param``; the value with the best mean ``metric`` becomes that arm's
    setting (and that of the arms that ``inherit`` it). A tuning point at the chosen value is
    the table's point of the same seed (same id), so it is not run twice."""

    param: str
    values: dict[str, list[Any]]  # tuned arm -> its grid
    inherit: dict[str, list[str]]  # tuned arm -> arms that take its chosen value
    seeds: int = 1
    metric: str = "test/accuracy"
    note: str = ""


@dataclass
class PlotDef:
    """A per-round curve plotted per table (mean over seeds), e.g. a strategy's diagnostic."""

    column: str
    ylabel: str
    stem: str
    log: bool = False
    reference_column: str | None = None  # drawn as a grey dotted line (mean over runs)
    reference_label: str = ""
    fraction: bool = False  # x = round / the arm's last round (arms with different round counts)
    xlabel: str = ""


@dataclass
class Definition:
    paper: str
    title: str
    profile: str
    base: list[str]
    arms: dict[str, Arm]
    tables: list[TableDef]
    claims: list[dict[str, Any]]
    deviations: list[dict[str, str]]
    notes: list[str]
    data_root: str | None
    seeds: int
    tune: TuneDef | None = None
    plots: list[PlotDef] = field(default_factory=list)
    columns: list[dict[str, Any]] = field(default_factory=list)
    chosen: dict[str, Any] = field(default_factory=dict)  # arm -> tuned value (filled by main)


def _columns(raw: Any, where: str) -> list[dict[str, Any]]:
    """Diagnostic columns, written as a list of ``{key, header, digits}`` or as a mapping
    ``key: header`` (digits: 1 for counts of rounds and firings, else 3)."""
    if isinstance(raw, dict):
        return [
            {"key": str(k), "header": str(h), "digits": _DIGITS.get(str(k), 3)}
            for k, h in raw.items()
        ]
    if isinstance(raw, list) and all(isinstance(c, dict) and "key" in c for c in raw):
        return [{"header": c["key"], **c} for c in raw]
    raise ReproError(f"{where}: expected a list of {{key, header, digits}} or a key: header map")


def definition_path(paper: str) -> Path:
    return Path(str(resources.files("fl_lightning.reports") / "repro_specs" / f"{paper}.yaml"))


def _need(raw: dict[str, Any], key: str, where: str, kind: type | tuple[type, ...]) -> Any:
    if key not in raw:
        raise ReproError(f"{where}.{key}: missing")
    if not isinstance(raw[key], kind):
        raise ReproError(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}")
    return raw[key]


def load_definition(paper: str, profile: str, path: Path | None = None) -> Definition:
    """The reproduction of ``paper`` (an id of ``paper_tables``) in ``profile``."""
    if profile not in PROFILES:
        raise ReproError(f"--profile: expected one of {', '.join(PROFILES)}, got {profile!r}")
    pid = load_paper(paper).id
    path = path or definition_path(pid)
    if not path.exists():
        have = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ReproError(f"PAPER: no reproduction defined for paper {pid} (defined: {have})")
    raw = yaml.safe_load(path.read_text())
    where = path.name
    profiles = _need(raw, "profiles", where, dict)
    if profile not in profiles:
        raise ReproError(f"--profile: {where} defines {sorted(profiles)}, not {profile!r}")
    prof = profiles[profile] or {}
    base = prof.get("base", [])
    base = [base] if isinstance(base, str) else list(base)
    arms: dict[str, Arm] = {}
    for name, a in _need(raw, "arms", where, dict).items():
        a = a or {}
        per = (a.get("profiles") or {}).get(profile) or {}
        cfgs = list(a.get("configs", [])) + list(per.get("configs", []))
        overrides = {**(prof.get("overrides") or {}), **(a.get("overrides") or {})}
        overrides.update(per.get("overrides") or {})
        pe = a.get("paper_epsilon")
        arms[name] = Arm(
            name,
            str(a.get("method", name)),
            cfgs,
            overrides,
            str(a.get("note", "")),
            where=dict(a.get("where") or {}),
            paper_epsilon=None if pe is None else float(pe),
        )
    tables: list[TableDef] = []
    for i, t in enumerate(_need(raw, "tables", where, list)):
        tw = f"{where}.tables[{i}]"
        tdef = TableDef(
            table=str(_need(t, "table", tw, (str, int))),
            where=dict(t.get("where") or {}),
            arms=list(_need(t, "arms", tw, list)),
            reference=t.get("reference"),
            paper_method=dict(t.get("paper_method") or {}),
            note=str(t.get("note", "")),
            label=str(t.get("label", "")),
            overrides=dict(t.get("overrides") or {}),
            metric=t.get("metric"),
            percent=bool(t.get("percent", True)),
            unit=str(t.get("unit", "test accuracy (%)")),
            paper_cells={str(k): dict(v) for k, v in (t.get("paper_cells") or {}).items()},
            extra_metrics=dict(t.get("extra_metrics") or {}),
            columns=_columns(t["columns"], f"{tw}.columns") if t.get("columns") else None,
            images=[str(x) for x in t.get("images") or []],
            kind=str(t.get("kind", "accuracy")),
            paper_where={str(k): dict(v or {}) for k, v in (t.get("paper_where") or {}).items()},
            reference_metric=t.get("reference_metric"),
            plots=None if t.get("plots") is None else list(t["plots"]),
        )
        if tdef.kind not in ("accuracy", "attack"):
            raise ReproError(f"{tw}.kind: expected 'accuracy' or 'attack', got {tdef.kind!r}")
        if tdef.label in {x.label for x in tables}:
            raise ReproError(f"{tw}.label: {tdef.label!r} used twice (give each view a label)")
        for a in tdef.paper_cells:
            if a not in tdef.arms:
                raise ReproError(f"{tw}.paper_cells: {a!r} is not an arm of the table")
        for kind in tdef.plots or []:
            if kind not in PLOT_KINDS:
                raise ReproError(f"{tw}.plots: {kind!r} is not one of {', '.join(PLOT_KINDS)}")
        for a in tdef.arms + ([tdef.reference] if tdef.reference else []):
            if a not in arms:
                raise ReproError(f"{tw}.arms: unknown arm {a!r}")
        for a in tdef.paper_where:
            if a not in tdef.arms:
                raise ReproError(f"{tw}.paper_where: {a!r} is not an arm of the table")
        load_paper(pid).table(tdef.table)  # KeyError if the paper has no such table

        tables.append(tdef)
    tune = _tune(prof.get("tune"), arms, f"{where}.profiles.{profile}.tune")
    plot_defs = []
    for i, pl in enumerate(raw.get("plots") or []):
        pw = f"{where}.plots[{i}]"
        plot_defs.append(
            PlotDef(
                column=str(_need(pl, "column", pw, str)),
                ylabel=str(pl.get("ylabel", pl["column"])),
                stem=str(_need(pl, "stem", pw, str)),
                log=bool(pl.get("log", False)),
                reference_column=pl.get("reference_column"),
                reference_label=str(pl.get("reference_label", "")),
                fraction=bool(pl.get("fraction", False)),
                xlabel=str(pl.get("xlabel", "")),
            )
        )
    return Definition(
        paper=pid,
        title=str(raw.get("title", "")),
        profile=profile,
        base=base,
        arms=arms,
        tables=tables,
        claims=list(raw.get("claims") or []),
        deviations=list(prof.get("deviations") or []) + list(raw.get("deviations") or []),
        notes=list(prof.get("notes") or []),
        data_root=prof.get("data_root"),
        seeds=int(prof.get("seeds", 3)),
        tune=tune,
        plots=plot_defs,
        columns=_columns(raw["columns"], f"{where}.columns")
        if raw.get("columns")
        else list(DEFAULT_COLUMNS),
    )


def _tune(raw: Any, arms: dict[str, Arm], where: str) -> TuneDef | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ReproError(f"{where}: expected a mapping")
    param = str(_need(raw, "param", where, str))
    default = list(raw.get("values") or [])
    values: dict[str, list[Any]] = {}
    inherit: dict[str, list[str]] = {}
    for name, spec in _need(raw, "arms", where, dict).items():
        spec = spec or {}
        vals = list(spec.get("values") or default)
        if not vals:
            raise ReproError(f"{where}.arms.{name}.values: no values to tune over")
        heirs = list(spec.get("inherit") or [])
        for a in [name, *heirs]:
            if a not in arms:
                raise ReproError(f"{where}.arms: unknown arm {a!r}")
        values[name], inherit[name] = vals, heirs
    seeds = int(raw.get("seeds", 1))
    if seeds < 1:
        raise ReproError(f"{where}.seeds: must be >= 1")
    return TuneDef(
        param,
        values,
        inherit,
        seeds,
        str(raw.get("metric", "test/accuracy")),
        str(raw.get("note", "")),
    )


# -- points -----------------------------------------------------------------------------------
def find_shared_data() -> Path | None:
    """``shared/data`` with the MNIST test set: ``$FL_SHARED_DATA``, else the nearest
    ``shared/data`` beside the checkout or one of its parents (as the tests find it)."""
    marker = Path("MNIST", "raw", "t10k-images-idx3-ubyte.gz")
    cands = [Path(os.environ["FL_SHARED_DATA"])] if "FL_SHARED_DATA" in os.environ else []
    cands += [p / "shared" / "data" for p in [REPO, *REPO.parents]]
    cands += [p / "shared" / "data" for p in Path.cwd().resolve().parents]
    return next((c.resolve() for c in cands if (c / marker).exists()), None)


def _file_digest(paths: list[str]) -> str:
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


def plan(defn: Definition, *, seeds: int, extra: dict[str, Any], tables: list[TableDef]):
    """The (arm, seed) points of ``tables``, seed-major (every arm's seed 0 first, so a
    sweep stopped early has every arm)."""
    names: list[tuple[str, TableDef]] = []
    seen: set[tuple[str, str]] = set()
    for t in tables:
        for a in t.arms + ([t.reference] if t.reference else []):
            if (a, t.variant) not in seen:
                seen.add((a, t.variant))
                names.append((a, t))
    out: list[ReproPoint] = []
    for seed in range(seeds):
        for name, view in names:
            out.append(_repro_point(defn, defn.arms[name], seed, extra, len(out), view))
    return out


def tuning_points(defn: Definition, *, extra: dict[str, Any], arms: set[str] | None = None):
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
                res.scores.setdefault(repr(rp.arm.overrides[tune.param]), []).append(v)
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
        self, points: list[ReproPoint], store: ResultStore, *, name: str, data_root, **kw: Any
    ) -> None:
        self.by_id = {rp.point.id: rp for rp in points}
        spec = SweepSpec(Path(name), "grid", {}, ["fl-lightning", "fit"], name=name)
        super().__init__(spec, store, **kw)
        self.data_root = data_root
        self.curves = store.root / "curves.jsonl"

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


# -- results ----------------------------------------------------------------------------------
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

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.values) if self.values else None

    @property
    def std(self) -> float | None:
        return statistics.stdev(self.values) if len(self.values) > 1 else None


def _pct(x: Any) -> float | None:
    return None if not isinstance(x, (int, float)) or math.isnan(x) else 100.0 * float(x)


def _num(x: Any) -> float | None:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


def collect(
    defn: Definition,
    points: list[ReproPoint],
    store: ResultStore,
    table: TableDef,
    paper_table: PaperTable,
    metric: str,
) -> tuple[list[CellResult], CellResult | None]:
    latest = store.latest()
    curves = load_curves(store)
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
            res.metrics.append(m)
            eps = m.get("privacy/epsilon")
            if isinstance(eps, (int, float)) and math.isfinite(eps):  # inf: non-private
                res.eps.append(float(eps))
            elif isinstance(eps, (int, float)):
                res.eps_infinite += 1
            if m.get("privacy/guarantee"):
                res.guarantees.append(str(m["privacy/guarantee"]))
            res.curves.append(curve)
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
    return out, ref


def kendall(cells: list[CellResult]) -> tuple[float | None, float | None, int]:
    """Kendall τ-b (ties counted as ties) between our means and the paper's, with its p-value
    (``scipy.stats.kendalltau``), over the cells that have both."""
    from scipy.stats import kendalltau

    both = [c for c in cells if c.mean is not None and c.paper is not None]
    if len(both) < 2:
        return None, None, len(both)
    res = kendalltau([round(float(c.mean or 0.0), 2) for c in both], [c.paper for c in both])
    tau, p = float(res.statistic), float(res.pvalue)
    return (tau if math.isfinite(tau) else None), (p if math.isfinite(p) else None), len(both)


def compare_methods(a: CellResult, b: CellResult, unit: str = " pt") -> tuple[str, str]:
    """Whether ``a`` beats ``b``: Welch's t-test over seeds (two-sided, α = 0.05)."""
    from scipy.stats import ttest_ind

    if len(a.values) < 2 or len(b.values) < 2:
        return "inconclusive", f"{a.arm.method} or {b.arm.method}: fewer than 2 seeds finished"
    diff = a.mean - b.mean  # type: ignore[operator]
    if statistics.pstdev(a.values) == 0 and statistics.pstdev(b.values) == 0:
        p = 0.0 if diff != 0 else 1.0
    else:
        p = float(ttest_ind(a.values, b.values, equal_var=False).pvalue)
    d = 2 if unit else 3
    text = f"{a.arm.method} {_ms(a, d)} vs {b.arm.method} {_ms(b, d)}: {diff:+.{d}f}{unit}"
    text += f", Welch p = {p:.3g}"
    if p < ALPHA:
        return ("confirmed" if diff > 0 else "contradicted"), text
    return "inconclusive", text + " (not significant at 0.05: a tie at this power)"


def difference_ci(a: CellResult, b: CellResult) -> tuple[float, float] | None:
    """The 95 % Welch confidence interval of mean(a) − mean(b), in points (None: < 2 seeds)."""
    from scipy.stats import t as student

    if len(a.values) < 2 or len(b.values) < 2:
        return None
    diff = statistics.fmean(a.values) - statistics.fmean(b.values)
    va = statistics.variance(a.values) / len(a.values)
    vb = statistics.variance(b.values) / len(b.values)
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff
    df = (va + vb) ** 2 / (va**2 / (len(a.values) - 1) + vb**2 / (len(b.values) - 1))
    q = float(student.ppf(1 - ALPHA / 2, df))
    return diff - q * se, diff + q * se


def with_margin(
    kind: str, evidence: str, a: CellResult, b: CellResult, margin: float
) -> tuple[str, str]:
    """A pairwise verdict that also tests the paper's advantage ``margin`` (points): when the
    95 % Welch CI of our difference lies wholly below it, the published advantage is rejected
    and the pair counts as contradicted even if ``a`` is ahead."""
    ci = difference_ci(a, b)
    if ci is None:
        return kind, evidence
    lo, hi = ci
    if hi < margin:
        return "contradicted", (
            f"{evidence}; 95 % CI of the difference [{lo:+.2f}, {hi:+.2f}] pt excludes the "
            f"paper's {margin:+.2f} pt"
        )
    return kind, f"{evidence}; 95 % CI [{lo:+.2f}, {hi:+.2f}] pt includes the paper's {margin:+.2f}"


def compare_close(
    a: CellResult, b: CellResult, within: float, unit: str = " pt"
) -> tuple[str, str]:
    """Whether ``a`` is within ``within`` points of ``b`` (a claim such as "SPM ≈ NoDP"):
    two one-sided Welch tests (TOST, α = 0.05). Confirmed when both reject a gap of more than
    ``within``; contradicted when the gap is significantly larger than ``within``; otherwise
    inconclusive."""
    from scipy.stats import ttest_ind

    if len(a.values) < 2 or len(b.values) < 2:
        return "inconclusive", f"{a.arm.method} or {b.arm.method}: fewer than 2 seeds finished"
    diff = a.mean - b.mean  # type: ignore[operator]
    text = (
        f"{a.arm.method} {_ms(a)} vs {b.arm.method} {_ms(b)}: {diff:+.2f}{unit} "
        f"(margin ±{within:g}{unit})"
    )
    if statistics.pstdev(a.values) == 0 and statistics.pstdev(b.values) == 0:
        inside = abs(diff) <= within
        return ("confirmed" if inside else "contradicted"), text + " (no seed variance)"

    def p(shift: float, alternative: str) -> float:
        return float(
            ttest_ind(
                [v + shift for v in a.values], b.values, equal_var=False, alternative=alternative
            ).pvalue
        )

    above, below = p(within, "greater"), p(-within, "less")  # diff > -within, diff < within
    if max(above, below) < ALPHA:
        return "confirmed", text + f", TOST p = {max(above, below):.3g}"
    outside = min(p(within, "less"), p(-within, "greater"))  # diff < -within or > within
    if outside < ALPHA:
        return "contradicted", text + f", gap beyond the margin: one-sided Welch p = {outside:.3g}"
    return "inconclusive", text + f", TOST p = {max(above, below):.3g} (not within at 0.05)"


def _ms(c: CellResult, d: int = 2) -> str:
    if c.mean is None:
        return "—"
    std = f" ± {c.std:.{d}f}" if c.std is not None else ""
    return f"{c.mean:.{d}f}{std} (n={len(c.values)})"


def peak_verdict(
    res: TuneResult, value: Any, noise: float | None, among: list[Any] | None = None
) -> tuple[str, str]:
    """Whether ``value`` is the best of the arm's tuning grid (or of its values ``among``,
    e.g. the paper's own grid inside a wider one). With single-seed tuning the
    scale of a meaningful difference is ``noise``, the arm's seed std at its chosen value in
    the table: the claim is confirmed (contradicted) when the claimed value beats every other
    value (is beaten by the best) by more than 2 std; otherwise inconclusive."""
    means = {repr(v): res.mean(v) for v in res.values if among is None or v in among}
    if means.get(repr(value)) is None:
        return "inconclusive", f"{res.method}: no finished run at {value}"
    done = {k: m for k, m in means.items() if m is not None}
    text = f"{res.method}: " + ", ".join(f"{k}: {m:.2f}" for k, m in done.items())
    if noise is None:
        return "inconclusive", text + " (no seed std to judge the differences)"
    text += f" (seeds: {len(res.scores.get(repr(value), []))} per value; seed std {noise:.2f})"
    mine = done[repr(value)]
    best_k, best = max(done.items(), key=lambda kv: kv[1])
    others = [m for k, m in done.items() if k != repr(value)]
    if others and all(mine - m > 2 * noise for m in others):
        return "confirmed", text
    if best_k != repr(value) and best - mine > 2 * noise:
        return "contradicted", text + f"; best at {best_k}"
    return "inconclusive", text + f"; best at {best_k}, within 2 std of {value}"


def verdicts(
    defn: Definition,
    results: dict[str, tuple[list[CellResult], CellResult | None]],
    tuning: list[TuneResult] | None = None,
):
    out = []
    for i, claim in enumerate(defn.claims):
        text = str(claim.get("claim", f"claim {i}"))
        t = str(claim.get("table"))
        if t not in results:
            continue
        cells = {c.arm.name: c for c in results[t][0]}
        peak = claim.get("peak")
        if isinstance(peak, dict):
            res = next((r for r in tuning or [] if r.arm == peak["arm"]), None)
            if res is None:
                raise ReproError(f"claims[{i}].peak: arm {peak['arm']!r} is not tuned")
            cell = cells.get(peak["arm"])
            verdict, evidence = peak_verdict(
                res, peak["value"], cell.std if cell else None, peak.get("among")
            )
            if claim.get("paper"):
                evidence += f". Paper: {claim['paper']}"
            if claim.get("reading"):
                evidence += f". Reading: {claim['reading']}"
            out.append({"claim": text, "verdict": verdict, "evidence": evidence, "table": t})
            continue
        if isinstance(claim.get("tracks"), dict):
            out.append(_tracking_verdict(text, t, claim, cells, i))
            continue
        percent = next((d.percent for d in defn.tables if d.label == t), True)
        unit = " pt" if percent else ""  # e.g. an SSIM difference is no percentage point
        close = claim.get("close")
        rule = claim.get("better") or claim.get("lower")
        if isinstance(close, dict):
            rule = {"arm": close["arm"], "than": [close["to"]]}
        if not isinstance(rule, dict):
            raise ReproError(
                f"claims[{i}]: expected 'better: {{arm, than}}', 'lower: {{arm, than}}', "
                "'close: {{arm, to, within}}', 'peak: {{arm, value}}' or 'tracks: {{arm}}'"
            )
        a = cells.get(rule["arm"])
        others = [cells.get(b) for b in rule["than"]]
        if a is None or any(o is None for o in others):
            raise ReproError(f"claims[{i}]: arms {rule} are not all in table {t}")
        if isinstance(close, dict):
            parts = [compare_close(a, others[0], float(close["within"]), unit)]  # type: ignore[arg-type]
        elif "better" in claim:
            parts = [compare_methods(a, o, unit) for o in others]  # type: ignore[arg-type]
        else:  # lower is the claim (e.g. attack accuracy): the others beat it on the value
            parts = [compare_methods(o, a, unit) for o in others]  # type: ignore[arg-type]
        margins = rule.get("margin")
        if margins is not None:
            if not isinstance(margins, list) or len(margins) != len(others):
                raise ReproError(f"claims[{i}].better.margin: one paper margin per 'than' arm")
            parts = [
                with_margin(kind, ev, a, o, float(m))  # type: ignore[arg-type]
                for (kind, ev), o, m in zip(parts, others, margins)
            ]
        kinds = {k for k, _ in parts}
        if kinds == {"confirmed"}:
            verdict = "confirmed"
        elif "contradicted" in kinds:
            verdict = "contradicted"
        else:
            verdict = "inconclusive"
        evidence = "; ".join(e for _, e in parts)
        notes = []
        for c in [a, *others]:
            if c is None:
                continue
            d = _diagnostics(c)
            if "anr_fired_mean" in d:
                notes.append(
                    f"{c.arm.method}: ANR fired {d['anr_fired_mean']:.1f} times a run, "
                    f"{d.get('rounds_mean', 0):.1f} rounds, final σ "
                    f"{d.get('final_noise_multiplier_mean', float('nan')):.2f}"
                )  # type: ignore[union-attr]
        if notes:
            evidence += " (" + "; ".join(notes) + ")"
        if claim.get("paper"):
            evidence += f". Paper: {claim['paper']}"
        if claim.get("reading"):
            evidence += f". Reading: {claim['reading']}"
        out.append({"claim": text, "verdict": verdict, "evidence": evidence, "table": t})
    return out


TRACK_CORR, TRACK_MAD = 0.9, 0.1  # "follows the quantile": correlation and mean |error|


def selection_tracking(curve: dict[str, list]) -> dict[str, float] | None:
    """How closely one run's selected fraction followed the λ_t quantile of Eq. (14).

    A noiseless test s(g'_j) ≥ λ_t selects 1 − r_t of the coordinates (r_t = the quantile
    level, ``strategy/threshold_level``). Returns the Pearson correlation of the logged
    ``clients/selected_fraction`` with 1 − r_t over rounds, their mean absolute difference and
    the mean recall (``clients/selection_recall``: of the coordinates above λ_t, the share
    selected); ``None`` without those columns."""
    levels = curve.get("strategy/threshold_level") or []
    fracs = curve.get("clients/selected_fraction") or []
    pairs = [(1.0 - r, f) for r, f in zip(levels, fracs) if r is not None and f is not None]
    if len(pairs) < 3:
        return None
    ideal, got = [p[0] for p in pairs], [p[1] for p in pairs]
    try:
        corr = statistics.correlation(ideal, got)
    except statistics.StatisticsError:  # constant series
        corr = float("nan")
    out = {"corr": corr, "mad": statistics.fmean(abs(a - b) for a, b in pairs)}
    recall = [x for x in curve.get("clients/selection_recall") or [] if x is not None]
    if recall:
        out["recall"] = statistics.fmean(recall)
    return out


def _tracking_verdict(text: str, t: str, claim: dict[str, Any], cells, i: int) -> dict[str, Any]:
    arm = claim["tracks"].get("arm")
    c = cells.get(arm)
    if c is None:
        raise ReproError(f"claims[{i}]: arm {arm!r} is not in table {t}")
    stats = [x for x in (selection_tracking(cv) for cv in c.curves) if x is not None]
    if not stats:
        verdict, evidence = "inconclusive", f"{c.arm.method}: no run logged its selection"
    else:
        corr = statistics.fmean(x["corr"] for x in stats)
        mad = statistics.fmean(x["mad"] for x in stats)
        if math.isfinite(corr) and corr >= TRACK_CORR and mad <= TRACK_MAD:
            verdict = "confirmed"
        elif not math.isfinite(corr) or corr < 0.5 or mad > 0.25:
            verdict = "contradicted"
        else:
            verdict = "inconclusive"
        rec = [x["recall"] for x in stats if "recall" in x]
        evidence = (
            f"{c.arm.method} ({len(stats)} runs): selected fraction vs 1 − r_t over rounds, "
            f"correlation {corr:.2f}, mean |difference| {mad:.3f}"
            + (f", recall of the coordinates above λ_t {statistics.fmean(rec):.2f}" if rec else "")
            + f" (follows: correlation ≥ {TRACK_CORR} and |difference| ≤ {TRACK_MAD})"
        )
    if claim.get("paper"):
        evidence += f". Paper: {claim['paper']}"
    if claim.get("reading"):
        evidence += f". Reading: {claim['reading']}"
    return {"claim": text, "verdict": verdict, "evidence": evidence, "table": t}


# -- documents --------------------------------------------------------------------------------
def _setting(defn: Definition, arm: Arm) -> dict[str, Any]:
    return {"configs": defn.base + arm.configs, **arm.overrides}


def _diagnostics(c: CellResult) -> dict[str, Any]:
    rounds = [m["rounds"] for m in c.metrics if isinstance(m.get("rounds"), (int, float))]
    fired = [
        sum(x or 0 for x in cv["strategy/anr_fired"])
        for cv in c.curves
        if cv and "strategy/anr_fired" in cv
    ]
    sigma = []
    for cv in c.curves:
        used = [x for x in (cv or {}).get("strategy/noise_multiplier", []) if x is not None]
        if used:
            sigma.append(used[-1])
    out: dict[str, Any] = {}
    if rounds:
        out["rounds_mean"] = statistics.fmean(rounds)
    if fired:
        out["anr_fired_mean"] = statistics.fmean(fired)
    if sigma:
        out["final_noise_multiplier_mean"] = statistics.fmean(sigma)
    sound = [
        m["strategy/epsilon_sound"]
        for m in c.metrics
        if isinstance(m.get("strategy/epsilon_sound"), (int, float))
    ]
    if not sound:  # strategies that log it per round (async local DP, paper 004)
        sound = [v for v in (_last(cv, "strategy/epsilon_sound") for cv in c.curves) if v]
    if sound:
        out["epsilon_sound_mean"] = statistics.fmean(sound)
    for col, key in (
        ("strategy/abs_cos_mean", "abs_cos_mean"),
        ("strategy/mean_cosine", "cos_mean"),
        ("strategy/cos_negative_fraction", "cos_negative_fraction"),
        ("strategy/abs_cos_noise_only", "abs_cos_noise_only"),
        ("strategy/projected", "projected_per_round"),
    ):
        per_run = []
        for cv in c.curves:
            xs = [x for x in (cv or {}).get(col, []) if x is not None and math.isfinite(x)]
            if xs:
                per_run.append(statistics.fmean(xs))
        if per_run:
            out[key] = statistics.fmean(per_run)  # mean over rounds, then over seeds
    local = {  # local DP: the paper's per-coordinate ε beside the whole participation's
        "epsilon_local_per_coordinate_mean": "privacy/epsilon_local_per_coordinate",
        "epsilon_local_per_client_mean": "privacy/epsilon_local_per_client",
    }
    for key, metric in {**local, **c.extra_metrics}.items():
        vals = [
            float(m[metric])
            for m in c.metrics
            if isinstance(m.get(metric), (int, float)) and math.isfinite(m[metric])
        ]
        if vals:
            out[key] = statistics.fmean(vals)
    for col, key in (
        ("strategy/clients_exited", "clients_exited_mean"),
        ("strategy/dispatched", "last_round_dispatched_mean"),
        ("strategy/eps_paper_max", "epsilon_paper_max_mean"),
    ):
        vals = [v for v in (_last(cv, col) for cv in c.curves) if v is not None]
        if vals:
            out[key] = statistics.fmean(vals)
    # ADP-FL: the largest share one upload has in an aggregation (mean over rounds and seeds)
    # and how many uploads the accuracy-drop callback froze at the previous ε (per run)
    shares = [x for cv in c.curves for x in (cv or {}).get("strategy/weight_max", []) if x]
    if shares:
        out["weight_max_mean"] = statistics.fmean(shares)
    frozen = [v for v in (_last(cv, "strategy/frozen_total") for cv in c.curves) if v is not None]
    if frozen:
        out["epsilon_frozen_mean"] = statistics.fmean(frozen)
    if c.arm.paper_epsilon is not None:  # the runs' own ε beside the paper's (000)
        out["epsilon_infinite_runs"] = c.eps_infinite
    track = [x for x in (selection_tracking(cv) for cv in c.curves if cv) if x is not None]
    if track:
        out["selected_fraction_mean"] = statistics.fmean(
            statistics.fmean(x for x in cv["clients/selected_fraction"] if x is not None)
            for cv in c.curves
            if cv and cv.get("clients/selected_fraction")
        )
        out["selection_corr_mean"] = statistics.fmean(x["corr"] for x in track)
        out["selection_mad_mean"] = statistics.fmean(x["mad"] for x in track)
        rec = [x["recall"] for x in track if "recall" in x]
        if rec:
            out["selection_recall_mean"] = statistics.fmean(rec)
    return out


def _last(curve: dict[str, list], col: str) -> float | None:
    """The last logged value of ``col`` in a run's curve (None when never logged)."""
    vals = [x for x in (curve or {}).get(col, []) if x is not None]
    return vals[-1] if vals else None


def _guarantee(c: CellResult) -> str:
    """The runs' privacy guarantee with its (ε, δ) figures abstracted (they are in
    ``epsilon_reported``); several distinct ones are joined."""
    if not c.values:
        return "no runs"
    if not c.guarantees:
        return "none (non-private)"
    num = r"[-+\d.e]+|inf"
    kinds = sorted({re.sub(rf"\(({num}), ({num})\)", "(ε, δ)", g) for g in c.guarantees})
    return "; ".join(kinds)


def cell_json(defn: Definition, c: CellResult) -> dict[str, Any]:
    out = {
        "method": c.arm.method,
        "arm": c.arm.name,
        "setting": _setting(defn, c.arm),
        "paper": c.paper,
        "ours_mean": None if c.mean is None else round(c.mean, 3),
        "ours_std": None if c.std is None else round(c.std, 3),
        "seeds": len(c.values),
        "seeds_planned": c.planned,
        "epsilon_reported": round(statistics.fmean(c.eps), 4) if c.eps else None,
        "guarantee": _guarantee(c),
        "diagnostics": _diagnostics(c),
    }
    if c.arm.paper_epsilon is not None:
        out["epsilon_paper"] = c.arm.paper_epsilon
    return out


def build_json(
    defn: Definition, results, verdict_rows, command: str, tuning: list[TuneResult] | None = None
) -> dict[str, Any]:
    tables: list[dict[str, Any]] = []
    attack_tables: list[dict[str, Any]] = []
    for t in defn.tables:
        if t.label not in results:
            continue
        cells, ref = results[t.label]
        tau, p, n = kendall(cells)
        extra: dict[str, Any] = {}
        if t.label != t.table:
            extra = {"paper_table": t.table, "overrides": t.overrides}
        if t.metric:
            extra["metric"] = t.metric
        if t.reference_metric:
            extra["reference_metric"] = t.reference_metric
        # attack tables (e.g. DLG's SSIM) are kept apart from the accuracy tables, whose
        # standard (a non-private accuracy reference, cells above chance) they do not share
        (attack_tables if t.kind == "attack" else tables).append(
            {
                "table": t.label,
                **extra,
                "where": t.where,
                "cells": [cell_json(defn, c) for c in cells],
                "kendall_tau": None if tau is None else round(tau, 4),
                "p_value": None if p is None else round(p, 4),
                "kendall_n": n,
                "nonprivate_reference": None if ref is None else cell_json(defn, ref),
            }
        )
    doc: dict[str, Any] = {
        "paper": defn.paper,
        "profile": defn.profile,
        "command": command,
        "tables": tables,
    }
    if attack_tables:
        doc["attack_tables"] = attack_tables
    doc.update({"verdicts": verdict_rows, "deviations": defn.deviations})
    if defn.tune is not None:
        doc["tuning"] = tuning_json(defn, tuning or [])
    return doc


def tuning_json(defn: Definition, tuning: list[TuneResult]) -> dict[str, Any]:
    tune = defn.tune
    assert tune is not None
    return {
        "param": tune.param,
        "metric": tune.metric,
        "seeds": tune.seeds,
        "arms": [
            {
                "arm": r.arm,
                "method": r.method,
                "grid": [
                    {
                        "value": v,
                        "ours_mean": None if r.mean(v) is None else round(r.mean(v) or 0.0, 3),
                        "seeds": len(r.scores.get(repr(v), [])),
                    }
                    for v in r.values
                ],
                "chosen": r.chosen,
                "applied_to": [r.arm, *tune.inherit[r.arm]],
            }
            for r in tuning
        ],
    }


DOC_KEYS = {"paper": str, "profile": str, "command": str, "tables": list, "verdicts": list}
TABLE_KEYS = {
    "table": str,
    "cells": list,
    "kendall_tau": (float, type(None)),
    "p_value": (float, type(None)),
    "nonprivate_reference": (dict, type(None)),
}
CELL_KEYS = {
    "method": str,
    "setting": dict,
    "paper": (float, int, type(None)),
    "ours_mean": (float, int, type(None)),
    "ours_std": (float, int, type(None)),
    "seeds": int,
    "epsilon_reported": (float, int, type(None)),
    "guarantee": str,
}
VERDICT_KEYS = {"claim": str, "verdict": str, "evidence": str}


def validate_document(doc: dict[str, Any]) -> list[str]:
    """What is wrong with a ``<paper>.json`` against the reproduction schema (empty: valid)."""
    problems: list[str] = []

    def check(obj: Any, keys: dict[str, Any], where: str) -> None:
        if not isinstance(obj, dict):
            problems.append(f"{where}: not an object")
            return
        for k, kind in keys.items():
            if k not in obj:
                problems.append(f"{where}.{k}: missing")
            elif not isinstance(obj[k], kind) or isinstance(obj[k], bool):
                problems.append(f"{where}.{k}: {type(obj[k]).__name__} is not {kind}")

    check(doc, DOC_KEYS, "document")
    all_tables = list(doc.get("tables") or []) + list(doc.get("attack_tables") or [])
    for i, t in enumerate(all_tables):
        check(t, TABLE_KEYS, f"tables[{i}]")
        for j, c in enumerate(t.get("cells") or []):
            check(c, CELL_KEYS, f"tables[{i}].cells[{j}]")
        if isinstance(t.get("nonprivate_reference"), dict):
            check(t["nonprivate_reference"], CELL_KEYS, f"tables[{i}].nonprivate_reference")
    for i, v in enumerate(doc.get("verdicts") or []):
        check(v, VERDICT_KEYS, f"verdicts[{i}]")
        if isinstance(v, dict) and v.get("verdict") not in VERDICTS:
            problems.append(f"verdicts[{i}].verdict: {v.get('verdict')!r} not in {VERDICTS}")
    return problems


def _f(x: Any, d: int = 2) -> str:
    """Fixed decimals; magnitudes of 10^4 and more (a diverged loss, a per-client local ε)
    with three significant digits."""
    if x is None:
        return "—"
    return f"{x:.3g}" if abs(x) >= 1e4 else f"{x:.{d}f}"


def _ranks(values: list[float | None], higher: bool = True) -> list[str]:
    """Competition ranks; equal values (at two decimals) share a rank and are marked '='."""
    keyed = [(round(v, 2) if v is not None else None) for v in values]
    out = []
    for v in keyed:
        if v is None:
            out.append("—")
            continue
        better = sum(1 for w in keyed if w is not None and (w > v if higher else w < v))
        tied = sum(1 for w in keyed if w == v) > 1
        out.append(f"{better + 1}{'=' if tied else ''}")
    return out


def render_markdown(
    defn: Definition, doc: dict[str, Any], figures: dict[str, list[Path]], out_dir: Path
) -> str:
    paper = load_paper(defn.paper)
    lines = [
        f"# Reproduction of paper {paper.id}: {paper.name}",
        "",
        f"*{paper.title}* — {paper.citation}. Notes: `{paper.notes}`.",
        "",
        f"Generated by `{doc['command']}` (profile **{defn.profile}**) from the sweep store; "
        "do not edit by hand — rerun the command (it reruns nothing already finished).",
        "",
    ]
    if defn.title:
        lines += [defn.title.strip(), ""]
    for n in defn.notes:
        lines += [f"- {n.strip()}"]
    lines += ["", "## Verdicts", "", "| Claim | Verdict | Evidence |", "|---|---|---|"]
    for v in doc["verdicts"]:
        lines.append(f"| {v['claim']} | **{v['verdict']}** | {v['evidence']} |")
    by_label = {d.label: d for d in defn.tables}
    for t in doc["tables"] + doc.get("attack_tables", []):
        tdef = by_label[t["table"]]
        ptab = paper.table(tdef.table)
        lines += ["", f"## Table {t['table']}", "", f"**Paper:** {ptab.caption}", ""]
        if tdef.note:
            lines += [tdef.note.strip(), ""]
        where = ", ".join(f"{k} = {v}" for k, v in t["where"].items())
        values = "test accuracy (%)" if "metric" not in t else f"`{t['metric']}` (%)"
        if where:
            values = (
                f"`{t['metric']}` (%)"
                if t.get("metric") and tdef.percent and tdef.unit == "test accuracy (%)"
                else tdef.unit
            )
            lines += [f"Paper cells at {where}. Values: {values}.", ""]
        ours = [c["ours_mean"] for c in t["cells"]]
        papers = [c["paper"] for c in t["cells"]]
        r_ours, r_paper = _ranks(ours), _ranks(papers)
        digits = 2 if tdef.percent else 3
        cols = tdef.columns if tdef.columns is not None else defn.columns
        # Budget columns only for tables whose runs log them (async local DP, paper 004).
        if any("clients_exited_mean" in c["diagnostics"] for c in t["cells"]):
            cols = [*cols, *BUDGET_COLUMNS]
        # Arms that stand for a paper ε (paper 000): the paper's ε beside the sound one.
        has_pe = any("epsilon_paper" in c for c in t["cells"])
        has_sel = any("selected_fraction_mean" in c["diagnostics"] for c in t["cells"])
        if has_pe:
            head = (
                "| Method (arm) | Paper ε | Paper | Paper rank | Ours (mean ± std) | Our rank | "
                "Seeds | Sound ε (whole run, client) | Guarantee | Rounds |"
            )
            head += (
                " Selected fraction | Corr. with 1 − r_t | Recall above λ_t |" if has_sel else ""
            )
            lines += [head, "|" + "---|" * (head.count("|") - 1)]
        else:
            lines += [
                "| Method (arm) | Paper | Paper rank | Ours (mean ± std) | Our rank | Seeds | "
                "ε reported | Guarantee | " + " | ".join(col["header"] for col in cols) + " |",
                "|---|---|---|---|---|---|---|---|" + "---|" * len(cols),
            ]
        for c, ro, rp in zip(t["cells"], r_ours, r_paper):
            d = c["diagnostics"]
            ours_s = (
                "—"
                if c["ours_mean"] is None
                else (
                    f"{c['ours_mean']:.{digits}f}"
                    + (f" ± {c['ours_std']:.{digits}f}" if c["ours_std"] is not None else "")
                )
            )
            eps = _f(c["epsilon_reported"], 3)
            if "epsilon_sound_mean" in d:
                eps += f" (sound: {d['epsilon_sound_mean']:.3g})"
            if has_pe:
                lines.append(_cell_row_eps(c, d, ours_s, ro, rp, has_sel))
                continue
            if "epsilon_local_per_coordinate_mean" in d:
                eps += f" (per coordinate: {d['epsilon_local_per_coordinate_mean']:.3g}"
                if "epsilon_local_per_client_mean" in d:
                    eps += f"; per client: {d['epsilon_local_per_client_mean']:.3g}"
                eps += ")"
            shown = " | ".join(_f(d.get(col["key"]), int(col.get("digits", 2))) for col in cols)
            lines.append(
                f"| {c['method']} (`{c['arm']}`) | {_f(c['paper'], digits)} | {rp} | {ours_s} | "
                f"{ro} | {c['seeds']}/{c['seeds_planned']} | {eps} | {c['guarantee']} | "
                f"{shown} |"
            )
        ref = t["nonprivate_reference"]
        lines.append("")
        if ref is not None:
            lines.append(
                f"Non-private reference in the same setting ({ref['method']}, `{ref['arm']}`"
                + (f", `{t['reference_metric']}`" if "reference_metric" in t else "")
                + "): "
                f"**{_f(ref['ours_mean'], digits)}**"
                + (f" ± {_f(ref['ours_std'], digits)}" if ref["ours_std"] is not None else "")
                + (" %" if tdef.percent else "")
                + f" over {ref['seeds']} seeds."
            )
        if t["kendall_tau"] is None:
            lines.append(f"\nKendall τ: n/a ({t['kendall_n']} methods with both values).")
        else:
            lines.append(
                f"\nKendall τ-b between our order and the paper's: **{t['kendall_tau']:.3f}** "
                f"(p = {_f(t['p_value'], 3)}, {t['kendall_n']} methods; our means compared at two "
                "decimals, equal ones count as ties)."
            )
        lines += ["", "Arm settings (over the base configs):", ""]
        for c in t["cells"] + ([ref] if ref else []):
            ov = {k: v for k, v in c["setting"].items() if k != "configs"}
            lines.append(
                f"- `{c['arm']}`: configs {', '.join(f'`{x}`' for x in c['setting']['configs'])}"
                + (f"; {', '.join(f'`{k}={v}`' for k, v in ov.items())}" if ov else "")
            )
        for fig in figures.get(t["table"], []):
            rel = fig.relative_to(out_dir) if fig.is_relative_to(out_dir) else fig
            lines += ["", f"![{fig.stem}]({rel.as_posix()})"]
    if "tuning" in doc:
        lines += tuning_markdown(defn, doc["tuning"], figures.get(TUNING_FIGURES, []), out_dir)
    lines += [
        "",
        "## Deviations from the paper",
        "",
        "| What | Paper | Ours | Why |",
        "|---|---|---|---|",
    ]
    for d in defn.deviations:
        lines.append(
            f"| {d.get('what', '')} | {d.get('paper', '')} | {d.get('ours', '')} | "
            f"{d.get('why', '')} |"
        )
    return "\n".join(lines).rstrip() + "\n"


TUNING_FIGURES = "__tuning__"


def tuning_markdown(
    defn: Definition, tuning: dict[str, Any], figs: list[Path], out_dir: Path
) -> list[str]:
    tune = defn.tune
    assert tune is not None
    values: list[Any] = []
    for a in tuning["arms"]:
        values += [g["value"] for g in a["grid"] if g["value"] not in values]
    values.sort()
    lines = [
        "",
        f"## Tuning of `{tuning['param']}`",
        "",
        f"Each arm ran {tuning['seeds']} seed(s) at every value of its grid; the value with the "
        f"best mean `{tuning['metric']}` (%) is the arm's setting in every table (bold), and "
        "that of the arms listed after it. The tables' seed-0 runs at the chosen value are "
        "these runs (same point).",
        "",
    ]
    if tune.note:
        lines += [tune.note.strip(), ""]
    lines += [
        "| Method (arm) | " + " | ".join(str(v) for v in values) + " | Chosen | Applied to |",
        "|---|" + "---|" * (len(values) + 2),
    ]
    for a in tuning["arms"]:
        by = {repr(g["value"]): g for g in a["grid"]}
        cells = []
        for v in values:
            g = by.get(repr(v))
            if g is None:
                cells.append("")
            elif g["ours_mean"] is None:
                cells.append("—")
            else:
                txt = f"{g['ours_mean']:.2f}"
                cells.append(f"**{txt}**" if v == a["chosen"] else txt)
        lines.append(
            f"| {a['method']} (`{a['arm']}`) | "
            + " | ".join(cells)
            + f" | {a['chosen']} | "
            + ", ".join(f"`{x}`" for x in a["applied_to"])
            + " |"
        )
    for fig in figs:
        rel = fig.relative_to(out_dir) if fig.is_relative_to(out_dir) else fig
        lines += ["", f"![{fig.stem}]({rel.as_posix()})"]
    return lines


def copy_images(
    defn: Definition, table: TableDef, cells: list[CellResult], store: ResultStore, out_dir: Path
) -> list[Path]:
    """The ``table.images`` of each cell's first finished seed (kept beside the store by
    :func:`read_audit`), copied next to the report; a copy already there is kept when the
    store's image is gone."""
    slug = "".join(ch if ch.isalnum() else "_" for ch in table.label)
    out = []
    for c in cells:
        pids = [m["_point_id"] for m in c.metrics if "_point_id" in m]
        for name in table.images:
            dest = out_dir / f"{defn.paper}_{slug}_{c.arm.name}_{name}"
            src = store.root / "images" / f"{pids[0]}_{name}" if pids else None
            if src is not None and src.exists():
                dest.write_bytes(src.read_bytes())
            if dest.exists():
                out.append(dest)
    return out


def _eps_text(x: float | None, infinite: int, seeds: int) -> str:
    if x is None:
        return "∞ (no guarantee)" if infinite else "—"
    text = f"{x:.3g}"
    return text + (f" ({infinite}/{seeds} runs ∞)" if infinite else "")


def _cell_row_eps(c, d, ours_s: str, ro: str, rp: str, has_sel: bool) -> str:
    """One row of a table whose arms stand for a paper ε: the paper's ε, then the sound
    client-level ε of the runs (the accountant's, whole run) beside it."""
    sound = _eps_text(c["epsilon_reported"], d.get("epsilon_infinite_runs", 0), c["seeds"])
    row = (
        f"| {c['method']} (`{c['arm']}`) | {_f(c.get('epsilon_paper'), 1)} | {_f(c['paper'])} | "
        f"{rp} | {ours_s} | {ro} | {c['seeds']}/{c['seeds_planned']} | {sound} | "
        f"{c['guarantee']} | {_f(d.get('rounds_mean'), 1)} |"
    )
    if has_sel:
        row += (
            f" {_f(d.get('selected_fraction_mean'), 3)} | {_f(d.get('selection_corr_mean'), 2)} |"
            f" {_f(d.get('selection_recall_mean'), 2)} |"
        )
    return row


def plots(
    defn: Definition, results, out_dir: Path, tuning: list[TuneResult] | None = None
) -> dict[str, list[Path]]:
    """Accuracy vs round and ε vs round per method (mean over seeds); accuracy vs ε where the
    table has more than one ε."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs: dict[str, list[Path]] = {}
    by_label = {d.label: d for d in defn.tables}
    for tname, (cells, ref) in results.items():
        slug = "".join(ch if ch.isalnum() else "_" for ch in tname)
        made: list[Path] = []
        tdef = by_label.get(tname)
        if tdef is not None and tdef.metric:  # e.g. attack accuracy: the curves are elsewhere
            figs[tname] = made
            continue
        if any(c.arm.paper_epsilon is not None for c in cells):
            kinds = tuple(tdef.plots) if tdef is not None and tdef.plots is not None else PLOT_KINDS
            made += _paper_epsilon_plots(defn, tname, slug, cells, ref, out_dir, plt, kinds)
            figs[tname] = made
            continue
        for col, ylabel, stem, scale in (
            ("test/accuracy", "test accuracy (%)", "accuracy_vs_round", 100.0),
            ("privacy/epsilon", "ε spent", "epsilon_vs_round", 1.0),
        ):
            fig, ax = plt.subplots(figsize=(11, 4.8), dpi=110)
            drawn = False
            for k, c in enumerate(cells + ([ref] if ref else [])):
                seeds = sum(1 for cv in c.curves if cv.get(col))
                if not seeds:
                    continue
                xs, ys = _mean_curve(c, col, scale)
                ax.plot(
                    xs,
                    ys,
                    # distinct styles, so that arms with identical curves stay visible
                    marker="osv^Dxp*"[k % 8],
                    markersize=4,
                    ls="-" if c is ref else ["--", ":", "-.", (0, (5, 1))][k % 4],
                    lw=1.2,
                    label=f"{c.arm.method} ({seeds} seeds)",
                )
                drawn = True
            if drawn:
                ax.set_xlabel("round")
                ax.set_ylabel(ylabel)
                ax.set_title(
                    f"Paper {defn.paper}, table {tname}: {ylabel}\n"
                    "(mean over seeds, over the rounds every seed ran)"
                )
                ax.grid(alpha=0.3)
                ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
                fig.tight_layout()
                path = out_dir / f"{defn.paper}_{slug}_{stem}.png"
                fig.savefig(path)
                made.append(path)
            plt.close(fig)
        sim = _sim_time_plot(defn, tname, slug, cells + ([ref] if ref else []), out_dir, plt)
        if sim is not None:
            made.append(sim)
        eps_levels = {round(e, 1) for c in cells for e in c.eps}
        if len(eps_levels) > 1:
            fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
            for c in cells:
                if c.values and c.eps:
                    ax.errorbar(
                        [statistics.fmean(c.eps)],
                        [c.mean],
                        yerr=[c.std or 0],
                        marker="o",
                        capsize=3,
                        label=c.arm.method,
                    )
            ax.set_xlabel("ε reported")
            ax.set_ylabel("test accuracy (%)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            fig.tight_layout()
            path = out_dir / f"{defn.paper}_{slug}_accuracy_vs_epsilon.png"
            fig.savefig(path)
            plt.close(fig)
            made.append(path)
        for pl in defn.plots:
            drawn_at = _curve_plot(defn, pl, tname, slug, cells + ([ref] if ref else []), out_dir)
            if drawn_at is not None:
                made.append(drawn_at)
        figs[tname] = made
    if tuning and defn.tune is not None:
        fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
        drawn = False
        for k, r in enumerate(tuning):
            pts = [(float(v), float(m)) for v in r.values if (m := r.mean(v)) is not None]
            if pts:
                ax.plot(
                    [x for x, _ in pts],
                    [y for _, y in pts],
                    marker="osv^Dxp*"[k % 8],
                    ls=["-", "--", ":", "-."][k % 4],
                    label=f"{r.method} (chosen {r.chosen})",
                )
                drawn = True
        if drawn:
            ax.set_xscale("log")
            ax.set_xlabel(defn.tune.param)
            ax.set_ylabel(f"{defn.tune.metric} (%)")
            ax.set_title(
                f"Paper {defn.paper}: tuning of {defn.tune.param} "
                f"({defn.tune.seeds} seed(s) per value)"
            )
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
            fig.tight_layout()
            path = out_dir / f"{defn.paper}_tuning_{defn.tune.param.replace('.', '_')}.png"
            fig.savefig(path)
            figs[TUNING_FIGURES] = [path]
        plt.close(fig)
    return figs


def _curve_plot(
    defn: Definition, pl: PlotDef, tname: str, slug: str, cells: list[CellResult], out_dir: Path
) -> Path | None:
    """``pl.column`` vs round per arm (mean over the seeds, over the rounds every seed ran)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.8), dpi=110)
    drawn = False
    ref_values: list[float] = []
    for k, c in enumerate(cells):
        series = [cv for cv in c.curves if cv.get(pl.column)]
        if not series:
            continue
        for cv in series:
            if pl.reference_column:
                ref_values += [
                    v for v in cv.get(pl.reference_column, []) if v is not None and math.isfinite(v)
                ]
        xs, ys = _mean_curve(c, pl.column, finite=True)
        if not xs:
            continue
        last = max(max(cv["round"]) for cv in series)
        ax.plot(
            [x / last for x in xs] if pl.fraction else xs,
            ys,
            marker="osv^Dxp*"[k % 8],
            markersize=3,
            ls=["-", "--", ":", "-."][k % 4],
            lw=1.2,
            label=f"{c.arm.method} ({len(series)} seeds)",
        )
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    if ref_values:
        ax.axhline(
            statistics.fmean(ref_values),
            color="grey",
            ls=":",
            lw=1.5,
            label=pl.reference_label or pl.reference_column,
        )
    if pl.log:
        ax.set_yscale("log")
    ax.set_xlabel(pl.xlabel or ("fraction of the run's rounds" if pl.fraction else "round"))
    ax.set_ylabel(pl.ylabel)
    ax.set_title(f"Paper {defn.paper}, table {tname}: {pl.ylabel}\n(mean over seeds, per round)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path = out_dir / f"{defn.paper}_{slug}_{pl.stem}.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def _sim_time_plot(defn: Definition, tname: str, slug: str, cells, out_dir: Path, plt):
    """Accuracy vs the simulated wall clock of an asynchronous run (``async/sim_time``, the
    server's clock at each aggregation), mean over seeds; None when no run logs it."""
    col = "strategy/async/sim_time"
    if not any(cv.get(col) for c in cells for cv in c.curves):
        return None
    fig, ax = plt.subplots(figsize=(11, 4.8), dpi=110)
    for k, c in enumerate(cells):
        series = [cv for cv in c.curves if cv.get(col) and cv.get("test/accuracy")]
        if not series:
            continue
        per: dict[int, list[tuple[float, float]]] = {}
        for cv in series:
            for r, tm, acc in zip(cv["round"], cv[col], cv["test/accuracy"]):
                if tm is not None and acc is not None:
                    per.setdefault(r, []).append((tm, 100.0 * acc))
        xs = sorted(r for r in per if len(per[r]) == len(series))
        ax.plot(
            [statistics.fmean(p[0] for p in per[r]) for r in xs],
            [statistics.fmean(p[1] for p in per[r]) for r in xs],
            marker="osv^Dxp*"[k % 8],
            markersize=3,
            ls=["-", "--", ":", "-.", (0, (5, 1))][k % 5],
            lw=1.1,
            label=f"{c.arm.method} ({len(series)} seeds)",
        )
    ax.set_xlabel("simulated wall clock (s; aggregation points of the simulated clients' uploads)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"Paper {defn.paper}, table {tname}: accuracy vs simulated time (mean over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path = out_dir / f"{defn.paper}_{slug}_accuracy_vs_sim_time.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def _mean_curve(
    c: CellResult, col: str, scale: float = 1.0, *, finite: bool = False
) -> tuple[list[int], list[float]]:
    """``col`` per round, mean over the seeds that logged it, over the rounds every one of them
    ran (times ``scale``; ``finite``: non-finite values count as missing)."""
    series = [cv for cv in c.curves if cv.get(col)]
    per: dict[int, list[float]] = {}
    for cv in series:
        for r, v in zip(cv["round"], cv[col]):
            if v is not None and (not finite or math.isfinite(v)):
                per.setdefault(r, []).append(v * scale)
    xs = sorted(r for r in per if len(per[r]) == len(series))
    return xs, [statistics.fmean(per[x]) for x in xs]


def _accuracy_panels(defn, tname, slug, cells, ref, levels, out_dir: Path, plt) -> list[Path]:
    """Accuracy vs round, one panel per paper ε (mean over seeds)."""
    fig, axes = plt.subplots(
        1, len(levels), figsize=(4.2 * len(levels) + 2.5, 4.2), dpi=110, squeeze=False
    )
    for ax, e in zip(axes[0], levels):
        for k, c in enumerate([x for x in cells if x.arm.paper_epsilon == e] + [ref] * bool(ref)):
            xs, ys = _mean_curve(c, "test/accuracy", 100.0)
            if xs:
                ax.plot(
                    xs,
                    ys,
                    marker="osv^Dxp*"[k % 8],
                    markersize=3,
                    lw=1.1,
                    ls="-" if c is ref else "--",
                    label=c.arm.method,
                )
        ax.set_title(f"paper ε = {e:g}")
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test accuracy (%), mean over seeds")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"Paper {defn.paper}, table {tname}: accuracy vs round")
    fig.tight_layout()
    path = out_dir / f"{defn.paper}_{slug}_accuracy_vs_round.png"
    fig.savefig(path)
    plt.close(fig)
    return [path]


def _paper_epsilon_plots(
    defn, tname, slug, cells, ref, out_dir: Path, plt, kinds=PLOT_KINDS
) -> list[Path]:
    """For arms that stand for a paper ε (paper 000): accuracy vs round (one panel per ε),
    accuracy vs the paper's ε per method, and the selected fraction vs the λ_t quantile where
    the runs logged their sparse-vector selection."""
    made: list[Path] = []
    levels = sorted({c.arm.paper_epsilon for c in cells if c.arm.paper_epsilon is not None})
    if "accuracy_vs_round" in kinds:
        made += _accuracy_panels(defn, tname, slug, cells, ref, levels, out_dir, plt)
    if len(levels) > 1 and "accuracy_vs_epsilon" in kinds:
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
        for method in dict.fromkeys(c.arm.method for c in cells):
            pts = sorted(
                (c.arm.paper_epsilon, c.mean, c.std or 0.0)
                for c in cells
                if c.arm.method == method and c.mean is not None
            )
            if pts:
                ax.errorbar(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    yerr=[p[2] for p in pts],
                    marker="o",
                    capsize=3,
                    label=method,
                )
        if ref is not None and ref.mean is not None:
            ax.axhline(ref.mean, color="k", ls=":", lw=1, label=f"{ref.arm.method}")
        ax.set_xscale("log")
        ax.set_xlabel("the paper's ε (per round; our reading in the notes)")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"Paper {defn.paper}, table {tname}: accuracy vs ε (mean ± std over seeds)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / f"{defn.paper}_{slug}_accuracy_vs_epsilon.png"
        fig.savefig(path)
        plt.close(fig)
        made.append(path)
    sel = [c for c in cells if any(cv.get("clients/selected_fraction") for cv in c.curves)]
    if sel and "selection" in kinds:
        fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
        grid = [i / 100 for i in range(0, 101)]
        ax.plot(grid, [1 - r for r in grid], "k-", lw=1, label="a noiseless test: 1 − r_t")
        for k, c in enumerate(sel):
            xs, fr = _mean_curve(c, "clients/selected_fraction")
            _, lv = _mean_curve(c, "strategy/threshold_level")
            if xs and len(lv) == len(fr):
                ax.plot(
                    lv,
                    fr,
                    marker="osv^Dxp*"[k % 8],
                    ls="--",
                    lw=1,
                    markersize=4,
                    label=f"{c.arm.method}, paper ε {c.arm.paper_epsilon:g}",
                )
        ax.set_xlabel("quantile level r_t of λ_t (Eq. 14; rises with the round)")
        ax.set_ylabel("selected fraction (mean over clients and seeds)")
        ax.set_title(f"Paper {defn.paper}: does the sparse-vector test follow λ_t?")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / f"{defn.paper}_{slug}_selected_fraction_vs_threshold.png"
        fig.savefig(path)
        plt.close(fig)
        made.append(path)
    return made


# -- the command ------------------------------------------------------------------------------
def _typed(v: str) -> Any:
    try:
        return yaml.safe_load(v)
    except yaml.YAMLError:
        return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fl-lightning repro", description=__doc__.split("\n")[0])
    p.add_argument("paper", help=f"paper id ({', '.join(list_papers())}) or name")
    p.add_argument("--table", action="append", default=[], help="only this table (repeatable)")
    p.add_argument("--profile", default="scaled", help="scaled (default) or paper")
    p.add_argument("--seeds", type=int, default=None, help="seeds per cell (default: profile's)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    p.add_argument(
        "--store",
        default=None,
        help="store folder (default docs/reproductions/store/<paper>-<profile>)",
    )
    p.add_argument("--out", default=None, help="output folder (default docs/reproductions)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override for every run (part of the points' identity)",
    )
    p.add_argument(
        "--data-root",
        default=None,
        help="data.root for every run (default: the profile's; 'shared' finds "
        "shared/data as the tests do)",
    )
    p.add_argument(
        "--arm",
        action="append",
        default=[],
        help="only this arm of the tables (repeatable; e.g. to try one setting)",
    )
    p.add_argument(
        "--definition",
        default=None,
        help="reproduction definition YAML (default: the shipped one of PAPER)",
    )
    p.add_argument("--report-only", action="store_true", help="run nothing; write documents")
    p.add_argument("--dry-run", action="store_true", help="print the points to run and stop")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.seeds is not None and args.seeds < 1:
            raise ReproError("--seeds: must be >= 1")
        if args.jobs < 1:
            raise ReproError("--jobs: must be >= 1")
        defn = load_definition(
            args.paper, args.profile, Path(args.definition) if args.definition else None
        )
        extra = {}
        for item in args.set:
            if "=" not in item:
                raise ReproError(f"--set: expected KEY=VALUE, got {item!r}")
            k, v = item.split("=", 1)
            extra[k.strip()] = _typed(v.strip())
        tables = defn.tables
        if args.table:
            want = {t.lower() for t in args.table}
            tables = [t for t in defn.tables if {t.table.lower(), t.label.lower()} & want]
            if not tables or not want <= {
                x for t in tables for x in (t.table.lower(), t.label.lower())
            }:
                have = ", ".join(t.label for t in defn.tables)
                raise ReproError(f"--table: {args.table} not all defined for {defn.paper} ({have})")
        defn.tables = tables
        seeds = args.seeds or defn.seeds
        points = plan(defn, seeds=seeds, extra=extra, tables=tables)
        in_tables = {rp.arm.name for rp in points}
        if args.arm:
            unknown = sorted(set(args.arm) - in_tables)
            if unknown:
                raise ReproError(f"--arm: {unknown} not in the chosen tables")
        tuned_for = set(args.arm or in_tables)
        if defn.tune is not None:  # tune the arms whose value a chosen arm takes
            tuned_for = {
                name for name, heirs in defn.tune.inherit.items() if {name, *heirs} & tuned_for
            }
        tpoints = tuning_points(defn, extra=extra, arms=tuned_for)
        root = args.data_root or defn.data_root
        if root == "shared":
            found = find_shared_data()
            if found is None and not args.report_only:
                raise ReproError(
                    "--data-root: shared/data (the MNIST test set) not found beside this "
                    "checkout; set FL_SHARED_DATA or pass --data-root DIR"
                )
            root = str(found) if found else None
    except (ReproError, KeyError) as err:
        msg = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"error: {msg}", file=sys.stderr)
        return 2
    store = ResultStore(Path(args.store or f"docs/reproductions/store/{defn.paper}-{defn.profile}"))
    out_dir = Path(args.out or "docs/reproductions")
    name = f"repro-{defn.paper}-{defn.profile}"
    rc = 0
    if tpoints:  # phase 1: the tuning grid, whose best values set the tables' arms
        trunner = ReproRunner(tpoints, store, name=name, data_root=root, parallel=args.jobs)
        ttodo, tdone, _ = trunner.pending([rp.point for rp in tpoints])
        if args.dry_run:
            print(f"tuning: {len(tpoints)} points, {tdone} finished, {len(ttodo)} to run")
            for p in ttodo:
                print(" ".join(trunner.command_for(p, store.root / "runs" / p.id / "a?")))
        elif ttodo and not args.report_only:
            rc = _run(trunner, tpoints)
    tuning = choose(defn, tpoints, store)
    points = plan(defn, seeds=seeds, extra=extra, tables=defn.tables)  # at the chosen values
    if args.arm:
        points = [rp for rp in points if rp.arm.name in args.arm]
    runner = ReproRunner(points, store, name=name, data_root=root, parallel=args.jobs)
    todo, done, _ = runner.pending([rp.point for rp in points])
    if args.dry_run:
        untuned = [r.arm for r in tuning if r.chosen is None]
        print(
            f"{len(points)} points, {done} finished, {len(todo)} to run"
            + (f" (untuned, at their configured value: {untuned})" if untuned else "")
        )
        for p in todo:
            print(" ".join(runner.command_for(p, store.root / "runs" / p.id / "a?")))
        return 0
    if todo and not args.report_only and rc != 130:
        rc = _run(runner, points) or rc
    command = "fl-lightning repro " + " ".join(
        [defn.paper]
        + [
            f"--table {t.label!r}" if " " in t.label else f"--table {t.label}"
            for t in tables
            if args.table
        ]
        + [f"--profile {defn.profile}", f"--seeds {seeds}"]
        + [f"--arm {a}" for a in args.arm]
        + [f"--set {k}={v}" for k, v in extra.items()]
    )
    write_documents(defn, points, store, out_dir, command, tuning=tuning)
    return rc


def _run(runner: ReproRunner, points: list[ReproPoint]) -> int:
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return runner.run([rp.point for rp in points])
    except KeyboardInterrupt:
        print("interrupted; the documents are written from what finished")
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def write_documents(
    defn: Definition,
    points,
    store: ResultStore,
    out_dir: Path,
    command: str,
    tuning: list[TuneResult] | None = None,
):
    paper = load_paper(defn.paper)
    results = {}
    for t in defn.tables:
        ptab = paper.table(t.table)
        results[t.label] = collect(defn, points, store, t, ptab, ptab.metric)
    verdict_rows = verdicts(defn, results, tuning or [])
    doc = build_json(defn, results, verdict_rows, command, tuning)
    problems = validate_document(doc)
    if problems:  # a defect of this module, not of the user's input
        raise RuntimeError(f"repro: the document breaks its schema: {problems[:3]}")
    out_dir.mkdir(parents=True, exist_ok=True)
    attack = {t.label for t in defn.tables if t.kind == "attack"}  # a few rounds: no curves
    figs = plots(defn, {k: v for k, v in results.items() if k not in attack}, out_dir, tuning)
    for t in defn.tables:
        figs.setdefault(t.label, []).extend(
            copy_images(defn, t, results[t.label][0], store, out_dir)
        )
    (out_dir / f"{defn.paper}.json").write_text(
        json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    )
    (out_dir / f"{defn.paper}.md").write_text(render_markdown(defn, doc, figs, out_dir))
    n = sum(len(c.values) for cs, _ in results.values() for c in cs)
    print(
        f"wrote {out_dir / (defn.paper + '.md')}, {defn.paper}.json and "
        f"{sum(len(v) for v in figs.values())} figures ({n} finished runs in the tables)"
    )
    return doc


if __name__ == "__main__":
    sys.exit(main())
