"""The end of a run, on rank 0: its summary, its files (``run_files.py``), its privacy
statement with the facts the statement needs beyond the ledger (``privacy/guarantee/
statement.py: RunFacts``), and the one line it prints, or the one-line refusal of a run none
of whose rounds released anything (exit 1, ``cli.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.privacy.guarantee.statement import RunFacts
from fl_lightning.server.run_files import (
    NOT_WRITTEN,
    NothingReleased,
    aggregation_counts,
    interrupted_status,
    nothing_released,
    run_files_dir,
    run_summary,
    summary_line,
    write_privacy_statement,
    write_run_files,
)
from fl_lightning.strategies.base import Metrics, Strategy


def end_summary(
    final: dict[str, float],
    *,
    accountant: PrivacyAccountant | None,
    strategy_metrics: Metrics,
    completed: int,
    aborted: int,
    planned: int,
    stopped_by_budget: bool,
    interrupted: str | None,
    resume_from: str | None,
) -> dict[str, Any]:
    """``summary.json`` of a run that completed ``completed`` of ``planned`` rounds (``aborted``
    of them released nothing), stopped by its budget or by the signal ``interrupted``."""
    summary = run_summary(rounds=completed, stopped_by_budget=stopped_by_budget, final=final,
                          accountant=accountant, strategy_metrics=strategy_metrics)  # fmt: skip
    summary.update(aggregation_counts(completed, aborted, planned=planned))
    if interrupted:
        summary.update(
            interrupted_status(interrupted, completed, planned=planned, resume_from=resume_from)
        )
    return summary


def finish_run(
    summary: dict[str, Any],
    final: dict[str, float],
    *,
    log_dir: str | None,
    accountant: PrivacyAccountant | None,
    strategy: Strategy,
    data: Any,
    secure_mode: bool,
    callbacks: Sequence[Any],
    loggers: Sequence[Any],
    console_label: str = "",
) -> None:
    """Rank 0: writes the run's files and statement under ``log_dir`` (never the working
    directory Lightning fell back to) and prints the run's line, or raises
    :class:`NothingReleased`."""
    out = run_files_dir(log_dir)
    write_run_files(summary, accountant, out, loggers)
    facts = run_facts(summary, out, strategy=strategy, accountant=accountant, data=data,
                      secure_mode=secure_mode, callbacks=callbacks)  # fmt: skip
    statement = write_privacy_statement(accountant, facts, out, status=summary.get("status"))
    line = summary_line(summary, final)
    if log_dir and out is None:
        line = f"{line}; {NOT_WRITTEN}"
    line = f"{line}; details: {statement}" if statement else line
    nothing = nothing_released(summary, out)
    if nothing:  # one line, exit 1 (cli.py), instead of a "Finished" that hides it
        raise NothingReleased(nothing)
    print(f"{console_label}{line}", flush=True)


def run_facts(
    summary: dict[str, Any],
    out: str | None,
    *,
    strategy: Strategy,
    accountant: PrivacyAccountant | None,
    data: Any,
    secure_mode: bool,
    callbacks: Sequence[Any],
) -> RunFacts:
    """What ``privacy_statement.md`` needs beyond the ledger: among it the files the run
    writes (those in ``out`` now, and ``client_times.csv`` when a ``ClientTimer`` will write it
    at the end of fit)."""
    from fl_lightning.callbacks import ClientTimer

    files = {p.name for p in Path(out).iterdir()} if out and Path(out).is_dir() else set()
    if any(isinstance(cb, ClientTimer) and cb.write_csv for cb in callbacks):
        files.add("client_times.csv")
    fewest = getattr(strategy.central_dp, "min_survivors", None)
    worst = accountant.one_more_round(int(fewest)) if accountant is not None and fewest else None
    return RunFacts(
        num_clients=int(data.num_clients),
        num_records=int(data.client_sizes().sum()),
        secure_mode=secure_mode,
        accountant_name=accountant.accountant_words() if accountant else "",
        loss_tail=summary.get("privacy/loss_tail"),
        one_more_round=None if worst is None or fewest is None else (int(fewest), worst),
        epsilon=float(summary.get("privacy/epsilon", float("inf"))),
        guarantee=str(summary.get("privacy/guarantee", "none: no accountant")),
        strategy=type(strategy).__name__,
        files=tuple(sorted(files)),
    )
