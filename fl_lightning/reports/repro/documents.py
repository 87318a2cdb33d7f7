"""The report's documents: ``<paper>.json`` (built from the cells, verdicts and tuning, and
checked against its schema) and ``<paper>.md`` (verdicts, tables, tuning, deviations, the
figures), and the attacks' images copied beside them."""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Any

from fl_lightning.reports.repro.cells import CellResult, TableResults
from fl_lightning.reports.repro.claims import VERDICTS, _diagnostics, kendall
from fl_lightning.reports.repro.definition import Arm, Definition, TableDef
from fl_lightning.reports.repro.figures import TUNING_FIGURES
from fl_lightning.reports.repro.points import TuneResult
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
    defn: Definition,
    results: TableResults,
    verdict_rows: list[dict[str, Any]],
    command: str,
    tuning: list[TuneResult] | None = None,
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
