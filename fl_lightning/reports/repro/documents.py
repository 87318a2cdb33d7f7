"""The report's documents: ``<paper>.json`` (built from the cells, verdicts and tuning, and
checked against its schema) and ``<paper>.md`` (verdicts, tables, tuning, deviations, the
figures), and the attacks' images copied beside them."""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

from fl_lightning.reports.repro.cells import ArmCells, CellResult, TableResults, one_provenance
from fl_lightning.reports.repro.claims import POSITIVE_MIN, VERDICTS, _diagnostics
from fl_lightning.reports.repro.definition import Arm, Definition, TableDef
from fl_lightning.reports.repro.figures import TUNING_FIGURES
from fl_lightning.reports.repro.points import TuneResult, processor_label
from fl_lightning.reports.repro.setting import same_setting_except
from fl_lightning.reports.repro.stats import kendall
from fl_lightning.reports.tables import load_paper
from fl_lightning.sweeps.store import ResultStore

# asynchronous local DP (paper 004): shown when a table's runs log them
BUDGET_COLUMNS = [
    {"key": "clients_exited_mean", "header": "Clients exited", "digits": 1},
    {"key": "last_round_dispatched_mean", "header": "Uploads in the last round", "digits": 1},
    {"key": "epsilon_paper_max_mean", "header": "Paper ε spent (max)", "digits": 3},
    {"key": "weight_max_mean", "header": "Largest weight of one upload", "digits": 3},
    {"key": "epsilon_frozen_mean", "header": "Uploads with ε frozen", "digits": 1},
]


def _setting(defn: Definition, arm: Arm) -> dict[str, Any]:
    return {"configs": defn.base + arm.configs, **arm.overrides}


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
    out: dict[str, Any] = {
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
    if c.provenance:
        out["provenance"] = c.provenance[0]
    if c.other_rows:  # rows of another provenance: listed, not pooled into the mean
        out["other_rows"] = c.other_rows
    return out


def _column(t: TableDef, c: CellResult) -> str:
    """The paper column of a cell: its dimensions beyond the method (e.g. its ε)."""
    dims = {**c.arm.where, **t.paper_where.get(c.arm.name, {})}
    return ", ".join(f"{k} = {v}" for k, v in sorted(dims.items())) or "all"


def kendall_columns(t: TableDef, cells: list[CellResult]) -> list[dict[str, Any]]:
    """Kendall τ within each column of the table (one privacy level), never pooled across
    columns (:func:`~fl_lightning.reports.repro.stats.kendall`: only over >= 5 items)."""
    groups: dict[str, list[CellResult]] = {}
    for c in cells:
        groups.setdefault(_column(t, c), []).append(c)
    out = []
    for col, cs in groups.items():
        k = kendall([c.mean for c in cs], [c.paper for c in cs])
        out.append(
            {
                "column": col,
                "tau": None if k["tau"] is None else round(k["tau"], 4),
                "p_value": None if k["p_value"] is None else round(k["p_value"], 4),
                "n": k["n"],
            }
        )
    return out


def build_json(
    defn: Definition,
    results: TableResults,
    verdict_rows: list[dict[str, Any]],
    command: str,
    tuning: list[TuneResult] | None = None,
    *,
    arm_cells: ArmCells | None = None,
    merged: list[dict[str, Any]] | None = None,
    commit: dict[str, Any] | None = None,
    positive: dict[str, float | None] | None = None,
    top: dict[str, Any] | None = None,
    registered: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The report's JSON; ``top``: top-level entries computed elsewhere (the registered
    plans' deviations, the verified re-runs)."""
    tables: list[dict[str, Any]] = []
    arm_cells = arm_cells or {}
    for t in defn.tables:
        if t.label not in results:
            continue
        cells, ref = results[t.label]
        cols = kendall_columns(t, cells)
        one = cols[0] if len(cols) == 1 else None
        extra: dict[str, Any] = {}
        if t.label != t.table:
            extra = {"paper_table": t.table, "overrides": t.overrides}
        if t.metric:
            extra["metric"] = t.metric
        if t.reference_metric:
            extra["reference_metric"] = t.reference_metric
        reference = None
        if ref is not None:
            reference = cell_json(defn, ref)
            same = same_setting_except(defn, t, ref.arm.name)
            reference["same_setting_except"] = same["keys"]
            reference["differs_in_setting_keys"] = same["setting_keys"]
            reference["same_setting_except_per_arm"] = same["per_arm"]
        entry: dict[str, Any] = {
            "table": t.label,
            "kind": t.kind,
            **extra,
            "where": t.where,
            "cells": [cell_json(defn, c) for c in cells],
            "kendall_tau": None if one is None else one["tau"],
            "p_value": None if one is None else one["p_value"],
            "kendall_n": None if one is None else one["n"],
            "kendall_by_column": cols,
            "nonprivate_reference": reference,
            "controls": [
                cell_json(defn, one_provenance(arm_cells[t.label][a], registered))
                for a in t.controls
                if a in arm_cells.get(t.label, {})
            ],
        }
        if t.kind == "attack":
            pc = arm_cells.get(t.label, {}).get(t.positive_control or "")
            entry["positive_control"] = (
                None
                if pc is None
                else {
                    **cell_json(defn, pc),
                    "attack_accuracy": (positive or {}).get(t.label),
                    "minimum": POSITIVE_MIN,
                }
            )
        tables.append(entry)
    doc: dict[str, Any] = {
        "paper": defn.paper,
        "profile": defn.profile,
        "command": command,
        "commit": commit,
        "tables": tables,
    }
    doc.update(
        {
            "verdicts": verdict_rows,
            "merged_claims": merged or [],
            "coverage": coverage_json(defn, results),
            "deviations": defn.deviations,
            "scale": defn.scale,
        }
    )
    doc.update(top or {})
    if defn.tune is not None:
        doc["tuning"] = tuning_json(defn, tuning or [])
    return doc


def coverage_json(defn: Definition, results: TableResults) -> list[dict[str, Any]]:
    """The definition's coverage list; an item marked run whose tables have no finished run
    is reported as not_run (with that reason)."""
    out = []
    for c in defn.coverage:
        item = dict(c)
        labels = [str(x) for x in c.get("tables") or []]
        if c["status"] == "run" and labels:
            ran = sum(len(x.values) for lb in labels if lb in results for x in results[lb][0])
            if not ran:
                item["status"] = "not_run"
                item["reason"] = f"tables {labels} have no finished run in the store"
        out.append(item)
    return out


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
    all_tables = list(doc.get("tables") or [])
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
    lines += verdicts_markdown(doc)
    by_label = {d.label: d for d in defn.tables}
    for t in doc["tables"]:
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
        if ref is not None:
            same = ref.get("same_setting_except") or []
            lines.append(
                "\nThe reference differs from the private arms in: "
                + (", ".join(f"`{k}`" for k in same) if same else "nothing")
                + (
                    ". **Not the same setting**: it differs in "
                    + ", ".join(f"`{k}`" for k in ref["differs_in_setting_keys"])
                    + " from "
                    + ", ".join(
                        f"`{a}`"
                        for a, ks in ref["same_setting_except_per_arm"].items()
                        if set(ks) & set(ref["differs_in_setting_keys"])
                    )
                    + "."
                    if ref.get("differs_in_setting_keys")
                    else "."
                )
            )
        lines += _controls_markdown(t, digits)
        lines.append("")
        lines += _kendall_markdown(t)
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


def _controls_markdown(t: dict[str, Any], digits: int) -> list[str]:
    out = []
    for c in t.get("controls") or []:
        m = "—" if c["ours_mean"] is None else f"{c['ours_mean']:.{digits}f}"
        sd = "" if c["ours_std"] is None else f" ± {c['ours_std']:.{digits}f}"
        out.append(
            f"\nControl (mechanism off, same setting) {c['method']} (`{c['arm']}`): **{m}**{sd} "
            f"over {c['seeds']} seeds; guarantee: {c['guarantee']}."
        )
    if t.get("kind") == "accuracy" and not t.get("controls"):
        out.append("\nNo control arm (the mechanism switched off in this setting) has run.")
    if t.get("kind") == "attack":
        pc = t.get("positive_control")
        if pc is None:
            out.append(
                "\nNo positive control (the attack on the non-private model): every verdict on "
                "this table is untestable."
            )
        else:
            acc = pc.get("attack_accuracy")
            out.append(
                f"\nPositive control (the attack on the non-private model, `{pc['arm']}`): "
                + ("not run" if acc is None else f"**{acc:.3f}**")
                + f" over {pc['seeds']} seeds (needs >= {pc['minimum']} for the table to be "
                "testable)."
            )
    return out


def _kendall_markdown(t: dict[str, Any]) -> list[str]:
    out = []
    for k in t.get("kendall_by_column") or []:
        where = f" at {k['column']}" if len(t["kendall_by_column"]) > 1 else ""
        if k["tau"] is None:
            out.append(f"Kendall τ{where}: n/a ({k['n']} methods with both values; needs >= 5).")
        else:
            out.append(
                f"Kendall τ-b{where} between our order and the paper's: **{k['tau']:.3f}** "
                f"(p = {_f(k['p_value'], 3)}, {k['n']} methods; our means at two decimals, equal "
                "ones count as ties)."
            )
    return [" ".join(out)] if out else []


def _test_cell(v: dict[str, Any]) -> str:
    t = v.get("test")
    if not t:
        return v.get("reason", "—")
    lo, hi = t["ci95"]
    mde = "—" if t["mde"] is None else f"{t['mde']:.2f}"
    paper = "side only" if v.get("paper_value_note") else f"{t['paper_value']:+.2f}"
    return (
        f"{t['estimate']:+.2f} [{lo:+.2f}, {hi:+.2f}], n = {t['n']}; "
        f"paper {paper}, null {t['null_value']:g}; MDE {mde}"
    )


def verdicts_markdown(doc: dict[str, Any]) -> list[str]:
    """The verdicts table (each with its test or its reason), the merged claims, the
    coverage of the paper and the provenance of the points."""
    lines = [
        "",
        "## Verdicts",
        "",
        "Each verdict is the paired test by seed (95 % t interval of the differences; MDE: the "
        "smallest effect detectable at that n, α = 0.05, power 80 %). The label follows from the "
        "interval: *scope value* — confirmed when the paper's value is inside and 0 outside, "
        "contradicted when the paper's value is outside, inconclusive when both are inside; "
        "*scope direction* (the claim is only that A beats B) — confirmed / contradicted when "
        "the interval lies wholly on the paper's / the other side of 0, else inconclusive. "
        "Untestable: the stored data cannot decide it (reason given). H: headline claim "
        "(n >= 5 pairs).",
        "",
        "| Claim | Verdict | Scope | Test: estimate [95 % CI], n; paper; MDE | Evidence |",
        "|---|---|---|---|---|",
    ]
    for v in doc["verdicts"]:
        h = " (H)" if v.get("headline") else ""
        ev = v["evidence"] + (f" ({v['headline_wanted']})" if v.get("headline_wanted") else "")
        plan = v.get("plan") or {}
        status = (
            "confirmatory"
            if v.get("confirmatory")
            else "exploratory"
            + (f": {v['confirmatory_note']}" if v.get("confirmatory_note") else "")
        )
        ev += (
            f" Reading: {v.get('reading', '?')}. Plan `{str(plan.get('sha256', ''))[:12]}` "
            f"registered {plan.get('registered_at', 'never')}; {status}."
        )
        lines.append(
            f"| {v['claim']}{h} | **{v['verdict']}** | {v.get('scope', 'value')} | "
            f"{_test_cell(v)} | {ev} |"
        )
    lines += _plans_markdown(doc)
    if doc.get("merged_claims"):
        lines += [
            "",
            "Claims not tested because their runs serve another verdict (no run serves two "
            "verdicts; more seeds of their arms would test them):",
            "",
        ]
        for m in doc["merged_claims"]:
            why = m.get("reason") or f"its runs serve “{'; '.join(m['merged_into'])}”"
            lines.append(f"- {m['claim']}: {why}.")
    cov = doc.get("coverage") or []
    if cov:
        lines += [
            "",
            "## Coverage of the paper",
            "",
            "| Paper claim / table | Status | Reason / our tables |",
            "|---|---|---|",
        ]
        for c in cov:
            why = c.get("reason") or ", ".join(str(x) for x in c.get("tables") or [])
            lines.append(f"| {c['claim']} | {c['status']} | {why} |")
    commit = doc.get("commit") or {}
    if commit:
        ran = ", ".join(f"`{c['commit'][:12]}` ({c['points']})" for c in commit.get("ran_at", []))
        added = ", ".join(
            f"`{c['commit'][:12]}` ({c['points']})" for c in commit.get("added_to_store_by", [])
        )
        lines += [
            "",
            "Provenance of the points (commit, number of points): "
            + (f"ran at {ran}" if ran else "")
            + ("; " if ran and added else "")
            + (
                f"stored before rows recorded the code's commit, added to the store by {added}"
                if added
                else ""
            )
            + ".",
        ]
    return lines


def _plans_markdown(doc: dict[str, Any]) -> list[str]:
    """Scale, the plans changed after their runs (old verdict beside the new) and the
    verified re-runs of stored cells."""
    out: list[str] = []
    scale = doc.get("scale") or {}
    if scale:
        out += [
            "",
            f"Scale: our steps are {scale.get('steps_fraction')} of the paper's and our data "
            f"{scale.get('data_fraction')} of its data. {scale.get('note', '')}".rstrip(),
        ]
    devs = doc.get("plan_deviations") or []
    if devs:
        out += ["", "Plans or rules changed after registration (old result beside new):", ""]
        for d in devs:
            if "registered_label" in d:  # the claim logic changed after the plan's registration
                out.append(
                    f"- verdict {d['verdict']}, {d['claim']}: registered under rules "
                    f"`{d['rules_registered']}`, shown under `{d['rules_now']}`; label under the "
                    f"registered rules **{d['registered_label']}**, shown **{d['label']}**. "
                    f"{d.get('reason', '')}".rstrip()
                )
                continue
            then = d.get("verdict_then") or {}
            out.append(
                f"- {d['claim']}: plan `{d['sha256'][:12]}` registered {d['registered_at']}, "
                f"superseded {d.get('superseded_at')}; its verdict then: "
                f"{then.get('verdict', 'none')} {then.get('test', '')}".rstrip()
            )
    ver = doc.get("verification") or []
    if ver:
        out += [
            "",
            "Stored cells re-run (`fl-lightning repro P --verify K`) with each row's recorded "
            "threads: every stored metric compared. A row re-runs to the last digit on the "
            "processor that made it (rows record it since 2026-11-29; earlier ones do not).",
            "",
            "| Run | Threads | Re-run at | Processor (row; re-run) | Metrics compared "
            "| Identical |",
            "|---|---|---|---|---|---|",
        ]
        for e in ver:
            same = "yes" if e["identical"] else "no: " + ", ".join(e.get("differs") or [])
            cpus = "; ".join(processor_label(e.get(k)) for k in ("stored_machine", "machine"))
            out.append(
                f"| {e['run']} | {e['threads']} | `{str(e['commit'])[:12]}` | {cpus} | "
                f"{e['metrics_compared']} | {same} |"
            )
    gone = doc.get("verification_replaced") or []
    if gone:
        out += [
            "",
            f"Verifications of {len(gone)} earlier row(s) that a re-run has since replaced "
            "(`--rerun-elsewhere`: the row was made on another processor): "
            + "; ".join(
                f"{e['run']} at `{str(e.get('stored_commit'))[:12]}`, re-run at "
                f"`{str(e['commit'])[:12]}`: "
                + ("identical" if e["identical"] else "differed in " + ", ".join(e["differs"]))
                for e in gone
            )
            + ".",
        ]
    return out


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


def _cell_row_eps(
    c: dict[str, Any], d: dict[str, Any], ours_s: str, ro: str, rp: str, has_sel: bool
) -> str:
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
