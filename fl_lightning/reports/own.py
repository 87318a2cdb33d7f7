"""Our own runs side by side, without a paper table (``fl-lightning report`` without ``--paper``).

Runs come from a sweep store, a W&B CSV export or folders of ``fl-lightning fit`` runs (every
``summary.json`` below the folder, with the ``config.yaml`` beside it as the run's parameters).
A *setting* is the runs' values of every parameter that differs between runs, seeds excepted:
runs are averaged only over seeds of one setting, never across settings. ``--group-by KEY``
orders the table by KEY and draws the metric against KEY, one line per setting of the other
varying parameters.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fl_lightning.reports.runs import Run, finite, load_runs
from fl_lightning.utils.tree import flatten_tree

SEED_KEYS = ("seed_everything", "seed", "data.seed", "model.seed")
# Parameters that say where a run wrote, not what it ran: never a setting.
IGNORED_PREFIXES = (
    "trainer.logger",
    "trainer.default_root_dir",
    "trainer.callbacks",
    "trainer.enable_progress_bar",
    "trainer.enable_checkpointing",
    "ckpt_path",
    "config",
    "print_config",
)
DEFAULT_METRICS = ("test/accuracy", "privacy/epsilon", "rounds")


def load_run_dirs(folder: str | Path) -> list[Run]:
    """Every finished ``fl-lightning fit`` run below ``folder`` (a ``summary.json``), with the
    flattened ``config.yaml`` beside it as its parameters (``init_args`` dropped from keys)."""
    import yaml

    runs = []
    for summary in sorted(Path(folder).rglob("summary.json")):
        d = summary.parent
        params: dict[str, Any] = {}
        if (d / "config.yaml").exists():
            config = yaml.safe_load((d / "config.yaml").read_text()) or {}
            raw = flatten_tree(config, keep_empty=True)
            params = {k.replace(".init_args.", "."): v for k, v in raw.items()}
        try:
            metrics = json.loads(summary.read_text())
        except json.JSONDecodeError:
            continue
        runs.append(Run(str(d.relative_to(folder)) or d.name, params, metrics, d))
    return runs


def load_any(source: str | Path) -> list[Run]:
    """A sweep store, a W&B CSV export, or a folder of fit runs."""
    p = Path(source)
    if not p.exists():
        raise FileNotFoundError(f"source: {p} does not exist")
    if p.is_dir() and not (p / "results.jsonl").exists():
        runs = load_run_dirs(p)
        if not runs:
            raise ValueError(
                f"source: no sweep store (results.jsonl) and no run (summary.json) in {p}"
            )
        return runs
    return load_runs(p)


def _hashable(v: Any) -> Any:
    return json.dumps(v, sort_keys=True, default=str) if isinstance(v, (list, dict)) else v


def _ignored(key: str) -> bool:
    return key in SEED_KEYS or key.endswith(".seed") or key.startswith(IGNORED_PREFIXES)


def varying_keys(runs: list[Run]) -> list[str]:
    """Parameters (seeds and output locations aside) whose value is not the same in all runs."""
    keys = sorted({k for r in runs for k in r.params})  # a W&B export's: its config columns
    out = []
    for k in keys:
        if _ignored(k):
            continue
        values = {_hashable(r.params.get(k)) for r in runs}
        if len(values) > 1:
            out.append(k)
    return out


@dataclass
class Setting:
    """The runs (seeds) of one setting."""

    values: dict[str, Any]
    runs: list[Run] = field(default_factory=list)

    def stats(self, metric: str) -> tuple[float | None, float | None, int]:
        xs = [float(r.metrics[metric]) for r in self.runs if finite(r.metrics.get(metric))]
        if not xs:
            return None, None, 0
        return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else None), len(xs)


def group(runs: list[Run], group_by: list[str] | None = None) -> tuple[list[str], list[Setting]]:
    """The setting keys (``group_by`` first, then the other varying keys) and the settings,
    sorted by them. Seeds are the only thing pooled."""
    group_by = list(group_by or [])
    for i, k in enumerate(group_by):  # fit runs' keys have no ``init_args`` level
        short = k.replace(".init_args.", ".")
        if not any(k in r.params for r in runs) and any(short in r.params for r in runs):
            group_by[i] = short
    for k in group_by:
        if not any(k in r.params for r in runs):
            known = sorted({k2 for r in runs for k2 in r.params if not _ignored(k2)})
            raise ValueError(f"--group-by {k}: no run has this parameter; known: {known[:30]}")
    keys = group_by + [k for k in varying_keys(runs) if k not in group_by]
    settings: dict[tuple, Setting] = {}
    for r in runs:
        vals = {k: r.params.get(k) for k in keys}
        ident = tuple(_hashable(vals[k]) for k in keys)
        settings.setdefault(ident, Setting(vals)).runs.append(r)

    def order(s: Setting) -> tuple:
        return tuple(
            (0, float(s.values[k]), "") if finite(s.values[k]) else (1, 0.0, str(s.values[k]))
            for k in keys
        )

    return keys, sorted(settings.values(), key=order)


def _fmt(mean: float | None, std: float | None, digits: int = 4) -> str:
    if mean is None:
        return "—"
    if math.isinf(mean):
        return "∞"
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if std is not None else "")


def _value(v: Any) -> str:
    text = str(v)
    return text.rsplit(".", 1)[-1] if "." in text and not finite(v) else text


def render(
    keys: list[str], settings: list[Setting], metrics: list[str], *, source: str,
    figures: dict[str, Path | None], out_dir: Path,
) -> str:  # fmt: skip
    lines = [
        f"# Runs of `{source}`",
        "",
        f"{sum(len(s.runs) for s in settings)} finished runs in {len(settings)} settings. "
        "A row is one setting (the values of every parameter that differs between runs); "
        "its seeds are averaged (mean ± sample std, n = runs), never runs of different settings.",
        "",
    ]
    head = [*keys, "n", *metrics] if keys else ["n", *metrics]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in settings:
        cells = [_value(s.values[k]) for k in keys]
        n = len(s.runs)
        cells.append(str(n))
        for m in metrics:
            mean, std, _ = s.stats(m)
            cells.append(_fmt(mean, std, 0 if m == "rounds" else 4))
        lines.append("| " + " | ".join(cells) + " |")
    if not keys:
        lines += ["", "All runs share one setting (only seeds differ)."]
    for title, path in figures.items():
        if path is not None:
            lines += ["", f"## {title}", "", f"![{title}]({path.relative_to(out_dir)})"]
    return "\n".join(lines) + "\n"


def _label(s: Setting, keys: list[str]) -> str:
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={_value(s.values[k])}" for k in keys) or "all runs"


def plot_vs_key(
    keys: list[str], settings: list[Setting], key: str, metric: str, path: Path
) -> Path | None:
    """``metric`` (mean ± std over seeds) against ``key``, one line per setting of the other
    keys."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    others = [k for k in keys if k != key]
    lines: dict[str, list[tuple[Any, float, float]]] = {}
    for s in settings:
        mean, std, _ = s.stats(metric)
        if mean is None or not finite(mean):
            continue
        lines.setdefault(_label(s, others), []).append((s.values[key], mean, std or 0.0))
    if not lines:
        return None
    numeric = all(finite(x) for pts in lines.values() for x, _, _ in pts)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for label, pts in lines.items():
        xs = [x if numeric else _value(x) for x, _, _ in pts]
        ax.errorbar(xs, [m for _, m, _ in pts], yerr=[e for _, _, e in pts], marker="o",
                    capsize=3, label=label)  # fmt: skip
    ax.set_xlabel(key)
    ax.set_ylabel(f"{metric} (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    if len(lines) > 1 or others:
        ax.legend(fontsize=8)
    ax.set_title(f"{metric} vs {key}")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_history(
    keys: list[str], settings: list[Setting], column: str, ylabel: str, path: Path
) -> Path | None:
    """``column`` of the runs' ``metrics.csv`` per round, mean over the seeds of each setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    drawn = False
    for s in settings:
        per_round: dict[int, list[float]] = {}
        for r in s.runs:
            for rnd, v in r.history(column):
                per_round.setdefault(rnd, []).append(v)
        if not per_round:
            continue
        rounds = sorted(per_round)
        ax.plot(rounds, [statistics.fmean(per_round[r]) for r in rounds], marker=".",
                label=_label(s, keys))  # fmt: skip
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("round")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"{ylabel} vs round (mean over seeds)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def report_runs(source: str, *, group_by: list[str], metrics: list[str] | None, out: Path) -> Path:
    """Writes ``out/report.md`` and its PNGs; returns the Markdown's path."""
    runs = load_any(source)
    if not runs:
        raise ValueError(f"source: no finished run in {source}")
    keys, settings = group(runs, group_by)
    metrics = list(metrics or DEFAULT_METRICS)
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Path | None] = {}
    for key in keys[: len(group_by)]:  # as resolved by ``group`` (fit runs: no init_args)
        for m in metrics[:1]:
            slug = key.replace("/", "_").replace(".", "_")
            figures[f"{m} vs {key}"] = plot_vs_key(
                keys, settings, key, m, out / f"{m.replace('/', '_')}_vs_{slug}.png"
            )
    figures["Accuracy vs round"] = plot_history(
        keys, settings, "test/accuracy", "test/accuracy", out / "accuracy_vs_round.png"
    )
    figures["ε vs round"] = plot_history(
        keys, settings, "privacy/epsilon", "privacy/epsilon", out / "epsilon_vs_round.png"
    )
    text = render(keys, settings, metrics, source=str(source), figures=figures, out_dir=out)
    path = out / "report.md"
    path.write_text(text)
    return path
