"""docs/audit.md's canary table: each shipped kind of guarantee audited by the observer its ε is
for (``fl-lightning audit --attack canaries --observer ...``, attacks/canaries.py).

    python benchmarks/canary_audit_table.py --run            # every row, then the table
    python benchmarks/canary_audit_table.py --run --only ddg_server
    python benchmarks/canary_audit_table.py                  # the table from the stored JSON

``--run`` trains and audits each row in its own process (``fl-lightning audit``) and stores its
audit.json entry, with the wall time of that process, in ``benchmarks/results/
canary_audit.json``; the table printed is rendered from that file only, and
``tests/attacks/test_canary_table.py`` checks that docs/audit.md holds exactly that rendering.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STORE = REPO / "benchmarks" / "results" / "canary_audit.json"
FEDAVG = "--strategy=fl_lightning.strategies.fedavg.FedAvg"


@dataclass(frozen=True)
class Row:
    """One audit: a shipped config (with overrides), the observer, the canaries."""

    name: str
    label: str
    config: str
    observer: str
    canaries: int
    overrides: tuple[str, ...] = ()

    def command(self, out: str) -> list[str]:
        return [
            "audit", "--config", self.config, "--attack", "canaries",
            "--observer", self.observer, "--num-canaries", str(self.canaries),
            "--out", out, f"--trainer.default_root_dir={out}", "--trainer.logger=false",
            "--trainer.enable_progress_bar=false", *self.overrides,
        ]  # fmt: skip


ROWS = (
    Row("quickstart", "quickstart: DP-FedAvg, Poisson q = 0.5",
        "configs/experiment/quickstart.yaml", "all_models", 500),
    Row("quickstart_final", "quickstart: DP-FedAvg, Poisson q = 0.5",
        "configs/experiment/quickstart.yaml", "final", 500),
    Row("full_participation", "DP-FedAvg, every client every round",
        "configs/experiment/audit/full_participation.yaml", "all_models", 8000),
    Row("quickstart_ftrl", "quickstart_ftrl: DP-FTRL (BSR), cyclic",
        "configs/experiment/quickstart_ftrl.yaml", "all_models", 500),
    Row("amplified_banded", "amplified banded DP-FTRL, cyclic Poisson",
        "configs/experiment/dp_ftrl/quickstart_amplified_banded.yaml", "all_models", 500),
    Row("ddg_server", "DDG behind SecAgg, Poisson q = 0.5",
        "configs/experiment/distributed_dp/ddg.yaml", "server", 500),
    Row("ddg_third_party", "DDG behind SecAgg, Poisson q = 0.5",
        "configs/experiment/distributed_dp/ddg.yaml", "all_models", 500),
    Row("local_gaussian", "local DP: Gaussian on every upload (DPFedAvgLocal)",
        "configs/experiment/quickstart.yaml", "server", 500,
        ("--strategy=fl_lightning.strategies.dp_fedavg_local.DPFedAvgLocal",
         "--strategy.noise=gaussian", "--strategy.epsilon=0.5")),
    Row("fedavg", "FedAvg, not private, every client every round",
        "configs/experiment/audit/full_participation.yaml", "all_models", 2000, (FEDAVG,)),
)  # fmt: skip


def run_row(row: Row) -> dict:
    """Trains and audits ``row`` in a fresh process; its canary entry plus the wall time."""
    with tempfile.TemporaryDirectory(prefix="fl-canary-table-") as out:
        env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline"}
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "fl_lightning.cli", *row.command(out)],
            cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        res = json.loads((Path(out) / "audit.json").read_text())
    entry = dict(res["attacks"]["canaries"])
    entry.pop("sentence", None)
    return {
        "label": row.label,
        "command": "fl-lightning " + " ".join(row.command("<out>")),
        "guarantee": res["guarantee"],
        "accountant_epsilon": res["accountant_epsilon"],
        "seconds": round(seconds, 1),
        **{k: entry[k] for k in sorted(entry)},
    }


def _eps(x: float) -> str:
    return "∞" if math.isinf(x) else f"{x:.3g}"


def render(store: dict) -> str:
    """The markdown table of the stored rows, in ``ROWS`` order."""
    lines = [
        "| run | observer | accountant ε for that observer | estimate [95 % interval] "
        "| lower bound, 95 % (Gaussian curve) | canaries: guesses right, ceiling | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in ROWS:
        if row.name not in store:
            continue
        r = store[row.name]
        lines.append(
            f"| {r['label']} | {r['observer']} | {_eps(r['compared_epsilon'])} | "
            f"{r['epsilon_estimate']:.3g} [{r['epsilon_estimate_low']:.3g}, "
            f"{r['epsilon_estimate_high']:.3g}] | {r['epsilon_lower_bound']:.3g} "
            f"({r['epsilon_lower_bound_gdp']:.3g}) | {r['num_canaries']}: "
            f"{r['correct_guesses']} of {r['guesses']}, ≤ {r['lower_bound_ceiling']:.3g} | "
            f"{r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", action="store_true", help="run the audits (else: render the store)")
    p.add_argument("--only", action="append", choices=[r.name for r in ROWS])
    args = p.parse_args(argv)
    store = json.loads(STORE.read_text()) if STORE.exists() else {}
    if args.run:
        for row in ROWS:
            if args.only and row.name not in args.only:
                continue
            store[row.name] = run_row(row)
            STORE.write_text(json.dumps(store, indent=2, default=str) + "\n")
            print(f"{row.name}: done in {store[row.name]['seconds']} s", file=sys.stderr)
    print(render(store))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
