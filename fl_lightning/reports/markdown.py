"""The Markdown of a report: ours vs the paper per cell, the ranking, the figures."""

from __future__ import annotations

from pathlib import Path

from fl_lightning.reports.compare import Comparison, Ranking


def _f(x: float | None, digits: int = 2, signed: bool = False) -> str:
    if x is None:
        return "—"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def cell_table(comp: Comparison) -> str:
    unit = comp.table.unit
    head = [
        "| Method | ε (target) | ε (measured) | Ours | Paper | Ours − paper | Runs |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = []
    for c in comp.cells:
        ours = "—"
        if c.mean is not None:
            ours = _f(c.mean) + (f" ± {_f(c.std)}" if c.std is not None else "")
        eps_t = "—" if c.epsilon is None else f"{c.epsilon:g}"
        rows.append(
            f"| {c.method} | {eps_t} | {_f(c.eps_mean, 3)} | {ours} | {_f(c.paper)} | "
            f"{_f(c.difference, signed=True)} | {len(c.runs)} |"
        )
    note = f"Values in {unit}; ours are mean ± sample std over seeds." if unit else ""
    return "\n".join(head + rows) + ("\n\n" + note if note else "")


def competition_ranks(values: list[float], higher_is_better: bool, digits: int = 2) -> list[str]:
    """Ranks 1, 2, 2=, ... : values equal at ``digits`` decimals share a rank, marked '='."""
    keyed = [round(v, digits) for v in values]
    out = []
    for v in keyed:
        better = sum(1 for w in keyed if (w > v if higher_is_better else w < v))
        tied = keyed.count(v) > 1
        out.append(f"{better + 1}{'=' if tied else ''}")
    return out


def ranking_section(rank: Ranking, higher_is_better: bool) -> str:
    if not rank.methods:
        return "No method has both our runs and a paper value: no ranking."
    order = "higher is better" if higher_is_better else "lower is better"
    ours_rank = dict(zip(rank.methods, competition_ranks(rank.ours, higher_is_better)))
    paper_rank = competition_ranks(rank.paper, higher_is_better)
    lines = [
        f"Methods ranked by the mean over the ε both sides have ({order}).",
        "",
        "| Method | Paper | Paper rank | Ours | Our rank |",
        "|---|---|---|---|---|",
    ]
    for i, m in enumerate(rank.methods):
        lines.append(
            f"| {m} | {_f(rank.paper[i])} | {paper_rank[i]} | {_f(rank.ours[i])} | {ours_rank[m]} |"
        )
    lines.append("")
    lines.append(
        "Equal values (at two decimals) share a rank, marked '='; τ-b counts them as ties."
    )
    lines.append("")
    if rank.tau is None:
        lines.append(f"Kendall τ: n/a ({rank.note}).")
    else:
        lines.append(
            f"Kendall τ between our ranking and the paper's: **{rank.tau:.3f}** "
            f"(p = {rank.p_value:.3g}, {len(rank.methods)} methods)."
        )
    return "\n".join(lines)


def runs_section(comp: Comparison) -> str:
    """Every matched run: its parameters, final metric, ε and wall time."""
    lines = [
        "| Run | Method | Parameters | Ours | ε (measured) | Wall time (s) |",
        "|---|---|---|---|---|---|",
    ]
    for c in comp.cells:
        for run, value in zip(c.runs, c.ours):
            params = ", ".join(f"`{k}={v}`" for k, v in sorted(run.params.items()))
            eps = run.metrics.get("privacy/epsilon")
            eps_s = _f(eps, 3) if isinstance(eps, (int, float)) else "—"
            lines.append(
                f"| {run.id} | {c.method} | {params} | {_f(value)} | {eps_s} | "
                f"{_f(run.wall_time_s, 1)} |"
            )
    return "\n".join(lines)


def render(
    comp: Comparison, rank: Ranking, figures: dict[str, Path | None], *, source: str, out_dir: Path
) -> str:
    t, p = comp.table, comp.paper
    where = ", ".join(f"{k} = {v}" for k, v in comp.where.items()) or "none"
    lines = [
        f"# Paper {p.id} ({p.name}), Table {t.id}: ours vs the paper",
        "",
        f"*{p.title}* — {p.citation}.",
        "",
        f"**Table {t.id}.** {t.caption}",
        "",
        f"- Runs: `{source}` ({sum(len(c.runs) for c in comp.cells)} finished runs matched"
        + (f", {comp.unmatched_runs} without `{comp.metric}`" if comp.unmatched_runs else "")
        + (f", {comp.filtered_runs} left out by --where" if comp.filtered_runs else "")
        + ")",
        f"- Our metric: `{comp.metric}`" + (" × 100" if comp.scale != 1 else ""),
        f"- Method from: `{comp.method_key or '(all runs one method)'}`; "
        f"ε from: `{comp.eps_key or '(none)'}`",
        f"- Table restricted to: {where}",
        f"- Paper settings: `{t.settings}`",
    ]
    for r in t.remarks:
        lines.append(f"- Note on the paper's table: {r}")
    lines += [
        "",
        "## Per cell",
        "",
        cell_table(comp),
        "",
        "## Ranking",
        "",
        ranking_section(rank, t.higher_is_better),
        "",
        "## Figures",
        "",
    ]
    for title, path in figures.items():
        if path is None:
            lines.append(f"- {title}: no data (needs per-round metrics.csv of local runs)")
        else:
            rel = path.relative_to(out_dir) if path.is_relative_to(out_dir) else path
            lines += [f"### {title}", "", f"![{title}]({rel.as_posix()})", ""]
    lines += ["## Runs", "", runs_section(comp), ""]
    return "\n".join(lines).rstrip() + "\n"
