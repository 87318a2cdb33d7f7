"""Distributed DP behind SecAgg vs central DP-FedAvg on offline MNIST at equal client-level ε.

Issue 49 (4b): DP-FedAvg with the central continuous Gaussian (a trusted server adds it) against
the distributed discrete Gaussian (Kairouz, Liu & Steinke 2021) and distributed Skellam
(Agarwal, Kairouz & Liu 2021), each client adding its share behind 16-, 12-, 10- or 8-bit
secure aggregation. ``configs/experiment/distributed_dp/mnist_offline.yaml``: the real MNIST test
images (8,000 train / 2,000 test), 100 clients (Dirichlet 0.5), every client in every round,
40 rounds, logistic regression, clip C = 1, no dropouts, σ calibrated by each run to
ε ∈ {2, 8} at δ = 1e-5 with the RDP accountant.

Every client takes part in every round so that no arm claims amplification by sampling: the
central arm is then the plain Gaussian mechanism composed 40 times (Opacus' RDP) and the
distributed arms the same composition of DDG's / Skellam's RDP, so equal ε leaves the
discreteness (the rounding's inflated sensitivity, DDG's τ term, Skellam's RDP) and the
modular field as the only differences. The data split and partition are the same in every
run (``data.seed`` 0); ``seed_everything`` fixes the initial model, the local batches and the
noise's generators, so arms with the same seed share the model and the batches (their noise
differs by mechanism) and are paired.

Each run is appended to a JSON-lines store as it ends (rerunning skips the runs stored), so the
script can be stopped and resumed; ``--report`` prints the Markdown tables of the store:

    nice -n 10 python benchmarks/distributed_dp_mnist_offline.py --seeds 0 1 2 \\
        --store benchmarks/results/distributed_dp_mnist_offline.jsonl
    python benchmarks/distributed_dp_mnist_offline.py \\
        --store benchmarks/results/distributed_dp_mnist_offline.jsonl --report
"""

from __future__ import annotations

import math
import re
import statistics
import subprocess
import sys
from pathlib import Path

from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _grid_store import fit, grid_main  # noqa: E402

CONFIG = "configs/experiment/distributed_dp/mnist_offline.yaml"
CENTRAL = [
    "--strategy", "fl_lightning.strategies.dp_fedavg.DPFedAvg",
    "--strategy.init_args.clip_norm", "1.0",
    "--strategy.init_args.noise_multiplier", "null",
]  # fmt: skip
ARMS = {
    "central": CENTRAL,
    "ddg_16": ["--strategy.init_args.mechanism", "ddg", "--strategy.init_args.bits", "16"],
    "ddg_12": ["--strategy.init_args.mechanism", "ddg", "--strategy.init_args.bits", "12"],
    "ddg_10": ["--strategy.init_args.mechanism", "ddg", "--strategy.init_args.bits", "10"],
    "ddg_8": ["--strategy.init_args.mechanism", "ddg", "--strategy.init_args.bits", "8"],
    "skellam_16": ["--strategy.init_args.mechanism", "skellam", "--strategy.init_args.bits", "16"],
    "skellam_12": ["--strategy.init_args.mechanism", "skellam", "--strategy.init_args.bits", "12"],
}  # fmt: skip


COMMIT = subprocess.run(
    ["git", "describe", "--always", "--dirty"], capture_output=True, text=True
).stdout.strip()


def sum_noise_multiplier(ledger: dict) -> float:
    """σ of the noise in the released sum, in units of C: the central event's multiplier, or
    √(n·v)/(C·s) for n survivors each adding variance v on the grid of scale s."""
    if ledger.get("distributed"):
        _, clip, scale, variance, survivors, *_ = ledger["distributed"][-1]
        return math.sqrt(variance * survivors) / (clip * scale)
    event = ledger["client_level"][-1]
    return float(event[0] if isinstance(event, list) else event["noise_multiplier"])


def run_one(arm: str, eps: float, seed: int) -> dict:
    got = fit(["--config", CONFIG, *ARMS[arm], "--privacy.target_epsilon", str(eps),
               "--seed_everything", str(seed)])  # fmt: skip
    row = {"arm": arm, "epsilon_target": eps, "seed": seed, "commit": COMMIT}
    if "error" in got:
        return {**row, "error": got["error"], "command": got["command"]}
    s = got["summary"]
    return {
        **row,
        "accuracy": s["test/accuracy"],
        "epsilon": s["privacy/epsilon"],
        "sigma": sum_noise_multiplier(got["ledger"]),
        "guarantee": s.get("privacy/guarantee", ""),
        "rounds": s["rounds"],
        **{k: got[k] for k in ("seconds", "load_before", "load_after", "command")},
    }


def refusal(error: str) -> str:
    """A refused run in a few words: the unreachable target's floor, else the whole line."""
    found = re.search(r"strategy\.bits (\d+):.*\(([\d.e+-]+) there\)", error)
    if not found:
        return f"refused: {error}"
    return f"refused: ε target unreachable at {found[1]} bits ({found[2]} at σ = 10⁴)"


def report(rows: list[dict]) -> str:
    lines = [
        "| ε target | arm | runs | test accuracy % (mean ± sd) | σ of the sum (×C) | "
        "ε printed (max) | rounds |",
        "|---|---|---|---|---|---|---|",
    ]
    for eps in sorted({r["epsilon_target"] for r in rows}):
        for arm in ARMS:
            got = [r for r in rows if r["epsilon_target"] == eps and r["arm"] == arm]
            if not got:
                continue
            failed = [r for r in got if "error" in r]
            if failed:
                lines.append(f"| {eps:g} | {arm} | {len(got)} | {refusal(failed[-1]['error'])} "
                             "| | | |")  # fmt: skip
                continue
            acc = [100 * r["accuracy"] for r in got]
            sd = statistics.stdev(acc) if len(acc) > 1 else float("nan")
            lines.append(
                f"| {eps:g} | {arm} | {len(got)} | {statistics.mean(acc):.2f} ± {sd:.2f} | "
                f"{statistics.mean(r['sigma'] for r in got):.3f} | "
                f"{max(r['epsilon'] for r in got):.3f} | {min(r['rounds'] for r in got)} |"
            )
    return "\n".join(lines)


def report_paired(rows: list[dict], reference: str = "central") -> str:
    """Accuracy differences arm − ``reference`` paired by seed (percentage points), with the
    95 % t interval of the mean difference."""
    lines = [
        f"| ε target | arm − {reference} | pairs | mean difference (pp) | 95 % interval | "
        "per seed |",
        "|---|---|---|---|---|---|",
    ]
    for eps in sorted({r["epsilon_target"] for r in rows}):
        ok = [r for r in rows if r["epsilon_target"] == eps and "error" not in r]
        ref = {r["seed"]: r for r in ok if r["arm"] == reference}
        for arm in ARMS:
            if arm == reference:
                continue
            got = {r["seed"]: r for r in ok if r["arm"] == arm}
            seeds = sorted(set(got) & set(ref))
            if not seeds:
                continue
            diff = [100 * (got[s]["accuracy"] - ref[s]["accuracy"]) for s in seeds]
            mean = statistics.mean(diff)
            if len(diff) > 1:
                half = (
                    stats.t.ppf(0.975, len(diff) - 1)
                    * statistics.stdev(diff)
                    / math.sqrt(len(diff))
                )
                interval = f"[{mean - half:+.2f}, {mean + half:+.2f}]"
            else:
                interval = "—"
            per_seed = ", ".join(f"{s}: {d:+.2f}" for s, d in zip(seeds, diff, strict=True))
            lines.append(f"| {eps:g} | {arm} | {len(seeds)} | {mean:+.2f} | {interval} "
                         f"| {per_seed} |")  # fmt: skip
    return "\n".join(lines)


def describe(row: dict) -> str:
    if "error" in row:
        return row["error"]
    return (f"acc {row['accuracy']:.4f}, ε {row['epsilon']:.3f}, σ {row['sigma']:.3f}, "
            f"{row['seconds']:.0f} s")  # fmt: skip


def main() -> int:
    return grid_main(
        __doc__.split("\n")[0], ARMS, run_one, describe, (report, report_paired),
        epsilons=[8.0, 2.0],
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
