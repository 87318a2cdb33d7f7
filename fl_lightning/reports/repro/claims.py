"""Each claim's verdict, decided mechanically from the stored runs.

A claim compares arms (``better`` / ``lower`` / ``close``: one arm against others;
``pooled``: several pairs of arms, one test over all their paired differences; ``peak``: a
tuning grid's value against the others; ``tracks``: a per-run statistic against a threshold).
Every comparison is the paired test of :mod:`~fl_lightning.reports.repro.stats` (by seed) and
its label follows from the test's interval, the paper's value of the same estimand
(``paper_value``) and the null value by :func:`~fl_lightning.reports.repro.stats.label`
(``scope: value`` by default, ``scope: direction`` where the paper's claim is only "A beats B").

A comparison is **untestable**, with the reason, when the stored data say it cannot decide the
claim (:func:`untestable_reasons`): an attack table whose positive control failed or is missing,
arms whose guarantees are in different privacy units, an arm with a NaN loss, a mechanism that
never fired, both arms near chance, arms identical seed for seed, fewer than 2 pairs.

No run serves two verdicts: claims are decided headline first, then in the definition's order,
and each takes only runs no earlier verdict took (and only the seeds it names in ``seeds``); a
claim left with fewer than 2 pairs is merged into the verdict that holds its runs (listed with
the reason). A headline claim needs n >= 5 pairs; with fewer its verdict stands but not as a
headline. The per-cell diagnostics (rounds, ANR firings, final σ, cosines, budgets) that the
evidence and the tables cite are here too."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from fl_lightning.reports.repro.cells import ArmCells, CellResult
from fl_lightning.reports.repro.definition import Definition, ReproError, TableDef, claim_seeds
from fl_lightning.reports.repro.points import TuneResult
from fl_lightning.reports.repro.stats import (
    VERDICTS,
    Test,
    describe_mde,
    label,
    mean_test,
)

__all__ = ["VERDICTS", "verdicts", "untestable_reasons", "selection_tracking", "privacy_unit"]

HEADLINE_N = 5  # a headline verdict needs at least this many pairs
MIN_PAIRS = 2  # below this no interval exists
POSITIVE_MIN = 0.55  # an attack table's positive control must reach this (fraction)
REFERENCE_MIN = 90.0  # % a setting's non-private reference must reach (the standard's floor)
NEAR_CHANCE_PT = 15.0  # both arms within this many points of chance: untestable
# a mechanism's action count per round (logged counters): ANR's noise decays, GCFL's
# projections (Eq. 12). A run whose counter stays 0 ran as the arm without the mechanism
FIRING = {"strategy/anr_fired": "ANR", "strategy/projected": "GCFL's projection"}
ORDER = {"contradicted": 0, "inconclusive": 1, "confirmed": 2}  # worst first


def privacy_unit(c: CellResult) -> str | None:
    """The unit of the runs' ε: ``record-level`` or ``client-level`` (local DP per client is
    client-level); a run that claims no guarantee but logs the sound ε of its noise
    (``privacy/epsilon_sound``: client-level where strategies log it, NbAFL and the budgeted
    uploads) counts as client-level; None for a non-private run or an unstated unit."""
    units = set()
    for m, cv in zip(c.metrics, c.curves):
        g = str(m.get("privacy/guarantee") or "").strip()
        sound = isinstance(m.get("privacy/epsilon_sound"), (int, float)) or any(
            x is not None for x in (cv or {}).get("strategy/epsilon_sound", [])
        )
        if g.startswith("record-level"):
            units.add("record-level")
        elif g.startswith(("client-level", "local")) or (g.startswith("none") and sound):
            units.add("client-level")
    return units.pop() if len(units) == 1 else None


def _fired(c: CellResult, seeds: frozenset[int] | None = None) -> dict[str, int]:
    """Per mechanism the arm logs a firing column for: its total firings over its runs (of
    ``seeds``, where given)."""
    out: dict[str, int] = {}
    for col, name in FIRING.items():
        logged = [
            cv[col]
            for s, cv in zip(c.seeds, c.curves)
            if cv and col in cv and (seeds is None or s in seeds)
        ]
        if logged:
            out[name] = int(sum(sum(x or 0 for x in xs) for xs in logged))
    return out


@dataclass
class Pair:
    """One comparison: the estimand is mean(a) − mean(b), paired by seed (a = the arm the
    claim says is ahead on the table's metric)."""

    table: TableDef
    a: CellResult
    b: CellResult

    def name(self) -> str:
        return f"{self.a.arm.method} − {self.b.arm.method}"


def untestable_reasons(
    p: Pair, positive: float | None, seeds: frozenset[int] | None = None
) -> list[str]:
    """Why the stored data cannot decide this comparison (empty: it can). ``positive``: the
    attack table's positive control (attack on the non-private model, as a fraction);
    ``seeds``: the claim's own seeds, where it names them (the pairs its test would use)."""
    t, a, b = p.table, p.a, p.b
    out = []
    if t.kind == "attack":
        if t.positive_control is None or positive is None:
            out.append(
                "the attack table has no positive control (the attack on the non-private "
                "model) run: a failing attack and a private model look the same"
            )
        elif positive < POSITIVE_MIN:
            out.append(
                f"the attack's positive control (the non-private model) reaches only "
                f"{positive:.3f} < {POSITIVE_MIN}: the attack does not work in this setting, so "
                "its values on private models measure nothing"
            )
    ua, ub = privacy_unit(a), privacy_unit(b)
    if ua and ub and ua != ub:
        out.append(
            f"{a.arm.method}'s ε is {ua} and {b.arm.method}'s {ub}: equal ε in different "
            "privacy units is no matched privacy"
        )
    for c in (a, b):
        if c.diverged:
            out.append(
                f"{c.arm.method} diverged (NaN or infinite loss) in {c.diverged}/{len(c.values)} "
                "runs: a win over a diverged run says nothing about the method"
            )
    fa, fb = _fired(a, seeds), _fired(b, seeds)
    for c, mine, other, rival in ((a, fa, fb, b), (b, fb, fa, a)):
        for mech, n in mine.items():
            if n == 0 and mech not in other and rival.curves:
                out.append(
                    f"{mech} never fired in {c.arm.method}'s {len(c.curves)} runs: it ran as the "
                    "arm without it, so the comparison does not test it"
                )
    if t.kind == "accuracy" and t.percent and a.mean is not None and b.mean is not None:
        chance = 100.0 / t.classes
        if max(a.mean, b.mean) <= chance + NEAR_CHANCE_PT:
            out.append(
                f"both arms near chance ({a.mean:.1f} and {b.mean:.1f} %, chance {chance:.0f} %, "
                f"both within {NEAR_CHANCE_PT:.0f} pt): neither learned enough to rank methods"
            )
    both = sorted(s for s in set(a.seeds) & set(b.seeds) if seeds is None or s in seeds)
    va, vb = a.by_seed(), b.by_seed()
    if len(both) >= MIN_PAIRS and all(va[s][0] == vb[s][0] for s in both):
        out.append(
            f"{a.arm.method} and {b.arm.method} gave identical results seed for seed "
            f"({len(both)} seeds): the arms are identical at this scale (what distinguishes "
            "them did not change the metric), and a zero-width interval is no evidence"
        )
    return out


def idle_runs(c: CellResult, seeds: frozenset[int] | None = None) -> dict[str, list[int]]:
    """Per mechanism the cell logs an action counter for (:data:`FIRING`): the seeds (of
    ``seeds``, where given) of the runs in which it never acted. Paired with the arm without
    the mechanism, such a run is a tie by construction, not a measured equality."""
    out: dict[str, list[int]] = {}
    for col, name in FIRING.items():
        idle = [
            s
            for s, cv in zip(c.seeds, c.curves)
            if cv
            and col in cv
            and (seeds is None or s in seeds)
            and not any(x for x in cv[col] or [])
        ]
        logged = any(cv and col in cv for cv in c.curves)
        if logged:
            out[name] = idle
    return out


def _ties_note(pairs: list[Pair], seeds: frozenset[int] | None) -> str:
    """The evidence's note on runs in which the compared mechanism never acted."""
    notes = []
    for p in pairs:
        for c in (p.a, p.b):
            mine = [s for s in c.seeds if seeds is None or s in seeds]
            for mech, idle in idle_runs(c, seeds).items():
                if idle and mine:
                    notes.append(
                        f"{mech} never acted in {len(idle)} of {len(mine)} runs of "
                        f"{c.arm.method} (seeds {', '.join(map(str, idle))}): those pairs are "
                        "ties by construction (the arm ran as the one without it), not measured "
                        "equalities"
                    )
    return ". " + "; ".join(dict.fromkeys(notes)) if notes else ""


@dataclass
class Outcome:
    """A comparison's test with the runs it used."""

    pair: Pair | None
    test: Test | None
    runs: list[str]
    paper_value: float
    label: str = "inconclusive"
    text: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _paired(
    p: Pair, used: set[str], seeds: frozenset[int] | None = None
) -> tuple[list[float], list[str]]:
    """The paired differences a − b over the seeds both arms have (only ``seeds`` where the
    claim names them), skipping runs in ``used``."""
    va, vb = p.a.by_seed(), p.b.by_seed()
    diffs, runs = [], []
    for s in sorted(set(va) & set(vb)):
        if seeds is not None and s not in seeds:
            continue
        (x, ia), (y, ib) = va[s], vb[s]
        if ia in used or ib in used:
            continue
        diffs.append(x - y)
        runs += [ia, ib]
    return diffs, runs


def _weak_reference(t: TableDef, cells: ArmCells) -> list[str]:
    """The standard's floor for an accuracy comparison: the setting's non-private reference
    must reach :data:`REFERENCE_MIN` %, else the setting itself does not learn well enough to
    rank methods by accuracy."""
    ref = cells.get(t.label, {}).get(t.reference or "")
    if ref is None or ref.mean is None or not t.percent or t.metric:
        return []
    if ref.mean >= REFERENCE_MIN:
        return []
    return [
        f"the setting's non-private reference ({ref.arm.method}) reaches {ref.mean:.1f} % "
        f"< {REFERENCE_MIN:.0f} % over {len(ref.values)} runs: the setting does not learn well "
        "enough for an accuracy verdict"
    ]


def _pooled_columns(
    columns: list[tuple[Pair, list[float], float | None]],
    null: float,
    scope: str,
    unit: str,
    d: int,
) -> tuple[list[dict[str, Any]], Outcome | None]:
    """Each pooled column's own paired test beside its paper value, and the column whose
    interval excludes its paper value (the worst such, None if none does): a pool is not
    "confirmed" by averaging columns that disagree with the paper."""
    out: list[dict[str, Any]] = []
    worst: Outcome | None = None
    for p, ds, pv in columns:
        test = mean_test(ds, f"paired t (by seed), column {p.name()} of the pooled claim")
        if test is None:
            out.append(
                {
                    "column": p.name(),
                    "table": p.table.label,
                    "n": len(ds),
                    "paper_value": pv,
                    "estimate": None,
                    "ci95": None,
                }
            )
            continue
        col = {"column": p.name(), "table": p.table.label, **test.as_json(pv or 0.0, null)}
        col["paper_value"] = pv
        col["holds_null"] = test.ci95[0] <= null <= test.ci95[1]  # this column alone: no sign
        out.append(col)
        if pv is None:
            continue
        o = Outcome(p, test, [], pv)
        o.label = label(test.ci95, pv, null, scope)
        if o.label == "contradicted":
            gap = min(abs(pv - test.ci95[0]), abs(pv - test.ci95[1]))
            if worst is None or gap > worst.extra.get("gap", 0.0):
                o.extra["gap"] = gap
                worst = o
    return out, worst


def _too_little_activity(
    claim: dict[str, Any], pairs: list[Pair], seeds: frozenset[int] | None
) -> list[str]:
    """The registered plan's ``min_activity: {arm, column, per_run}``: the mechanism that
    distinguishes the arms must act at least ``per_run`` times a run (summed over rounds, mean
    over the arm's runs of the claim's seeds), else the comparison does not test it."""
    need = claim.get("min_activity")
    if not need:
        return []
    for p in pairs:
        for c in (p.a, p.b):
            if c.arm.name != need["arm"]:
                continue
            per = [
                sum(x or 0 for x in (cv or {}).get(need["column"], []))
                for s, cv in zip(c.seeds, c.curves)
                if seeds is None or s in seeds
            ]
            if not per:
                return []
            mean = sum(per) / len(per)
            if mean < float(need["per_run"]):
                return [
                    f"{need['column']} acted {mean:.1f} times a run in {c.arm.method}'s "
                    f"{len(per)} runs; the registered plan requires >= {need['per_run']} for "
                    "the comparison to test the mechanism (it acted far less than in the paper)"
                ]
            return []
    return []


def _unit(t: TableDef) -> str:
    return " pt" if t.percent else ""


def _ms(c: CellResult, d: int = 2) -> str:
    if c.mean is None:
        return "—"
    std = f" ± {c.std:.{d}f}" if c.std is not None else ""
    return f"{c.mean:.{d}f}{std} (n={len(c.values)})"


def _paper_values(claim: dict[str, Any], k: int, where: str) -> tuple[list[float], bool]:
    """One paper value per comparison; the second item is False where the paper gives none
    (then +1 only marks the side of a direction claim)."""
    pv = claim.get("paper_value")
    if pv is None:
        if claim.get("scope") != "direction":
            raise ReproError(f"{where}.paper_value: missing (needed unless scope: direction)")
        return [1.0] * k, False
    vals = [float(x) for x in pv] if isinstance(pv, list) else [float(pv)] * k
    if len(vals) != k:
        raise ReproError(f"{where}.paper_value: one value per compared arm ({k})")
    return vals, True


def _only(c: CellResult, runs: set[str]) -> CellResult:
    """The cell restricted to ``runs`` (its mean and spread over the runs a test pairs)."""
    keep = [(v, i) for v, i in zip(c.values, c.ids) if i in runs] or list(zip(c.values, c.ids))
    return CellResult(
        c.arm, c.paper, [v for v, _ in keep], [], [], [], [], c.planned, ids=[i for _, i in keep]
    )


def _test_text(o: Outcome, unit: str, d: int) -> str:
    assert o.test is not None and o.pair is not None
    t = o.test
    lo, hi = t.ci95
    a, b = (_only(c, set(o.runs)) for c in (o.pair.a, o.pair.b))  # the test's runs, not the cell's
    return (
        f"{o.pair.a.arm.method} {_ms(a, d)} vs {o.pair.b.arm.method} {_ms(b, d)}: "
        f"paired difference {t.estimate:+.{d}f}{unit}, 95 % CI [{lo:+.{d}f}, {hi:+.{d}f}] "
        f"(n = {t.n} pairs); "
        + (
            "the paper gives no figure (direction only)"
            if o.extra.get("sign_only")
            else f"paper {o.paper_value:+.{d}f}{unit}"
        )
    )


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


def _verdict_of(outcomes: list[Outcome], scope: str, null: float) -> tuple[str, Outcome]:
    """Each comparison's label from its interval; the claim's is the worst (every
    comparison must hold: an intersection-union test, so no multiplicity correction), shown
    with that comparison's test (ties: the lower interval bound)."""
    for o in outcomes:
        assert o.test is not None
        o.label = label(o.test.ci95, o.paper_value, null, scope)
    worst = min(outcomes, key=lambda o: (ORDER[o.label], o.test.ci95[0]))  # type: ignore[union-attr]
    return worst.label, worst


def _claim_pairs(
    claim: dict[str, Any], cells: ArmCells, tables: dict[str, TableDef], where: str
) -> list[Pair]:
    def get(label_: str, arm: str) -> CellResult:
        c = cells.get(label_, {}).get(arm)
        if c is None:
            raise ReproError(f"{where}: arm {arm!r} is not in table {label_!r}")
        return c

    if "pooled" in claim:
        return [
            Pair(
                tables[str(p["table"])],
                get(str(p["table"]), p["arm"]),
                get(str(p["table"]), p["than"]),
            )
            for p in claim["pooled"]
        ]
    t = str(claim["table"])
    rule: Any = claim.get("better") or claim.get("lower")
    if "close" in claim:
        rule = {"arm": claim["close"]["arm"], "than": [claim["close"]["to"]]}
    if not isinstance(rule, dict) or "arm" not in rule or "than" not in rule:
        raise ReproError(f"{where}: expected {{arm, than}} (better / lower) or {{arm, to}} (close)")
    a = get(t, rule["arm"])
    others = [get(t, b) for b in rule["than"]]
    if "lower" in claim:  # the others are ahead on the metric (e.g. attack accuracy)
        return [Pair(tables[t], o, a) for o in others]
    return [Pair(tables[t], a, o) for o in others]


def _notes(cs: list[CellResult]) -> str:
    notes = []
    for c in cs:
        d = _diagnostics(c)
        if "anr_fired_mean" in d:
            notes.append(
                f"{c.arm.method}: ANR fired {d['anr_fired_mean']:.1f} times a run, "
                f"{d.get('rounds_mean', 0):.1f} rounds, final σ "
                f"{d.get('final_noise_multiplier_mean', float('nan')):.2f}"
            )
    return " (" + "; ".join(notes) + ")" if notes else ""


def _context(claim: dict[str, Any]) -> str:
    out = ""
    if claim.get("paper"):
        out += f". Paper: {claim['paper']}"
    if claim.get("reading"):
        kind = {
            "published": "the paper's algorithm as printed",
            "variant": "an implementer's reading",
        }
        out += f". Reading: {kind.get(claim['reading'], claim['reading'])}"
        if claim.get("reading_note"):
            out += f" ({claim['reading_note']})"
    return out


def _positive(t: TableDef, cells: ArmCells) -> float | None:
    """The positive control's mean attack metric as a fraction (None: not run)."""
    if t.positive_control is None:
        return None
    c = cells.get(t.label, {}).get(t.positive_control)
    if c is None or c.mean is None:
        return None
    return c.mean / 100.0 if t.percent else c.mean


def verdicts(
    defn: Definition,
    cells: ArmCells,
    tuning: list[TuneResult] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The verdicts (in the definition's order) and the claims merged into another verdict
    because their runs serve it."""
    tables = {t.label: t for t in defn.tables}
    order = sorted(range(len(defn.claims)), key=lambda i: (not defn.claims[i].get("headline"), i))
    used: dict[str, int] = {}  # run id -> index of the claim whose verdict holds it
    done: dict[int, dict[str, Any]] = {}
    merged: list[dict[str, Any]] = []
    for i in order:
        claim = defn.claims[i]
        where = f"claims[{i}]"
        labels = (
            [str(p["table"]) for p in claim["pooled"]]
            if "pooled" in claim
            else [str(claim.get("table"))]
        )
        if any(lb not in cells for lb in labels):
            continue  # a table not chosen (--table)
        row = _decide(defn, claim, cells, tables, tuning or [], set(used), where)
        if row is None:
            continue
        if row.get("merged_into_runs"):
            holders = sorted({used[r] for r in row.pop("merged_into_runs") if r in used})
            merged.append(
                {
                    "claim": row["claim"],
                    "table": row["table"],
                    "merged_into": [str(defn.claims[h].get("claim")) for h in holders],
                    "reason": "its runs already serve the verdict(s) named and no run serves "
                    "two verdicts, so it is not tested on them (more seeds of its arms would "
                    "test it)",
                }
            )
            continue
        for r in row["runs"]:
            used[r] = i
        done[i] = row
    for row in done.values():  # the metric it reads: two metrics of one run are two tests
        t = tables[row["table"]]
        row["metric"] = t.metric or "accuracy"
    merged += _one_label(done, tables)
    return [done[i] for i in sorted(done)], merged


def _one_label(
    done: dict[int, dict[str, Any]], tables: dict[str, TableDef]
) -> list[dict[str, Any]]:
    """One comparison, one label: a tested verdict whose runs all lie among the runs of an
    earlier tested verdict, or among the runs an untestable verdict inspected (the same arms
    and seeds, a table of the same kind, the same metric) is the same comparison. It is
    removed from ``done`` and returned as merged into that verdict, whose label it takes."""
    out = []
    for i in sorted(done):
        row = done[i]
        a = set(row.get("runs") or [])
        if row["verdict"] == "untestable" or not a:
            continue
        for j in sorted(done):
            w = done[j]
            if j == i or (w["verdict"] != "untestable" and j > i):
                continue
            key = "runs_inspected" if w["verdict"] == "untestable" else "runs"
            b = set(w.get(key) or [])
            same = (
                tables[row["table"]].kind == tables[w["table"]].kind
                and row["metric"] == w["metric"]
            )
            if same and b and a <= b:
                out.append(
                    {
                        "claim": row["claim"],
                        "table": row["table"],
                        "merged_into": [w["claim"]],
                        "label_then": row["verdict"],
                        "label": w["verdict"],
                        "reason": f"the same comparison as “{w['claim']}” (its {len(a)} runs are "
                        f"among that verdict's, on the same metric): one comparison gets one "
                        f"label, '{w['verdict']}'"
                        + (f" ({w['reason']})" if w.get("reason") else ""),
                    }
                )
                del done[i]
                break
    return out


def _base(claim: dict[str, Any], table: str, scope: str) -> dict[str, Any]:
    row: dict[str, Any] = {"claim": str(claim.get("claim")), "table": table, "scope": scope}
    if claim.get("headline"):
        row["headline"] = True
    return row


def _untestable(
    row: dict[str, Any], reasons: list[str], inspected: list[str], text: str
) -> dict[str, Any]:
    row.update(
        verdict="untestable",
        reason="; ".join(dict.fromkeys(reasons)),
        evidence=text or "see reason",
        runs=[],  # no inference is drawn from them, so they serve no verdict
        runs_inspected=inspected,
    )
    return row  # a headline stays the headline, labelled untestable with its reason


def _finish(
    row: dict[str, Any],
    o: Outcome,
    null: float,
    unit: str,
    d: int,
    text: str,
    paired: bool = True,
) -> dict[str, Any]:
    assert o.test is not None
    if paired and o.test.n >= MIN_PAIRS and o.test.sd == 0:  # zero-width: no evidence
        return _untestable(
            row,
            [
                f"every one of the {o.test.n} paired differences equals {o.test.estimate:+g}"
                f"{unit} (standard deviation 0, interval of zero width): the arms are identical "
                "at this scale, and a degenerate interval is no evidence for a label"
            ],
            sorted(set(o.runs) | set(row.get("runs") or [])),
            text,
        )
    row["verdict"] = o.label
    lo, hi = o.test.ci95
    pv = o.paper_value
    if (
        o.label == "contradicted"
        and (pv - null) * (o.test.estimate - null) > 0
        and (lo > pv if pv > null else hi < pv)
    ):  # the effect lies beyond the paper's, on its side: a reader would read the opposite
        row["contradicted_direction"] = "in the paper's favour"
        text += (
            "; contradicted in the paper's favour: the interval lies beyond the paper's value, "
            "on its side (the effect is larger than the paper reports, not absent)"
        )
    row["test"] = o.test.as_json(round(o.paper_value, 4), null)
    row["test"]["comparison"] = o.pair.name() if o.pair else o.extra.get("name", "")
    row["test"]["mde_text"] = describe_mde(o.test, unit)
    row["evidence"] = text + f"; {describe_mde(o.test, unit)}"
    if row.get("headline") and o.test.n < HEADLINE_N:
        row.pop("headline")
        row["headline_wanted"] = (
            f"a headline claim needs n >= {HEADLINE_N} pairs; n = {o.test.n} (run more seeds of "
            "its arms), so this verdict is not a headline"
        )
    return row


def _decide(
    defn: Definition,
    claim: dict[str, Any],
    cells: ArmCells,
    tables: dict[str, TableDef],
    tuning: list[TuneResult],
    used: set[str],
    where: str,
) -> dict[str, Any] | None:
    scope = str(claim.get("scope", "value"))
    first = str(claim["pooled"][0]["table"]) if "pooled" in claim else str(claim.get("table"))
    row = _base(claim, first, scope)
    tdef = tables[first]
    unit, d = _unit(tdef), (2 if tdef.percent else 3)
    if "peak" in claim:
        return _peak(row, claim, cells, tuning, used, where, unit, d)
    if "tracks" in claim:
        return _tracks(row, claim, cells, used, where)
    null = float(claim.get("null_value", 0.0))
    pairs = _claim_pairs(claim, cells, tables, where)
    only = claim_seeds(claim, where)
    pvs, given = _paper_values(claim, len(pairs), where)
    if "pooled" in claim and len(set(pvs)) > 1:
        raise ReproError(f"{where}.paper_value: a pooled claim has one paper value")
    if not given:
        row["paper_value_note"] = "the paper gives no figure for this estimand: +1 marks its side"
    inspected = sorted({i for p in pairs for i in (*p.a.ids, *p.b.ids)})
    reasons = {
        id(p): untestable_reasons(p, _positive(p.table, cells), only)
        + _weak_reference(p.table, cells)
        for p in pairs
    }
    context = (
        _notes([c for p in pairs for c in (p.a, p.b)]) + _ties_note(pairs, only) + _context(claim)
    )
    if "pooled" in claim:
        ok = [p for p in pairs if not reasons[id(p)]]
        left = [f"{p.name()} ({'; '.join(reasons[id(p)])})" for p in pairs if reasons[id(p)]]
        if not ok:
            return _untestable(row, [r for p in pairs for r in reasons[id(p)]], inspected, context)
        diffs: list[float] = []
        runs: list[str] = []
        columns: list[tuple[Pair, list[float], float | None]] = []
        for p, spec in zip(pairs, claim["pooled"]):
            if p not in ok:
                continue
            ds, rs = _paired(p, used, only)
            diffs += ds
            runs += rs
            col_pv = spec.get("paper_value")
            columns.append((p, ds, None if col_pv is None else float(col_pv)))
        if len(runs) != len(set(runs)):
            raise ReproError(
                f"{where}.pooled: an arm appears in two pairs (its runs would count twice)"
            )
        every_run = [_paired(p, set(), only) for p in ok]  # whether or not a verdict took it
        if len(diffs) < MIN_PAIRS:
            if sum(len(ds) for ds, _ in every_run) >= MIN_PAIRS:
                return {**row, "merged_into_runs": [r for _, rs in every_run for r in rs]}
            return _untestable(row, [f"fewer than {MIN_PAIRS} paired seeds"], inspected, context)
        test = mean_test(diffs, "paired t (by seed), pooled over pairs")
        assert test is not None
        o = Outcome(
            None, test, runs, pvs[0], extra={"name": "pooled: " + ", ".join(p.name() for p in ok)}
        )
        o.label = label(test.ci95, o.paper_value, null, scope)
        lo, hi = test.ci95
        neg = sum(x < 0 for x in diffs)
        text = (
            "pooled over "
            + "; ".join(f"{p.name()} (table {p.table.label})" for p in ok)
            + f": mean paired difference {test.estimate:+.{d}f}{unit}, 95 % CI [{lo:+.{d}f}, "
            f"{hi:+.{d}f}] (n = {test.n} pairs, {neg} of {test.n} negative); paper "
            f"{o.paper_value:+.{d}f}{unit}"
        )
        if left:
            text += "; left out as untestable: " + "; ".join(left)
        row["runs"] = runs
        cols, worst = _pooled_columns(columns, null, scope, unit, d)
        if worst is not None:  # a column's own test contradicts the paper: it decides
            text += (
                f"; but column {worst.pair.name()} (table {worst.pair.table.label}) alone "  # type: ignore[union-attr]
                f"gives {worst.test.estimate:+.{d}f}{unit} [{worst.test.ci95[0]:+.{d}f}, "  # type: ignore[union-attr]
                f"{worst.test.ci95[1]:+.{d}f}], which excludes its paper value "  # type: ignore[union-attr]
                f"{worst.paper_value:+.{d}f}{unit}: the pool's agreement is an average of "
                "columns that disagree, so the claim is decided by that column"
            )
            row = _finish(row, worst, null, unit, d, text + context)
            row["test"]["columns"] = cols  # every column's own test, beside the one deciding
            row["pooled_test"] = test.as_json(round(o.paper_value, 4), null)
            return row
        row = _finish(row, o, null, unit, d, text + context)
        row["test"]["columns"] = cols
        return row
    bad = [r for p in pairs for r in reasons[id(p)]]
    idle = _too_little_activity(claim, pairs, only)
    if idle:  # the plan's mechanism barely acted: no comparison tests it
        return _untestable(row, idle + bad, inspected, context.lstrip(". ("))
    outcomes = []
    for p, pv in zip(pairs, pvs):
        if reasons[id(p)]:
            continue
        ds, rs = _paired(p, used, only)
        if len(ds) < MIN_PAIRS:
            ds_all, rs_all = _paired(p, set(), only)
            if len(ds_all) >= MIN_PAIRS:
                return {**row, "merged_into_runs": rs_all}
            return _untestable(
                row,
                [f"{p.name()}: fewer than {MIN_PAIRS} paired seeds finished"],
                inspected,
                context,
            )
        test = mean_test(ds, "paired t (by seed)")
        outcomes.append(Outcome(p, test, rs, pv, extra={"sign_only": not given}))
    if bad:  # a claim over several comparisons: one contradicted comparison still decides it
        if outcomes:
            _verdict_of(outcomes, scope, null)
        against = [o for o in outcomes if o.label == "contradicted"]
        if not against:
            return _untestable(row, bad, inspected, context.lstrip(". ("))
        outcomes = against
        context = f". Other comparisons untestable: {'; '.join(dict.fromkeys(bad))}" + context
    verdict, worst = _verdict_of(outcomes, scope, null)
    row["runs"] = sorted({r for o in outcomes for r in o.runs})
    texts = [_test_text(o, unit, d) + f" → {o.label}" for o in outcomes]
    text = "; ".join(texts)
    if len(outcomes) > 1:
        text += f". The claim needs every comparison; decided by {worst.pair.name()}"  # type: ignore[union-attr]
    return _finish(row, worst, null, unit, d, text + context)


def _peak(
    row: dict[str, Any],
    claim: dict[str, Any],
    cells: ArmCells,
    tuning: list[TuneResult],
    used: set[str],
    where: str,
    unit: str,
    d: int,
) -> dict[str, Any]:
    """``value`` is the best of the arm's tuning grid (or of ``among``): paired by seed against
    every other value, as a direction claim."""
    peak = claim["peak"]
    res = next((r for r in tuning if r.arm == peak["arm"]), None)
    if res is None:
        raise ReproError(f"{where}.peak: arm {peak['arm']!r} is not tuned")
    row["scope"] = "direction"
    mine = res.runs.get(repr(peak["value"]), {})
    among = [v for v in res.values if repr(v) != repr(peak["value"])]
    if peak.get("among") is not None:
        among = [v for v in among if v in peak["among"]]
    grid = ", ".join(f"{v}: {res.mean(v):.2f}" for v in res.values if res.mean(v) is not None)
    inspected = sorted({i for v in res.runs.values() for _, i in v.values()})
    outcomes = []
    for v in among:
        other = res.runs.get(repr(v), {})
        seeds = [
            s
            for s in sorted(set(mine) & set(other))
            if mine[s][1] not in used and other[s][1] not in used
        ]
        if len(seeds) < MIN_PAIRS:
            return _untestable(
                row,
                [
                    f"{len(seeds)} paired seed(s) between {peak['value']} and {v} in the "
                    f"tuning grid ({res.method}; tuning seeds = {len(mine)}): no interval"
                ],
                inspected,
                f"{res.method}: {grid}{_context(claim)}",
            )
        diffs = [mine[s][0] - other[s][0] for s in seeds]
        test = mean_test(diffs, "paired t (by seed)")
        o = Outcome(None, test, [i for s in seeds for i in (mine[s][1], other[s][1])], 1.0)
        o.extra["name"] = f"{res.method} at {peak['value']} − at {v}"
        outcomes.append(o)
    if not outcomes:
        return _untestable(row, ["no other grid value to compare"], inspected, grid)
    verdict, worst = _verdict_of(outcomes, "direction", 0.0)
    row["runs"] = sorted({r for o in outcomes for r in o.runs})
    row["paper_value_note"] = "the paper gives the peak's location only: +1 marks its side"
    return _finish(
        row,
        worst,
        0.0,
        unit,
        d,
        f"{res.method}: {grid}; decided by {worst.extra['name']}{_context(claim)}",
    )


def _tracks(
    row: dict[str, Any], claim: dict[str, Any], cells: ArmCells, used: set[str], where: str
) -> dict[str, Any]:
    """The run's selected fraction follows 1 − r_t: the mean over runs of its correlation with
    it, against ``TRACK_CORR`` (direction: the claim is correlation above it)."""
    arm = claim["tracks"].get("arm")
    c = cells.get(row["table"], {}).get(arm)
    if c is None:
        raise ReproError(f"{where}.tracks: arm {arm!r} is not in table {row['table']!r}")
    row["scope"] = "direction"
    per = [
        (x["corr"], i)
        for cv, i in zip(c.curves, c.ids)
        if i not in used and (x := selection_tracking(cv)) is not None and math.isfinite(x["corr"])
    ]
    if len(per) < MIN_PAIRS:
        logged = [i for cv, i in zip(c.curves, c.ids) if selection_tracking(cv) is not None]
        if len(logged) >= MIN_PAIRS:
            return {**row, "merged_into_runs": logged}
        return _untestable(
            row, [f"{len(per)} run(s) logged the selection"], list(c.ids), _context(claim)
        )
    test = mean_test([x for x, _ in per], "one-sample t over runs")
    assert test is not None
    o = Outcome(
        None, test, [i for _, i in per], 1.0, extra={"name": f"{c.arm.method}: correlation"}
    )
    o.label = label(test.ci95, 1.0, TRACK_CORR, "direction")
    lo, hi = test.ci95
    text = (
        f"{c.arm.method} ({test.n} runs): correlation of the selected fraction with 1 − r_t over "
        f"rounds {test.estimate:.3f}, 95 % CI [{lo:.3f}, {hi:.3f}]; follows = correlation above "
        f"{TRACK_CORR} (perfect tracking: 1){_context(claim)}"
    )
    row["runs"] = o.runs
    row["paper_value_note"] = "perfect tracking (1) marks the side; the threshold is null_value"
    return _finish(row, o, TRACK_CORR, "", 3, text, paired=False)


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
