"""The privacy accountant's share of a run's wall time, and a round's accounting cost over rounds.

Two real `fl-lightning fit` runs, in process, with every entry point of the accountant timed
(``PrivacyAccountant.record``, ``report``, ``would_exceed``, ``report_alone`` and the noise
calibration ``analysis.calibrate_noise_multiplier``; nested calls are counted once):

* ``quickstart``: ``configs/experiment/quickstart.yaml`` as shipped (client-level DP-FedAvg,
  40 rounds, PLD accountant);
* ``dpsgd``: record-level DP-SGD, 100 clients of heterogeneous sizes (Dirichlet(1.0) label
  skew over the digits training split, so each client has its own Poisson rate B/nᵢ), 10 a
  round, one DP-SGD step a round, 1,000 rounds, σ = 1.0, a ``privacy.target_epsilon`` high
  enough not to stop the run, so the budget check (``would_exceed``) runs before every round.

A third row, ``accounting only``, drives the accountant alone as ``training_step`` does
(``would_exceed``, ``record``, ``report`` a round) with the DP-SGD run's client sizes and event
shapes for ``--ledger-rounds`` (default 1,000) rounds, to show a round's accounting cost over a
long run without its training time.

Reported: wall time of the run (CLI construction included), the accountant's seconds and share,
and the accounting seconds per round over the first and the last tenth of the rounds (flat means
the ledger is not replayed). The machine and its load average before and after are measured and
recorded (``benchmarks/_record.py``): on a loaded machine the shares, not the seconds, are the
result. Appended to ``DIR/accountant_share.{json,md}`` (``--out DIR``).

    python benchmarks/accountant_share.py [--rounds 1000] [--accountant pld] [--out DIR]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _record import record_run  # noqa: E402

COMMON = [
    "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
    "--trainer.enable_progress_bar", "false",
]  # fmt: skip


def dpsgd_args(rounds: int, accountant: str) -> list[str]:
    return [
        "--config", str(REPO / "configs/experiment/quickstart.yaml"),
        "--data.num_clients", "100", "--data.partitioner", "dirichlet", "--data.alpha", "1.0",
        "--client.local_steps", "1", "--client.batch_size", "4",
        "--client.dp_sgd", '{"noise_multiplier": 1.0, "max_grad_norm": 1.0}',
        "--strategy", "fl_lightning.strategies.fedavg.FedAvg",
        "--model.clients_per_round", "10", "--model.eval_every", "0",
        "--privacy.accountant", accountant, "--privacy.target_epsilon", "1e6",
        "--trainer.max_steps", str(rounds),
    ]  # fmt: skip


class Timer:
    """Wall seconds inside the wrapped functions (outermost call only) and per round."""

    def __init__(self) -> None:
        self.total = 0.0
        self.depth = 0
        self.round_seconds: list[float] = []
        self.current = 0.0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.depth:
                return fn(*args, **kwargs)
            self.depth += 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                self.depth -= 1
                self.total += spent
                self.current += spent
                if fn.__name__ == "record":  # one record a round closes the round's tally
                    self.round_seconds.append(self.current)
                    self.current = 0.0

        return timed


def instrument(timer: Timer) -> list[tuple[Any, str, Any]]:
    """Wraps the accountant's entry points; returns what to restore."""
    import fl_lightning.privacy.accounting.analysis as analysis
    import fl_lightning.server.privacy_plan as plan
    import fl_lightning.strategies.spec as spec
    from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant

    saved = []
    for owner, name in [
        (PrivacyAccountant, "record"),
        (PrivacyAccountant, "report"),
        (PrivacyAccountant, "would_exceed"),
        (PrivacyAccountant, "report_alone"),
        (analysis, "calibrate_noise_multiplier"),
        (plan, "calibrate_noise_multiplier"),
        (spec, "calibrate_noise_multiplier"),
    ]:
        original = getattr(owner, name)
        saved.append((owner, name, original))
        setattr(owner, name, timer.wrap(original))
    return saved


def timed_run(args: list[str]) -> dict[str, Any]:
    """One in-process ``fl-lightning fit``: wall seconds, accountant seconds, per-round costs."""
    from fl_lightning.runs.cli_class import build_cli_class

    timer = Timer()
    saved = instrument(timer)
    root = tempfile.mkdtemp()
    start = time.perf_counter()
    try:
        cli = build_cli_class()(["fit", *args, *COMMON, "--trainer.default_root_dir", root])
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)
    wall = time.perf_counter() - start
    per_round = timer.round_seconds
    tenth = max(1, len(per_round) // 10)
    report = cli.model.accountant.report()
    return {
        "rounds": len(per_round),
        "wall_s": wall,
        "accountant_s": timer.total,
        "share": timer.total / wall,
        "round_accounting_ms_first_tenth": 1e3 * statistics.median(per_round[:tenth]),
        "round_accounting_ms_last_tenth": 1e3 * statistics.median(per_round[-tenth:]),
        "epsilon": report["privacy/epsilon"],
        "guarantee": report["privacy/guarantee"],
        "client_sizes": [int(n) for n in cli.datamodule.client_sizes().tolist()],
    }


def clear_caches() -> None:
    """Empties the accounting caches, so that a run starts cold as in a fresh process."""
    import fl_lightning.privacy.accounting.analysis as analysis

    for fn in (
        analysis._history_pld,
        analysis._epsilon_pld,
        analysis._epsilon_rdp,
        analysis._rdp_per_step,
        analysis._epsilon_prv,
        analysis.gaussian_epsilon,
        analysis.rdp_screen_epsilon,
        analysis._optimal_composition,
    ):
        fn.cache_clear()


def accounting_only(rounds: int, accountant: str, sizes: list[int]) -> dict[str, Any]:
    """The accountant alone over ``rounds`` rounds of the DP-SGD run's shape: 10 of the clients
    a round (seeded), one DP-SGD step each at q = B/nᵢ (B = 4), σ = 1.0; caches cold."""
    import numpy as np

    clear_caches()

    from fl_lightning.privacy.accounting.budget import dp_sgd_event
    from fl_lightning.privacy.accounting.events import RoundPrivacy
    from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant

    acc = PrivacyAccountant(accountant, 1e-5, 1e6)
    rng = np.random.default_rng(0)
    per_round = []
    start = time.perf_counter()
    for _ in range(rounds):
        cohort = [int(c) for c in rng.choice(len(sizes), size=10, replace=False)]
        spent = RoundPrivacy(
            record_level={
                c: [dp_sgd_event(1.0, batch_size=4, size=sizes[c], steps=1)] for c in cohort
            }
        )
        t = time.perf_counter()
        if not acc.would_exceed(spent):
            acc.record(spent)
        acc.report(tail=False)  # as a round logs it (server/round.py); the tail at the end
        per_round.append(time.perf_counter() - t)
    wall = time.perf_counter() - start
    tenth = max(1, rounds // 10)
    report = acc.report()
    return {
        "rounds": rounds,
        "wall_s": wall,
        "accountant_s": sum(per_round),
        "share": sum(per_round) / wall,
        "round_accounting_ms_first_tenth": 1e3 * statistics.median(per_round[:tenth]),
        "round_accounting_ms_last_tenth": 1e3 * statistics.median(per_round[-tenth:]),
        "epsilon": report["privacy/epsilon"],
        "guarantee": report["privacy/guarantee"],
    }


def compare_arms(
    out: Path | None,
    name: str,
    *,
    target: tuple[Any, str],
    arms: dict[str, Any],
    rounds: int,
    accountant: str,
    sizes: list[int],
    repeats: int,
    title: str,
    intro: str,
    column: str,
    ratio: str,
    differ: str,
    note: str | None,
    epsilon_format: str = "{!r}",
) -> None:
    """``accounting_only`` once per arm and repeat, interleaved, with ``target`` (a module and
    one of its attributes) set to the arm's value for its runs and restored after; then records
    the median seconds of each arm, their ratio (first arm / second, labelled ``ratio``) and each
    arm's ε, and exits with ``differ`` when the arms' ε differ (the variants must only change how
    fast it is found)."""
    module, attribute = target
    shipped = getattr(module, attribute)
    load_before = os.getloadavg()
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    eps: dict[str, set[float]] = {arm: set() for arm in arms}
    for _ in range(repeats):
        for arm, value in arms.items():
            setattr(module, attribute, value)
            try:
                run = accounting_only(rounds, accountant, sizes)
            finally:
                setattr(module, attribute, shipped)
            seconds[arm].append(run["wall_s"])
            eps[arm].add(run["epsilon"])
    median = {arm: statistics.median(v) for arm, v in seconds.items()}
    first, second = arms  # the reference, then the variant shipped
    lines = [
        "",
        f"| {column} | median s | runs (s) | ε |",
        "|---|---|---|---|",
        *[
            f"| {arm} | {median[arm]:.2f} | {', '.join(f'{s:.2f}' for s in seconds[arm])} "
            f"| {', '.join(epsilon_format.format(e) for e in sorted(eps[arm]))} |"
            for arm in arms
        ],
        "",
        f"- ratio {ratio}: {median[first] / median[second]:.2f}",
    ]
    record_run(
        out,
        name,
        title=title,
        intro=intro,
        lines=lines,
        load_before=load_before,
        command=" ".join(sys.argv),
        note=note,
        seconds=seconds,
        epsilon={arm: sorted(v) for arm, v in eps.items()},
    )
    if len({e for v in eps.values() for e in v}) != 1:
        sys.exit(f"the arms' ε differ: {differ}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=1000, help="rounds of the DP-SGD run")
    parser.add_argument("--accountant", default="pld", choices=["pld", "rdp", "prv"])
    parser.add_argument("--skip-quickstart", action="store_true")
    parser.add_argument("--ledger-rounds", type=int, default=1000, help="accounting-only rounds")
    parser.add_argument("--out", default=None, help="directory to append the run to")
    parser.add_argument("--note", default=None)
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "disabled")
    load_before = os.getloadavg()
    runs: dict[str, dict[str, Any]] = {}
    if not args.skip_quickstart:
        quick = ["--config", str(REPO / "configs/experiment/quickstart.yaml")]
        runs["quickstart"] = timed_run([*quick, "--privacy.accountant", args.accountant])
    clear_caches()
    runs["dpsgd"] = timed_run(dpsgd_args(args.rounds, args.accountant))
    sizes = runs["dpsgd"].pop("client_sizes")
    runs["accounting only"] = accounting_only(args.ledger_rounds, args.accountant, sizes)
    lines = [
        "",
        "| run | rounds | wall s | accountant s | share | accounting ms/round, first 10 % "
        "| last 10 % | ε |",
        "|---|---|---|---|---|---|---|---|",
    ]
    runs["quickstart"] = {
        k: v for k, v in runs.get("quickstart", {}).items() if k != "client_sizes"
    }
    if not runs["quickstart"]:
        del runs["quickstart"]
    for name, r in runs.items():
        lines.append(
            f"| {name} | {r['rounds']} | {r['wall_s']:.1f} | {r['accountant_s']:.2f} | "
            f"{100 * r['share']:.1f} % | {r['round_accounting_ms_first_tenth']:.1f} | "
            f"{r['round_accounting_ms_last_tenth']:.1f} | {r['epsilon']:.3f} |"
        )
    lines += ["", *(f"- {name}: {r['guarantee']}" for name, r in runs.items())]
    command = "python benchmarks/accountant_share.py " + " ".join(sys.argv[1:])
    record_run(
        args.out,
        "accountant_share",
        title=f"accountant {args.accountant}, DP-SGD run of {args.rounds} rounds, accounting "
        f"alone {args.ledger_rounds} rounds",
        intro="# The accountant's share of wall time (issue 33)\n\n"
        "`benchmarks/accountant_share.py`; each run appended as measured.\n",
        lines=lines,
        load_before=load_before,
        command=command,
        note=args.note,
        runs=runs,
    )


if __name__ == "__main__":
    main()
