"""``fl-lightning report``: our runs against a paper's table, as Markdown and PNG figures.

Usage::

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
    p = argparse.ArgumentParser(prog="fl-lightning report", description=__doc__.split("\n")[0])
    p.add_argument("source", help="sweep store (folder or results.jsonl) or a W&B CSV export")
    p.add_argument("--paper", required=True, help="paper id (000..004) or name (GCFL)")
    p.add_argument("--table", required=True, help="table id as printed (IV, 2, ...)")
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
    p.add_argument("--out", default=None, help="output folder (default reports/<paper>-<table>)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
