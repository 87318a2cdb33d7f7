"""Regenerates docs/privacy.md: one row per shipped experiment config, with the guarantee
sentence the run prints, the events it composed and dp-accounting's independent recomputation
of the same ε (``fl_lightning.privacy.accounting.recompute``).

Each config runs ``--rounds`` rounds with the test suite's one shrink rule
(``tests/configs/conftest.py::offline_overrides``: internet datasets swapped for synthetic data
of the same shape, small models, about two clients a round, one local step, no budget stop where
σ is fixed); the events of a round are the ones a full-length run composes ``trainer.max_steps``
times. Usage::

    .venv/bin/python scripts/privacy_table.py [--rounds 2] [--only SUBSTRING] [--check]

``--check`` regenerates the rows and exits non-zero when any run's printed ε differs from the
recomputation by more than 1 % (tests/configs/test_experiments.py runs the same check on
every config).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pytest  # noqa: E402

from fl_lightning.privacy.accounting.recompute import headline_epsilon  # noqa: E402
from tests.configs.conftest import EXPERIMENTS, group, offline_overrides  # noqa: E402

ASYNC_ROUNDS = 10
FULL_LENGTH = ("adp_fl/mnist_offline_adp_fl.yaml", "adp_fl/mnist_offline_even_budget.yaml")
"""Offline configs whose ε is not the per-round events composed ``trainer.max_steps`` times:
ADP-FL's local-DP budgets are spent per upload, scheduled over the run's E rounds on the
config's own clients, so a shrunk short run prints another ε than the shipped config (1.03
against 5.79 for ``mnist_offline_adp_fl``). They also run as shipped, for ``trainer.max_steps``
rounds, without the shrink rule (the offline MNIST data is local), in the second table."""


def describe_events(ledger: dict) -> str:
    """The composed events in a few words."""
    if ledger.get("no_guarantee"):
        return "—"
    if ledger["client_level"]:
        s, q, k, n = (list(ledger["client_level"][-1]) + [0])[:4]
        where = (
            f"fixed {round(q * n)}/{n} (dominating pair)"
            if n
            else f"Poisson q={q:.3g}"
            if q < 1
            else "q=1"
        )
        return f"client-level Gaussian σ={s:.3g}, {where}, ×{len(ledger['client_level'])}"
    if ledger["record_level"]:
        rows = [r for rs in ledger["record_level"].values() for r in rs]
        s = rows[-1][0]
        qs = sorted({round(r[1], 3) for r in rows})
        shown = ", ".join(map(str, qs[:3])) + ("…" if len(qs) > 3 else "")
        clients = len(ledger["record_level"])
        return f"DP-SGD σ={s:.3g}, Poisson q ∈ {{{shown}}}, {clients} clients"
    if ledger.get("local"):
        e, d, unit, units, _n, *z = next(iter(ledger["local"].values()))[0]
        if z and z[0] > 0:
            return f"local Gaussian σ/Δ={z[0]:.3g} per {unit} × {units}"
        return f"local ε={e:.3g}{f', δ={d:g}' if d else ''} per {unit} × {units}"
    return "nothing released"


def run_config(config: Path, rounds: int | None, extra: list[str], *, shrink: bool = True) -> dict:
    """Runs ``config`` in this process (the CLI class is reused: no import per config), with
    the shrink rule for ``rounds`` rounds, or as shipped (``shrink=False``, ``rounds=None``:
    its own ``trainer.max_steps``)."""
    from fl_lightning.runs.cli_class import build_cli_class

    name = str(config.relative_to(REPO / "configs" / "experiment"))
    with tempfile.TemporaryDirectory() as tmp:
        shrunk = offline_overrides(config, Path(tmp)) if shrink else []
        length = ["--trainer.max_steps", str(rounds)] if rounds is not None else []
        args = [
            "fit", "--config", str(config), *shrunk, *length, *extra,
            "--trainer.default_root_dir", tmp, "--trainer.enable_progress_bar", "false",
        ]  # fmt: skip
        try:
            build_cli_class()(args)
        except (Exception, SystemExit) as err:
            return {"config": name, "error": f"{type(err).__name__}: {err}".splitlines()[0]}
        summary = json.loads(next(Path(tmp).rglob("summary.json")).read_text())
        ledger = json.loads(next(Path(tmp).rglob("privacy_ledger.json")).read_text())
    printed = float(summary["privacy/epsilon"])
    independent = headline_epsilon(ledger, delta=ledger["delta"], accountant=ledger["accountant"])
    agree = (math.isinf(printed) and math.isinf(independent)) or (
        abs(printed - independent) <= 0.01 * max(abs(independent), 1e-12)
    )
    return {
        "config": name,
        "guarantee": summary["privacy/guarantee"],
        "events": describe_events(ledger),
        "printed": printed,
        "independent": independent,
        "agree": agree,
        "rounds": summary["rounds"],
    }


def _row(r: dict) -> str:
    if "error" in r:
        return f"| `{r['config']}` | | error: {r['error']} | | | | no |"
    return (
        f"| `{r['config']}` | {r['rounds']} | {r['guarantee'].replace('|', '/')} | "
        f"{r['events']} | "
        f"{r['printed']:.4g} | {r['independent']:.4g} | {'yes' if r['agree'] else 'NO'} |"
    )


def markdown(rows: list[dict], rounds: int, full: list[dict] | None = None) -> str:
    out = [
        "# Privacy: what every shipped experiment prints, and an independent check",
        "",
        "Generated by `python scripts/privacy_table.py` (do not edit by hand). Each experiment "
        f"config ran {rounds} rounds ({ASYNC_ROUNDS} rounds with the config's own cohort for "
        "the asynchronous paper-004 configs, whose uploads arrive later on the simulated clock) "
        "with the test suite's shrink rule "
        "(synthetic data of the same shape for internet datasets, small models, about two "
        "clients a round, one local step, no budget stop where σ is fixed; "
        "`tests/configs/conftest.py`); "
        "the per-round events are those a full-length run composes `trainer.max_steps` times, "
        "except for the offline ADP-FL configs, whose local budgets are scheduled over the "
        "run's rounds on its own clients: the second table runs them as shipped. "
        "*Printed* is the run's `privacy/epsilon`; *dp-accounting* recomputes it from the "
        "run's `privacy_ledger.json` with dp-accounting alone (`fl_lightning/privacy/accounting/"
        "recompute.py`, not through `privacy/accounting/analysis.py`). Every ε is at the run's δ. "
        "`tests/configs/test_experiments.py` asserts agreement within 1 % for every config, "
        "and that the printed (ε, δ) is the sentence's pair at the ledger's δ.",
        "",
        "| config | rounds | guarantee printed | events composed | ε printed | ε dp-accounting "
        "| agree |",
        "|---|---|---|---|---|---|---|",
    ]
    out += [_row(r) for r in rows]
    if full:
        out += [
            "",
            "## As shipped: the offline ADP-FL configs at full length",
            "",
            "Each config run as shipped (its own `trainer.max_steps`, data, model and cohort; no "
            "shrink rule): the ε `fl-lightning fit --config configs/experiment/<config>` prints.",
            "",
            "| config | rounds | guarantee printed | events composed | ε printed | ε dp-accounting "
            "| agree |",
            "|---|---|---|---|---|---|---|",
            *[_row(r) for r in full],
        ]
    return "\n".join(out) + "\n"


def main() -> int:
    os.environ.setdefault("WANDB_MODE", "disabled")
    os.chdir(REPO)
    logging.disable(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.only and not args.check and args.out is None:
        # A partial table would replace every other config's row of the shipped one.
        parser.error("--only: writes a partial table; add --check, or --out PATH for it")
    out = args.out or REPO / "docs" / "privacy_table.md"
    rows = []
    for config in EXPERIMENTS:
        if args.only and args.only not in str(config):
            continue
        # Asynchronous runs (paper 004): more rounds, and the config's own cohort, because the
        # even per-upload budget N·ε/(n·E) of a two-client cohort exceeds ε and every client
        # would leave before its first upload.
        extra: list[str] = []
        rounds = args.rounds
        if "adp_fl/" in str(config):
            rounds = max(args.rounds, ASYNC_ROUNDS)
            cohort = group(config, "model").get("clients_per_round")
            extra = ["--model.clients_per_round", str(cohort)] if cohort else []
        try:
            row = run_config(config, rounds, extra)
        except (Exception, pytest.skip.Exception) as err:  # e.g. no offline stand-in
            row = {
                "config": str(config.relative_to(REPO / "configs" / "experiment")),
                "error": f"{type(err).__name__}: {err}".splitlines()[0],
            }
        rows.append(row)
        print(json.dumps(row), flush=True)
    full = []
    for name in FULL_LENGTH:
        if args.only and args.only not in name:
            continue
        full.append(run_config(REPO / "configs" / "experiment" / name, None, [], shrink=False))
        print(json.dumps(full[-1]), flush=True)
    bad = [r for r in rows + full if not r.get("agree")]
    if not args.check:
        out.write_text(markdown(rows, args.rounds, full))
    return 1 if (args.check and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
