"""Short offline-MNIST comparison at ε = 2: DP-SGD FL, AGN, ANR, DPFL-AGN, NbAFL.

Runs the Sec. 5.4 configs through the CLI with offline overrides (the real MNIST test set from
../shared/data, a narrow Abadi CNN, 10 clients on the printed 400/40 shard split) and prints one
JSON line per method: rounds reached, whether the ε budget stopped the run, test accuracy, ε.

The machine (core count, torch threads, platform) and the load average before and after the
run are measured and printed, never typed in. ``--out DIR`` appends the run to
``DIR/dpfl_agn_offline.json`` and a table section to ``DIR/dpfl_agn_offline.md``; nothing
recorded is rewritten.

Usage: PYTHONPATH=. python benchmarks/dpfl_agn_offline.py [max_rounds] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from _record import out_dir, record_run

from fl_lightning.cli import run_lightning

CFG = "configs/experiment/dpfl_agn/"
COMMON = [
    "--data.dataset",
    "mnist_offline",
    "--data.root",
    "../shared/data",
    "--data.download",
    "false",
    "--client.net.init_args.channels",
    "[16, 16]",
    "--client.net.init_args.hidden",
    "[64, 64]",
    "--model.eval_every",
    "0",
    "--trainer.logger",
    "false",
]
DP = ["--client.batch_size", "32", "--client.dp_sgd.noise_multiplier", "1.2"]


def methods(rounds: int) -> dict[str, list[str]]:
    r = ["--trainer.max_steps", str(rounds)]
    return {
        "DP-SGD FL": [CFG + "s54_mnist_dpsgd.yaml", *DP, *r, "--client.lr", "0.1"],
        "AGN": [CFG + "s51_mnist_agn.yaml", *DP, *r, "--client.lr", "0.002"],
        "ANR": [CFG + "s52_mnist_anr.yaml", *DP, *r, "--client.lr", "0.1"],
        "DPFL-AGN": [CFG + "s54_mnist_dpfl_agn.yaml", *DP, *r, "--client.lr", "0.002"],
        "NbAFL (published)": [
            CFG + "s54_mnist_nbafl.yaml",
            "--trainer.max_steps",
            "10",
            "--strategy.init_args.clip_norm",
            "10.0",
            "--client.batch_size",
            "32",
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("max_rounds", type=int, nargs="?", default=80)
    parser.add_argument("--out", default=None, help="directory: append the run there")
    args = parser.parse_args()
    out = out_dir(parser, args.out, "dpfl_agn_offline")
    load_before = os.getloadavg()
    records = []
    for name, extra in methods(args.max_rounds).items():
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            cmd = [
                "fit",
                "--config",
                extra[0],
                *COMMON,
                *extra[1:],
                "--trainer.default_root_dir",
                tmp,
            ]
            rc = run_lightning(cmd)
            summary = json.loads((Path(tmp) / "summary.json").read_text()) if rc == 0 else {}
        records.append(
            {
                "method": name,
                "rc": rc,
                "rounds": summary.get("rounds"),
                "stopped_by_budget": summary.get("stopped_by_budget"),
                "accuracy": summary.get("test/accuracy"),
                "epsilon": summary.get("privacy/epsilon"),
                "guarantee": summary.get("privacy/guarantee"),
                "seconds": round(time.perf_counter() - start, 1),
            }
        )
        print(json.dumps(records[-1]), flush=True)
    command = "python benchmarks/dpfl_agn_offline.py " + " ".join(sys.argv[1:])
    lines = [
        f"- command: `{command}`; at most {args.max_rounds} rounds (NbAFL: 10).",
        "",
        "| method | rc | rounds reached | stopped by budget | test accuracy | ε | guarantee | s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        cells = [r[k] for k in ("method", "rc", "rounds", "stopped_by_budget", "accuracy")]
        cells += [r["epsilon"], r["guarantee"], r["seconds"]]
        cells = ["—" if c is None else f"{c:.4g}" if isinstance(c, float) else c for c in cells]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    record_run(
        out,
        "dpfl_agn_offline",
        title=f"at most {args.max_rounds} rounds",
        intro="# DPFL-AGN offline comparison at target ε = 2 (issue #7)\n\n"
        "`benchmarks/dpfl_agn_offline.py`; each run appended as measured.\n",
        lines=["", *lines],
        load_before=load_before,
        command=command,
        methods=records,
    )


if __name__ == "__main__":
    main()
