"""DP-FTRL (tree aggregation, banded square root) vs DP-FedAvg at equal client-level ε.

Offline MNIST (``configs/experiment/dp_ftrl/mnist_offline.yaml``: 100 clients, cohorts of 20,
40 rounds, logistic regression), σ calibrated to ε ∈ {2, 8} at δ = 1e-5 for every arm:

* ``dp_fedavg``: DP-FedAvg on fixed-size cohorts (20 of 100 without replacement), replace-one
  adjacency, dp-accounting's RDP accountant for sampling without replacement (amplified);
* ``dp_fedavg_poisson``: DP-FedAvg on Poisson cohorts (q = 0.2), add/remove, amplified (the
  tight Poisson accounting of the run's accountant);
* ``tree`` (plain estimator) / ``tree_honaker`` / ``bsr`` / ``banded`` / ``blt``: DP-FTRL on
  cyclic cohorts (each client every 5 rounds, 8 participations), one Gaussian event of
  multiplier σ/Δ, add/remove (zero-out) adjacency, no amplification;
* ``banded_max`` / ``blt_max``: the same optimised for the max (last-round) error instead of
  the mean;
* ``amplified_banded``: DP-FTRL with the optimised banded factorisation on cyclic Poisson cohorts
  (2 blocks of 50, q = 0.4), 20 Poisson-subsampled Gaussians of multiplier σ/ζ.

Each run is appended to a JSON-lines store as it ends (rerunning skips the runs stored), so the
script can be stopped and resumed; ``--report`` prints the Markdown table of what is stored.

    nice -n 10 python benchmarks/dp_ftrl_mnist_offline.py --seeds 0 1 2 --store S.jsonl
    python benchmarks/dp_ftrl_mnist_offline.py --store S.jsonl --report
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _grid_store import fit, grid_main  # noqa: E402

CONFIG = "configs/experiment/dp_ftrl/mnist_offline.yaml"
ARMS = {
    "dp_fedavg": [
        "--strategy", "fl_lightning.strategies.dp_fedavg.DPFedAvg",
        "--strategy.init_args.clip_norm", "1.0",
        "--strategy.init_args.noise_multiplier", "null",
        "--model.sampling", "fixed",
    ],
    "dp_fedavg_poisson": [
        "--strategy", "fl_lightning.strategies.dp_fedavg.DPFedAvg",
        "--strategy.init_args.clip_norm", "1.0",
        "--strategy.init_args.noise_multiplier", "null",
        "--model.sampling", "poisson",
    ],
    "tree": ["--strategy.init_args.factorization", "tree",
             "--strategy.init_args.tree_estimator", "plain"],
    "bsr": ["--strategy.init_args.factorization", "bsr"],
    # issue 50: Honaker's tree, the optimised banded and BLT factorisations (cyclic cohorts,
    # k = 8, b = 5), and amplified banded (cyclic Poisson: 2 blocks of 50, each client with
    # q = 0.4, an expected cohort of 20; p = b = 2 bands; 20 Poisson-subsampled Gaussians)
    "tree_honaker": ["--strategy.init_args.factorization", "tree",
                     "--strategy.init_args.tree_estimator", "honaker"],
    "banded": ["--strategy.init_args.factorization", "banded"],
    "blt": ["--strategy.init_args.factorization", "blt"],
    "banded_max": ["--strategy.init_args.factorization", "banded",
                   "--strategy.init_args.error", "max"],
    "blt_max": ["--strategy.init_args.factorization", "blt", "--strategy.init_args.error", "max"],
    "amplified_banded": ["--strategy.init_args.factorization", "banded",
                         "--model.sampling", "cyclic_poisson", "--model.clients_per_round", "50",
                         "--model.client_rate", "0.4"],
}  # fmt: skip


def run_one(arm: str, eps: float, seed: int) -> dict:
    got = fit(["--config", CONFIG, *ARMS[arm], "--privacy.target_epsilon", str(eps),
               "--seed_everything", str(seed)])  # fmt: skip
    if "error" in got:
        raise RuntimeError(f"{arm} ε={eps} seed={seed} failed: {got['error']}")
    s = got["summary"]
    return {
        "arm": arm,
        "epsilon_target": eps,
        "seed": seed,
        "accuracy": s["test/accuracy"],
        "epsilon": s["privacy/epsilon"],
        "guarantee": s.get("privacy/guarantee", ""),
        "rounds": s["rounds"],
        **{k: got[k] for k in ("seconds", "load_before", "load_after", "command")},
    }


def report(rows: list[dict]) -> str:
    lines = [
        "| ε target | arm | runs | test accuracy % (mean ± sd) | reported ε | seeds |",
        "|---|---|---|---|---|---|",
    ]
    for eps in sorted({r["epsilon_target"] for r in rows}):
        for arm in ARMS:
            got = [r for r in rows if r["epsilon_target"] == eps and r["arm"] == arm]
            if not got:
                continue
            acc = [100 * r["accuracy"] for r in got]
            sd = statistics.stdev(acc) if len(acc) > 1 else float("nan")
            lines.append(
                f"| {eps:g} | {arm} | {len(got)} | {statistics.mean(acc):.2f} ± {sd:.2f} | "
                f"{max(r['epsilon'] for r in got):.3g} | "
                f"{', '.join(str(r['seed']) for r in got)} |"
            )
    return "\n".join(lines)


def report_paired(rows: list[dict], reference: str = "bsr") -> str:
    """Accuracy differences arm − ``reference`` paired by seed (percentage points)."""
    lines = [
        f"| ε target | arm − {reference} | pairs | mean difference (pp) | sd | per seed |",
        "|---|---|---|---|---|---|",
    ]
    for eps in sorted({r["epsilon_target"] for r in rows}):
        ref = {r["seed"]: r for r in rows if r["epsilon_target"] == eps and r["arm"] == reference}
        for arm in ARMS:
            if arm == reference:
                continue
            got = {r["seed"]: r for r in rows if r["epsilon_target"] == eps and r["arm"] == arm}
            seeds = sorted(set(got) & set(ref))
            if not seeds:
                continue
            diff = [100 * (got[s]["accuracy"] - ref[s]["accuracy"]) for s in seeds]
            sd = statistics.stdev(diff) if len(diff) > 1 else float("nan")
            per_seed = ", ".join(f"{s}: {d:+.2f}" for s, d in zip(seeds, diff, strict=True))
            lines.append(
                f"| {eps:g} | {arm} | {len(seeds)} | {statistics.mean(diff):+.2f} | {sd:.2f} "
                f"| {per_seed} |"
            )
    return "\n".join(lines)


def describe(row: dict) -> str:
    return f"acc {row['accuracy']:.4f}, ε {row['epsilon']:.3g}, {row['seconds']:.0f} s"


def main() -> int:
    return grid_main(
        __doc__.split("\n")[0], ARMS, run_one, describe, (report, report_paired),
        epsilons=[2.0, 8.0],
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
