"""The report's PNG figures: per table, accuracy and ε vs round (mean over seeds), accuracy vs
ε, accuracy vs the simulated clock, the definition's diagnostic curves, the panels of arms that
stand for a paper ε (000), and the tuning grid."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from fl_lightning.reports.repro.cells import CellResult, TableResults
from fl_lightning.reports.repro.definition import PLOT_KINDS, Definition, PlotDef, TableDef
from fl_lightning.reports.repro.points import TuneResult

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TUNING_FIGURES = "__tuning__"


def _save(fig: Figure, path: Path) -> Path:
    """Lays ``fig`` out, writes it to ``path`` and closes it: how every report figure ends."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plots(
    defn: Definition,
    results: TableResults,
    out_dir: Path,
    tuning: list[TuneResult] | None = None,
    *,
    highlight: dict[str, set[str]] | None = None,
    controls: dict[str, list[CellResult]] | None = None,
) -> dict[str, list[Path]]:
    """Accuracy vs round and ε vs round per method (mean over seeds); accuracy vs ε where the
    table has more than one ε. A table with several privacy levels draws accuracy vs round one
    panel per level (:func:`_level_panels`); ``highlight``: per table, the arms its verdicts
    compare; ``controls``: per table, its control arms (drawn in every panel)."""
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
            if (
                col == "test/accuracy"
                and tdef is not None
                and len(_levels(tdef, cells).keys() - {"all"}) > 1
            ):
                path = _level_panels(
                    defn,
                    tname,
                    cells,
                    [*(controls or {}).get(tname, []), *([ref] if ref else [])],
                    (highlight or {}).get(tname, set()),
                    out_dir / f"{defn.paper}_{slug}_{stem}.png",
                )
                if path is not None:
                    made.append(path)
                continue
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
                made.append(_save(fig, out_dir / f"{defn.paper}_{slug}_{stem}.png"))
            else:
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
                        [statistics.fmean(c.values)],  # c.mean, known non-empty here
                        yerr=[c.std or 0],
                        marker="o",
                        capsize=3,
                        label=c.arm.method,
                    )
            ax.set_xlabel("ε reported")
            ax.set_ylabel("test accuracy (%)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            path = _save(fig, out_dir / f"{defn.paper}_{slug}_accuracy_vs_epsilon.png")
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
            param = defn.tune.param.replace(".", "_")
            figs[TUNING_FIGURES] = [_save(fig, out_dir / f"{defn.paper}_tuning_{param}.png")]
        else:
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
    return _save(fig, out_dir / f"{defn.paper}_{slug}_{pl.stem}.png")


def _sim_time_plot(
    defn: Definition,
    tname: str,
    slug: str,
    cells: list[CellResult],
    out_dir: Path,
    plt: ModuleType,  # matplotlib.pyplot, imported lazily by plots()
) -> Path | None:
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
    return _save(fig, out_dir / f"{defn.paper}_{slug}_accuracy_vs_sim_time.png")


_LEVEL = re.compile(r"\s*\((?:ε|eps|epsilon)\s*=\s*[^)]*\)\s*$")


def _levels(t: TableDef, cells: list[CellResult]) -> dict[str, list[CellResult]]:
    """The table's cells by privacy level (the paper column beyond the method, e.g. its ε)."""
    out: dict[str, list[CellResult]] = {}
    for c in cells:
        dims = {**c.arm.where, **t.paper_where.get(c.arm.name, {})}
        key = ", ".join(f"{k} = {v}" for k, v in sorted(dims.items()) if k != "dataset")
        if not key:  # no paper cell names it (e.g. an ε beyond the paper's): the arm's label
            m = _LEVEL.search(c.arm.method)
            key = m.group(0).strip(" ()") if m else ""
        out.setdefault(key.replace("epsilon", "ε") or "all", []).append(c)
    return out


def _family(c: CellResult) -> str:
    """The method without its privacy level ("ADP-FL, rising (ε = 1)" -> "ADP-FL, rising"):
    one colour per family across the panels."""
    return _LEVEL.sub("", c.arm.method)


def _spread(c: CellResult, col: str, scale: float) -> tuple[list[int], list[float], list[float]]:
    """Per round (every seed ran): the mean ± one standard deviation over seeds."""
    series = [cv for cv in c.curves if cv.get(col)]
    per: dict[int, list[float]] = {}
    for cv in series:
        for r, v in zip(cv["round"], cv[col]):
            if v is not None and math.isfinite(v):
                per.setdefault(r, []).append(v * scale)
    xs = sorted(r for r in per if len(per[r]) == len(series))
    lo, hi = [], []
    for x in xs:
        m = statistics.fmean(per[x])
        sd = statistics.stdev(per[x]) if len(per[x]) > 1 else 0.0
        lo.append(m - sd)
        hi.append(m + sd)
    return xs, lo, hi


def _level_panels(
    defn: Definition,
    tname: str,
    cells: list[CellResult],
    shared: list[CellResult],
    highlight: set[str],
    path: Path,
) -> Path | None:
    """Accuracy vs round, one panel per privacy level, one colour per method family in every
    panel, the seeds' spread (± 1 SD) shaded; the arms a verdict compares drawn thick (the
    others thin and faded); ``shared`` (the non-private reference, the controls) dotted in
    every panel."""
    import matplotlib.pyplot as plt

    tdef = next(t for t in defn.tables if t.label == tname)
    levels = _levels(tdef, cells)
    shared = [*levels.pop("all", []), *shared]  # arms without a level: in every panel
    fams: list[str] = []
    for c in [*cells, *shared]:
        if _family(c) not in fams:
            fams.append(_family(c))
    cmap = plt.get_cmap("tab10" if len(fams) <= 10 else "tab20")
    colour = {f: cmap(i % cmap.N) for i, f in enumerate(fams)}
    n = len(levels)
    fig, axes = plt.subplots(
        1, n, figsize=(max(4.0 * n + 1.0, 9.0), 5.6), dpi=110, sharey=True, squeeze=False
    )
    handles: dict[str, Any] = {}
    for ax, (lvl, cs) in zip(axes[0], sorted(levels.items(), key=lambda kv: _num_key(kv[0]))):
        for c in [*cs, *shared]:
            if not any(cv.get("test/accuracy") for cv in c.curves):
                continue
            xs, ys = _mean_curve(c, "test/accuracy", 100.0)
            sx, lo, hi = _spread(c, "test/accuracy", 100.0)
            hot = c.arm.name in highlight
            dotted = c in shared
            col = colour[_family(c)]
            (line,) = ax.plot(
                xs,
                ys,
                color=col,
                lw=2.6 if hot else 1.1,
                alpha=1.0 if hot or dotted else 0.7,
                ls=":" if dotted else "-",
            )
            ax.fill_between(sx, lo, hi, color=col, alpha=0.18 if hot else 0.08, lw=0)
            seeds = sum(1 for cv in c.curves if cv.get("test/accuracy"))
            handles.setdefault(f"{_family(c)}" + (" (in every panel)" if dotted else ""), line)
            if hot:
                ax.annotate(
                    "verdict",
                    (xs[-1], ys[-1]),
                    xytext=(-40, 8 if ys[-1] < 80 else -14),
                    textcoords="offset points",
                    fontsize=7,
                    color=col,
                )
            del seeds
        ax.set_title(lvl, fontsize=10)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test accuracy (%)")
    fig.suptitle(
        f"Paper {defn.paper}, table {tname}: accuracy vs round, one panel per privacy level\n"
        "(mean over seeds, ± 1 SD shaded; thick: the arms a verdict compares)",
        fontsize=10,
    )
    fig.legend(
        list(handles.values()),
        list(handles.keys()),
        fontsize=8,
        loc="lower center",
        ncol=2,
        frameon=False,
    )
    rows = (len(handles) + 1) // 2
    fig.subplots_adjust(left=0.07, right=0.98, top=0.84, bottom=0.12 + 0.035 * rows, wspace=0.08)
    fig.savefig(path)
    plt.close(fig)
    return path


def _num_key(label: str) -> tuple[float, str]:
    nums = re.findall(r"[-+]?\d*\.?\d+", label)
    return (float(nums[0]) if nums else math.inf, label)


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


def _accuracy_panels(
    defn: Definition,
    tname: str,
    slug: str,
    cells: list[CellResult],
    ref: CellResult | None,
    levels: list[float],
    out_dir: Path,
    plt: ModuleType,
) -> list[Path]:
    """Accuracy vs round, one panel per paper ε (mean over seeds)."""
    fig, axes = plt.subplots(
        1, len(levels), figsize=(4.2 * len(levels) + 2.5, 4.2), dpi=110, squeeze=False
    )
    for ax, e in zip(axes[0], levels):
        for k, c in enumerate(
            [x for x in cells if x.arm.paper_epsilon == e] + ([ref] if ref else [])
        ):
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
    path = _save(fig, out_dir / f"{defn.paper}_{slug}_accuracy_vs_round.png")
    return [path]


def _paper_epsilon_plots(
    defn: Definition,
    tname: str,
    slug: str,
    cells: list[CellResult],
    ref: CellResult | None,
    out_dir: Path,
    plt: ModuleType,
    kinds: Sequence[str] = PLOT_KINDS,
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
        path = _save(fig, out_dir / f"{defn.paper}_{slug}_accuracy_vs_epsilon.png")
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
        path = _save(fig, out_dir / f"{defn.paper}_{slug}_selected_fraction_vs_threshold.png")
        made.append(path)
    return made
