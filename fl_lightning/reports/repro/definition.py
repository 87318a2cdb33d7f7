"""A paper's reproduction definition: ``repro_specs/<paper>.yaml`` read into a
:class:`Definition` (its arms, table views, tuning grid, diagnostic plots and columns, per
profile), with one-line errors (:class:`ReproError`: ``<field>: <why>``) naming the bad field."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from fl_lightning.reports.tables import load_paper

PROFILES = ("scaled", "paper")
# the diagnostic columns of a table in the Markdown (key of ``_diagnostics``, header, decimals)
DEFAULT_COLUMNS = [
    {"key": "rounds_mean", "header": "Rounds", "digits": 1},
    {"key": "anr_fired_mean", "header": "ANR firings", "digits": 1},
    {"key": "final_noise_multiplier_mean", "header": "Final σ", "digits": 3},
]
_DIGITS = {"rounds_mean": 1, "anr_fired_mean": 1}  # decimals of a column given as key: header
PLOT_KINDS = ("accuracy_vs_round", "accuracy_vs_epsilon", "selection")
TABLE_KINDS = ("accuracy", "attack", "other")
COVERAGE_STATUS = ("run", "not_run", "untestable")
READINGS = ("published", "variant")  # the paper's algorithm as printed; an implementer's reading
CLAIM_RULES = ("better", "lower", "close", "pooled", "peak", "tracks")


class ReproError(ValueError):
    """A bad definition or argument (the message is one line: ``<field>: <why>``)."""


@dataclass
class Arm:
    name: str
    method: str
    configs: list[str]
    overrides: dict[str, Any]
    note: str = ""
    where: dict[str, Any] = field(default_factory=dict)  # the arm's own paper cell (e.g. its ε)
    paper_epsilon: float | None = None  # the paper's ε this arm stands for (printed beside ours)
    seeds: int | None = None  # more seeds than the profile's (headline arms: n >= 5 pairs)
    # the arm's seeds start here: an arm whose comparison arm's first seeds already serve
    # another verdict runs only the fresh ones (no run serves two verdicts)
    first_seed: int = 0


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
    controls: list[str] = field(default_factory=list)
    """Control arms in the table's setting: the mechanism switched off (e.g. clip only, σ = 0)."""
    positive_control: str | None = None
    """Attack tables: the attack on the non-private model (its success makes the table testable)."""
    classes: int = 10  # the task's classes: chance is 100 / classes %

    @property
    def extra_arms(self) -> list[str]:
        """The arms run beside the table's own: its reference, controls and positive control."""
        out = [a for a in [self.reference, *self.controls, self.positive_control] if a]
        return [a for i, a in enumerate(out) if a not in self.arms and a not in out[:i]]

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
    coverage: list[dict[str, Any]] = field(default_factory=list)
    """Every headline claim / table of the paper: ``claim``, ``status`` (run / not_run /
    untestable), ``reason`` unless run, and ``tables`` (our labels) where run."""
    chosen: dict[str, Any] = field(default_factory=dict)  # arm -> tuned value (filled by main)
    scale: dict[str, Any] = field(default_factory=dict)
    """Ours as a fraction of the paper's: ``steps_fraction``, ``data_fraction``, ``note``."""


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


def _whole(raw: dict[str, Any], key: str, where: str, *, minimum: int) -> int | None:
    """``raw[key]`` as a whole number of at least ``minimum`` (None when absent); anything
    else is one line naming ``where.key``."""
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ReproError(f"{where}.{key}: expected a whole number, got {value!r}")
    if value < minimum:
        raise ReproError(f"{where}.{key}: must be >= {minimum}")
    return value


def claim_seeds(claim: dict[str, Any], where: str) -> frozenset[int] | None:
    """The seeds a claim's comparisons may pair (``seeds: [0, 1, 2, 3, 4]``), declared with the
    arms' seeds so that a headline does not take the seeds planned for a later comparison of
    the same arms; None: every seed both arms have. Checked when the definition loads."""
    seeds = claim.get("seeds")
    if seeds is None:
        return None
    if not isinstance(seeds, list) or not seeds:
        raise ReproError(f"{where}.seeds: expected a non-empty list of seeds, got {seeds!r}")
    for seed in seeds:  # whole numbers >= 0, as an arm's first_seed (``_whole``)
        _whole({"seeds": seed}, "seeds", where, minimum=0)
    return frozenset(seeds)


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
            seeds=_whole(a, "seeds", f"{where}.arms.{name}", minimum=1),
            first_seed=_whole(a, "first_seed", f"{where}.arms.{name}", minimum=0) or 0,
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
            controls=[str(x) for x in t.get("controls") or []],
            positive_control=t.get("positive_control"),
            classes=int(t.get("classes", 10)),
        )
        if tdef.kind not in TABLE_KINDS:
            raise ReproError(
                f"{tw}.kind: expected one of {', '.join(TABLE_KINDS)}, got {tdef.kind!r}"
            )
        if tdef.label in {x.label for x in tables}:
            raise ReproError(f"{tw}.label: {tdef.label!r} used twice (give each view a label)")
        for a in tdef.paper_cells:
            if a not in tdef.arms:
                raise ReproError(f"{tw}.paper_cells: {a!r} is not an arm of the table")
        for kind in tdef.plots or []:
            if kind not in PLOT_KINDS:
                raise ReproError(f"{tw}.plots: {kind!r} is not one of {', '.join(PLOT_KINDS)}")
        for a in tdef.arms + tdef.extra_arms:
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
    labels = {t.label for t in tables}
    claims = list(raw.get("claims") or [])
    for i, c in enumerate(claims):
        _check_claim(c, f"{where}.claims[{i}]", labels, arms)
    coverage = list(raw.get("coverage") or [])
    for i, c in enumerate(coverage):
        cw = f"{where}.coverage[{i}]"
        if not isinstance(c, dict) or not c.get("claim"):
            raise ReproError(f"{cw}.claim: missing")
        if c.get("status") not in COVERAGE_STATUS:
            raise ReproError(f"{cw}.status: expected one of {', '.join(COVERAGE_STATUS)}")
        if c["status"] != "run" and not c.get("reason"):
            raise ReproError(f"{cw}.reason: missing (status {c['status']})")
    scale = dict(prof.get("scale") or {})
    for key in ("steps_fraction", "data_fraction") if scale else ():
        if (
            isinstance(scale.get(key), bool)
            or not isinstance(scale.get(key), (int, float))
            or scale[key] <= 0
        ):
            raise ReproError(f"{where}.profiles.{profile}.scale.{key}: expected a number > 0")
    return Definition(
        scale=scale,
        paper=pid,
        title=str(raw.get("title", "")),
        profile=profile,
        base=base,
        arms=arms,
        tables=tables,
        claims=claims,
        coverage=coverage,
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


def _check_claim(c: Any, where: str, labels: set[str], arms: dict[str, Arm]) -> None:
    """A claim names one rule, its table(s) and its arms; ``scope`` is value or direction;
    ``paper_value`` a number (or one per ``than`` arm)."""
    if not isinstance(c, dict):
        raise ReproError(f"{where}: expected a mapping")
    rules = [r for r in CLAIM_RULES if r in c]
    if len(rules) != 1:
        raise ReproError(f"{where}: expected exactly one of {', '.join(CLAIM_RULES)}")
    if c.get("scope", "value") not in ("value", "direction"):
        raise ReproError(f"{where}.scope: expected 'value' or 'direction'")
    claim_seeds(c, where)
    pv = c.get("paper_value")
    if pv is not None and not isinstance(pv, (int, float, list)):
        raise ReproError(f"{where}.paper_value: expected a number or a list of numbers")
    if c.get("headline") and not (c.get("confirmatory") and c.get("seeds")):
        raise ReproError(
            f"{where}.confirmatory: a headline claim is confirmatory (confirmatory: true and its "
            "own fresh seeds: [...], run under its registered plan)"
        )
    if c.get("reading") is not None and c["reading"] not in READINGS:
        raise ReproError(
            f"{where}.reading: expected published (the paper's algorithm as printed) or variant "
            f"(an implementer's reading), got {c.get('reading')!r}"
        )
    gaps = c.get("gaps_filled")
    if gaps is not None and not (isinstance(gaps, list) and all(isinstance(g, str) for g in gaps)):
        raise ReproError(f"{where}.gaps_filled: expected a list of what the implementer chose")
    reg = c.get("registered_label")
    if reg is not None and not (isinstance(reg, dict) and {"rules", "label"} <= set(reg)):
        raise ReproError(f"{where}.registered_label: expected {{rules, label, reason}}")
    act = c.get("min_activity")
    if act is not None:
        if not isinstance(act, dict) or not {"arm", "column", "per_run"} <= set(act):
            raise ReproError(f"{where}.min_activity: expected {{arm, column, per_run}}")
        if act["arm"] not in arms:
            raise ReproError(f"{where}.min_activity.arm: unknown arm {act['arm']!r}")
        if isinstance(act["per_run"], bool) or not isinstance(act["per_run"], (int, float)):
            raise ReproError(f"{where}.min_activity.per_run: expected a number")
    if rules[0] == "pooled":
        pairs = c["pooled"]
        if not isinstance(pairs, list) or not pairs:
            raise ReproError(f"{where}.pooled: expected a list of {{table, arm, than}}")
        for j, p in enumerate(pairs):
            if not isinstance(p, dict) or str(p.get("table")) not in labels:
                raise ReproError(f"{where}.pooled[{j}].table: not a table label")
            for a in (p.get("arm"), p.get("than")):
                if a not in arms:
                    raise ReproError(f"{where}.pooled[{j}]: unknown arm {a!r}")
            pv_j = p.get("paper_value")
            if pv_j is not None and (isinstance(pv_j, bool) or not isinstance(pv_j, (int, float))):
                raise ReproError(f"{where}.pooled[{j}].paper_value: expected a number")
        return
    if str(c.get("table")) not in labels:
        raise ReproError(f"{where}.table: {c.get('table')!r} is not a table label")
