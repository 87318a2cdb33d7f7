"""``fl-lightning report``: our runs side by side, or against a paper's table (Markdown + PNGs).

Our runs, no paper (a sweep store, a W&B CSV export, or a folder of ``fl-lightning fit`` runs)::

    fl-lightning report <store | export.csv | runs folder> [--group-by KEY ...] [--metric KEY]
        [--out DIR]

One row per setting (every parameter that differs between runs, seeds aside), seeds averaged,
different settings never pooled; the metric against each ``--group-by`` key and accuracy / ε
against the round (``fl_lightning/reports/own.py``).

Against a paper::

    fl-lightning report <store folder | results.jsonl | W&B export .csv> --paper 000 --table IV
        [--where dataset=MNIST --where model=CNN] [--metric test/accuracy]
        [--method-key KEY] [--method-map VALUE=NAME ...] [--eps-key KEY] [--out DIR]

Writes ``<out>/report.md`` (per cell: ours mean ± std over seeds, the paper's value and the
difference; the ranking of methods with Kendall τ) and one PNG per figure: accuracy vs ε,
accuracy vs round, ε vs round (from the runs' ``metrics.csv``) and the ranking.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fl_lightning.reports import plots
from fl_lightning.reports.compare import compare, ranking
from fl_lightning.reports.markdown import render
from fl_lightning.reports.runs import load_runs
from fl_lightning.reports.tables import load_paper
from fl_lightning.utils.argparse_lines import OneLineParser


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"{flag}: expected KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _typed(v: str) -> Any:
    try:
        return float(v)
    except ValueError:
        return v


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="fl-lightning report", description=__doc__.split("\n")[0])
    p.add_argument(
        "source",
        help="sweep store (folder or results.jsonl), a W&B CSV export, or a folder of fit runs",
    )
    p.add_argument(
        "--paper", default=None, help="paper id (000..004) or name (GCFL); omit for our runs only"
    )
    p.add_argument("--table", default=None, help="table id as printed (IV, 2, ...); with --paper")
    p.add_argument(
        "--group-by",
        action="append",
        default=[],
        metavar="KEY",
        help="without --paper: order by this parameter and plot the metric against it "
        "(repeatable), e.g. strategy.init_args.noise_multiplier",
    )
    p.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="DIM=VALUE",
        help="fix a table dimension (repeatable), e.g. dataset=MNIST",
    )
    p.add_argument("--metric", default=None, help="our metric key (default: the table's)")
    p.add_argument(
        "--method-key",
        default=None,
        help="parameter naming the method (default: strategy.class_path / strategy if swept)",
    )
    p.add_argument(
        "--method-map",
        action="append",
        default=[],
        metavar="VALUE=NAME",
        help="map a value of the method key to the paper's method name",
    )
    p.add_argument(
        "--eps-key",
        default=None,
        help="parameter giving the cell's ε (default: privacy.target_epsilon)",
    )
    p.add_argument(
        "--out",
        default=None,
        help="output folder (default reports/<paper>-<table>, or reports/runs-<source name>)",
    )
    return p


def _runs_report(args: argparse.Namespace) -> int:
    from fl_lightning.reports.own import DEFAULT_METRICS, report_runs

    if args.where or args.method_key or args.method_map or args.eps_key:
        print(
            "error: --where/--method-key/--method-map/--eps-key: only with --paper; "
            "use --group-by to compare our runs",
            file=sys.stderr,
        )
        return 2
    metrics = list(DEFAULT_METRICS)
    if args.metric:
        metrics = [args.metric, *[m for m in metrics if m != args.metric]]
    out = Path(args.out or f"reports/runs-{Path(args.source).resolve().name}")
    try:
        path = report_runs(args.source, group_by=args.group_by, metrics=metrics, out=out)
    except (KeyError, ValueError, FileNotFoundError) as err:
        msg = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"error: {msg}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.paper is None:
        if args.table is not None:
            print("error: --table: needs --paper", file=sys.stderr)
            return 2
        return _runs_report(args)
    if args.table is None:
        print("error: --table: required with --paper", file=sys.stderr)
        return 2
    if args.group_by:
        print("error: --group-by: only without --paper (a paper's table fixes the grouping)",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        paper = load_paper(args.paper)
        table = paper.table(args.table)
        runs = load_runs(args.source)
        where = {k: _typed(v) for k, v in _pairs(args.where, "--where").items()}
        comp = compare(
            runs, paper, table, where=where, metric=args.metric, method_key=args.method_key,
            method_map=_pairs(args.method_map, "--method-map"), eps_key=args.eps_key,
        )  # fmt: skip
    except (KeyError, ValueError, FileNotFoundError) as err:
        msg = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"error: {msg}", file=sys.stderr)
        return 2
    out = Path(args.out or f"reports/{paper.id}-{table.id}")
    out.mkdir(parents=True, exist_ok=True)
    rank = ranking(comp)
    figures = {
        "Accuracy vs ε": plots.accuracy_vs_epsilon(comp, out / "accuracy_vs_epsilon.png"),
        "Accuracy vs round": plots.accuracy_vs_round(comp, out / "accuracy_vs_round.png"),
        "ε vs round": plots.epsilon_vs_round(comp, out / "epsilon_vs_round.png"),
        "Ranking of methods": plots.ranking_plot(comp, rank, out / "ranking.png"),
    }
    text = render(comp, rank, figures, source=str(args.source), out_dir=out)
    (out / "report.md").write_text(text)
    print(f"wrote {out / 'report.md'} and {sum(p is not None for p in figures.values())} figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
