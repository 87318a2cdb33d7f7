"""Short offline-MNIST runs: ADP-FL vs the even-budget baseline at ε ∈ {1, 5, 10} (issue #9).

The offline MNIST test set (8,000 train / 2,000 test), 50 clients with the paper's overlapping
2-labels / 10 % split, 10 clients per round, the 24,714-parameter LSTM, Gaussian uploads
(δ = 1e-5, C = 1), the async clock of configs/strategy/*.yaml. Short: ``ROUNDS`` rounds of one
local epoch (lr 0.1) so that the whole table takes a few minutes on a CPU; plus non-private
async FedAvg as the ceiling.

The machine (core count, torch threads, platform) and the load average before and after the
run are measured and recorded, never typed in. The run is appended to
``DIR/adp_fl_mnist_offline.json`` and a section to ``DIR/adp_fl_mnist_offline.md`` (``--out
DIR``, default benchmarks/results) when the table is complete; nothing recorded is rewritten.
``--rounds`` (default 20) shortens a smoke test.

Run from the repository root: ``PYTHONPATH=. python benchmarks/adp_fl_mnist_offline.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch
from _record import out_dir, record_run

from fl_lightning.runs.cli_class import build_cli_class

ROUNDS = 20
HORIZON = 20  # E of Eq. 6 / Eq. 10 (the budget horizon)
ROOT = Path(__file__).resolve().parents[1]


def run(config: str, extra: list[str], rounds: int = ROUNDS) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "fit",
            "--config",
            str(ROOT / "configs/experiment/adp_fl" / config),
            "--trainer.max_steps",
            str(rounds),
            "--trainer.logger",
            "false",
            "--trainer.default_root_dir",
            tmp,
            "--client.local_steps",
            "20",
            "--client.lr",
            "0.1",
            "--model.eval_every",
            "0",
            "--strategy.init_args.rounds",
            str(HORIZON),
            *extra,
        ]
        t0 = time.perf_counter()
        cli = build_cli_class()(args)
        seconds = time.perf_counter() - t0
    model = cli.model
    m = model.strategy_metrics  # the last round's strategy/<key> metrics
    rep = model.accountant.report()
    return {
        "acc": model.last_eval.get("accuracy", float("nan")),
        "eps_paper": m.get("eps_paper_max", float("nan")),
        "eps_basic": rep.get("privacy/epsilon", float("inf")),
        "delta_basic": rep.get("privacy/delta_local", 0.0),
        "eps_tight": m.get("eps_tight_max", float("nan")),
        "exited": int(m.get("clients_exited", 0)),
        "staleness": m.get("async/staleness_max", 0.0),
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument(
        "--out", default=str(ROOT / "benchmarks/results"), help="directory: append the run there"
    )
    args = parser.parse_args()
    out = out_dir(parser, args.out, "adp_fl_mnist_offline")
    torch.set_num_threads(1)
    jobs = [
        (name, eps, cfg, ["--strategy.init_args.epsilon", str(eps)])
        for eps in (1, 5, 10)
        for name, cfg in (
            ("even budget", "mnist_offline_even_budget.yaml"),
            ("ADP-FL (published)", "mnist_offline_adp_fl.yaml"),
        )
    ]
    jobs.append(
        (
            "async FedAvg, non-private",
            "-",
            "mnist_offline_even_budget.yaml",
            ["--strategy.init_args.mechanism", "none", "--strategy.init_args.epsilon", "null"],
        )
    )
    command = "python benchmarks/adp_fl_mnist_offline.py " + " ".join(sys.argv[1:])
    header = [
        f"- command: `{command}`; CPU, 1 torch thread. "
        f"{args.rounds} rounds of 20 local steps, 50 clients (overlap_label_k: 2 labels, 10 % "
        "each), 10 per round, LSTM 24,714 params, SGD lr 0.1 batch 16, Gaussian uploads "
        "C = 1 (Δ = 2C), δ = 1e-5 per upload, log-normal delays + 20 % stragglers ×4, seed 0. "
        f"Budget horizon E = {HORIZON} (per-upload even budget ε/(0.2·{HORIZON})).",
        "",
        "| method | total ε | test acc | ε paper (Σε_t) | ε basic (accountant) | δ basic "
        "| ε tight (RDP, δ=1e-5) | clients exited | max staleness | s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    load_before = os.getloadavg()
    rows: list[str] = []
    records = []
    for name, eps, cfg, extra in jobs:
        r = run(cfg, extra, args.rounds)
        records.append({"method": name, "epsilon": eps, **r})
        rows.append(
            f"| {name} | {eps} | {r['acc']:.4f} | {r['eps_paper']:.3g} | {r['eps_basic']:.3g} | "
            f"{r['delta_basic']:.1g} | {r['eps_tight']:.3g} | {r['exited']} | "
            f"{r['staleness']:.0f} | {r['seconds']:.0f} |"
        )
        print(rows[-1], flush=True)
    record_run(
        out,
        "adp_fl_mnist_offline",
        title=f"{args.rounds} rounds, horizon E = {HORIZON}",
        intro="# ADP-FL vs even budget, offline MNIST (issue #9)\n\n"
        "`benchmarks/adp_fl_mnist_offline.py`; each run appended as measured.\n",
        lines=["", *header, *rows],
        load_before=load_before,
        command=command,
        rows=records,
    )


if __name__ == "__main__":
    main()
