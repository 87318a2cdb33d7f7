"""Short offline-MNIST comparison at ε = 2: DP-SGD FL, AGN, ANR, DPFL-AGN, NbAFL.

Runs the Sec. 5.4 configs through the CLI with offline overrides (the real MNIST test set from
../shared/data, a narrow Abadi CNN, 10 clients on the printed 400/40 shard split) and prints one
JSON line per method: rounds reached, whether the ε budget stopped the run, test accuracy, ε.
Usage: python benchmarks/dpfl_agn_offline.py [max_rounds]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

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
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 80
    for name, extra in methods(rounds).items():
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            args = [
                "fit",
                "--config",
                extra[0],
                *COMMON,
                *extra[1:],
                "--trainer.default_root_dir",
                tmp,
            ]
            rc = run_lightning(args)
            summary = json.loads((Path(tmp) / "summary.json").read_text()) if rc == 0 else {}
        print(
            json.dumps(
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
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
