"""Short real run: the five methods of DP-FedASGP's Table IV at ε = 0.5 on offline MNIST.

Offline MNIST (the 10,000-image test set, 8,000 train / 2,000 test), 100 Dirichlet(1) clients,
10 per round, a small MNIST CNN (8/16 channels, FC 64: CPU budget), batch 128, lr 0.1 (Table II),
one local epoch, ``--rounds`` rounds; plus non-private FedAvg as the ceiling. Reports final test
accuracy, the privacy the run can defend and the paper's per-round figure.

The machine (core count, torch threads, platform) and the load average before and after the
run are measured and recorded, never typed in. ``--out DIR`` (a directory; the older form
``DIR/asgp_methods_mnist_offline.md`` still means ``DIR``) appends the run to
``DIR/asgp_methods_mnist_offline.json`` and a section to ``DIR/asgp_methods_mnist_offline.md``;
nothing recorded is rewritten.

    PYTHONPATH=. python benchmarks/asgp_methods_mnist_offline.py --rounds 20 \
        --out benchmarks/results
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from _record import out_dir, record_run

from fl_lightning.runs.cli_class import build_cli_class

CONFIG = "configs/experiment/dp_fedasgp/mnist_offline_cnn.yaml"
METHODS = {
    "DP-FedASGP (published)": ["--strategy", "configs/strategy/dp_fedasgp/dp_fedasgp.yaml"],
    "DP-FedASGP (sound: noise everywhere, n_i/n)": [
        "--strategy",
        "configs/strategy/dp_fedasgp/dp_fedasgp_sound.yaml",
    ],
    "DP-FedAvg (local Laplace)": ["--strategy", "configs/strategy/dp_fedasgp/dp_fedavg_local.yaml"],
    "cpSGD": ["--strategy", "configs/strategy/dp_fedasgp/cpsgd.yaml"],
    "FedSMP top_k": ["--strategy", "configs/strategy/dp_fedasgp/fedsmp.yaml"],
    "DP-FedSNLC (approx.)": ["--strategy", "configs/strategy/dp_fedasgp/dp_fedsnlc.yaml"],
    "FedAvg (no privacy)": ["--strategy", "fl_lightning.strategies.fedavg.FedAvg"],
}


def run(extra: list[str], rounds: int, epsilon: float) -> dict:
    args = [
        "--config",
        CONFIG,
        *extra,
        "--trainer.max_steps",
        str(rounds),
        "--trainer.logger",
        "false",
        "--trainer.default_root_dir",
        tempfile.mkdtemp(),
        "--model.eval_every",
        str(rounds),
        "--client.net.init_args.channels",
        "[8, 16]",
        "--client.net.init_args.hidden",
        "64",
    ]
    if "FedAvg" not in extra[-1]:
        args += ["--strategy.init_args.epsilon", str(epsilon)]
    cli = build_cli_class()(args, run=False)
    start = time.perf_counter()
    cli.trainer.fit(cli.model, cli.datamodule)
    seconds = time.perf_counter() - start
    out = {"seconds": seconds, **cli.model.evaluate_global()}
    if cli.model.accountant is not None:
        out.update(cli.model.accountant.report())
    out.update({f"strategy/{k}": v for k, v in cli.model.strategy_metrics.items()})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--epsilon", type=float, default=0.5)
    parser.add_argument("--out", default=None, help="directory: append the run there")
    args = parser.parse_args()
    out = out_dir(parser, args.out, "asgp_methods_mnist_offline")
    load_before = os.getloadavg()
    lines = [
        f"- config: `{CONFIG}` with a small CNN (8/16 channels, FC 64), 100 Dirichlet(1) "
        "clients, 10 per round, batch 128, lr 0.1, one local epoch, seed 0, one run each; "
        "CPU only.",
        "",
        "| method | test accuracy | test loss | privacy/epsilon (defensible) | guarantee | "
        "paper's per-round ε | s |",
        "|---|---|---|---|---|---|---|",
    ]
    results = {}
    for name, extra in METHODS.items():
        r = run(extra, args.rounds, args.epsilon)
        results[name] = {k: v for k, v in r.items() if isinstance(v, int | float | str)}
        paper = r.get("strategy/paper_epsilon_round", r.get("strategy/epsilon_round", "—"))
        paper = f"{paper:.3g}" if isinstance(paper, float) else paper
        lines.append(
            f"| {name} | {r['accuracy']:.4f} | {r['loss']:.3f} | "
            f"{r.get('privacy/epsilon', float('inf')):.4g} | {r.get('privacy/guarantee', '')} | "
            f"{paper} | {r['seconds']:.0f} |"
        )
        print(lines[-1], flush=True)
    command = "python benchmarks/asgp_methods_mnist_offline.py " + " ".join(sys.argv[1:])
    record_run(
        out,
        "asgp_methods_mnist_offline",
        title=f"ε = {args.epsilon}, {args.rounds} rounds",
        intro="# DP-FedASGP's Table IV methods on offline MNIST\n\n"
        "`benchmarks/asgp_methods_mnist_offline.py`; each run appended as measured.\n",
        lines=[f"- command: `{command}`", *lines],
        load_before=load_before,
        command=command,
        methods=results,
    )


if __name__ == "__main__":
    main()
