"""Report figures (matplotlib, Agg backend), one PNG per figure."""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from fl_lightning.reports.compare import Comparison, Ranking  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

STYLE: dict[RcKeyType, Any] = {
    "figure.dpi": 120,
    "font.size": 11,
    "axes.grid": True,
    "grid.alpha": 0.3,
}


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _known(values: list[float | None]) -> list[float]:
    """``values`` of cells already filtered on them being known (no None)."""
    out = [v for v in values if v is not None]
    assert len(out) == len(values)
    return out


def _colors(methods: list[str]) -> dict[str, str]:
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    return {m: cycle[i % len(cycle)] for i, m in enumerate(methods)}


def _ylabel(comp: Comparison) -> str:
    unit = f" ({comp.table.unit})" if comp.table.unit else ""
    return f"{comp.metric}{unit}"


def accuracy_vs_epsilon(comp: Comparison, path: Path) -> Path | None:
    """Ours (mean ± std over seeds, at the measured ε) and the paper's (at its ε) per method."""
    methods = comp.methods()
    colors = _colors(methods)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        drawn = False
        for m in methods:
            cells = [c for c in comp.cells if c.method == m and c.epsilon is not None]
            ours = [c for c in cells if c.mean is not None]
            if ours:
                xs = _known([c.eps_mean if c.eps_mean is not None else c.epsilon for c in ours])
                ax.errorbar(
                    xs,
                    _known([c.mean for c in ours]),
                    yerr=[c.std or 0 for c in ours],
                    marker="o",
                    color=colors[m],
                    capsize=3,
                    label=f"{m} (ours)",
                )
                drawn = True
            paper = [c for c in cells if c.paper is not None]
            if paper:
                ax.plot(
                    _known([c.epsilon for c in paper]),
                    _known([c.paper for c in paper]),
                    ls="--",
                    marker="s",
                    mfc="none",
                    color=colors[m],
                    label=f"{m} (paper)",
                )
                drawn = True
        if not drawn:
            plt.close(fig)
            return None
        ax.set_xlabel("ε (ours: measured by the accountant; paper: stated)")
        ax.set_ylabel(_ylabel(comp))
        ax.set_title(
            f"Paper {comp.paper.id} ({comp.paper.name}) Table {comp.table.id}: {comp.metric} vs ε"
        )
        ax.legend(fontsize=8, loc="best")
        return _save(fig, path)


def _history_plot(
    comp: Comparison, column: str, ylabel: str, title: str, path: Path, scale: float = 1.0
) -> Path | None:
    methods = comp.methods()
    colors = _colors(methods)
    styles = ["-", "--", ":", "-."]
    eps_levels = list(comp.epsilons())
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        drawn = False
        for c in comp.cells:
            per_round: dict[int, list[float]] = defaultdict(list)
            for run in c.runs:
                for rnd, v in run.history(column):
                    per_round[rnd].append(v * scale)
            if not per_round:
                continue
            rounds = sorted(per_round)
            ys = [statistics.fmean(per_round[r]) for r in rounds]
            ls = styles[eps_levels.index(c.epsilon) % len(styles)]
            label = c.method if c.epsilon is None else f"{c.method}, target ε={c.epsilon:g}"
            ax.plot(rounds, ys, ls=ls, marker=".", color=colors[c.method], label=label)
            drawn = True
        if not drawn:
            plt.close(fig)
            return None
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=8, loc="best")
        return _save(fig, path)


def accuracy_vs_round(comp: Comparison, path: Path) -> Path | None:
    """The global model's test metric per evaluated round (mean over seeds)."""
    return _history_plot(
        comp,
        comp.metric,
        _ylabel(comp),
        f"{comp.metric} vs round (mean over seeds)",
        path,
        comp.scale,
    )


def epsilon_vs_round(comp: Comparison, path: Path) -> Path | None:
    """The accountant's ε after every round (mean over seeds)."""
    return _history_plot(
        comp,
        "privacy/epsilon",
        "ε spent (privacy/epsilon)",
        "Privacy spent vs round (mean over seeds)",
        path,
    )


def ranking_plot(comp: Comparison, rank: Ranking, path: Path) -> Path | None:
    """Ours vs the paper's value per method (methods in the paper's order), with Kendall τ."""
    if not rank.methods:
        return None
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(max(6.5, 1.4 * len(rank.methods) + 2), 4.5))
        xs = range(len(rank.methods))
        w = 0.38
        ax.bar([x - w / 2 for x in xs], rank.paper, w, label="paper", color="#999999")
        ax.bar([x + w / 2 for x in xs], rank.ours, w, label="ours", color="#1f77b4")
        ax.set_xticks(list(xs), rank.methods, rotation=20, ha="right")
        ax.set_ylabel(_ylabel(comp) + ", mean over ε")
        tau = "n/a" if rank.tau is None else f"{rank.tau:.2f}"
        ax.set_title(f"Methods in the paper's order; Kendall τ = {tau}", fontsize=11)
        lo = min(rank.paper + rank.ours)
        hi = max(rank.paper + rank.ours)
        ax.set_ylim(max(0.0, lo - 0.15 * (hi - lo + 1)), hi + 0.1 * (hi - lo + 1))
        ax.legend()
        return _save(fig, path)
