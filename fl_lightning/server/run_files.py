"""What a finished run leaves behind: ``summary.json``, ``privacy_ledger.json``, the label
histogram of the partition, the W&B summary and the one line it prints.

Every file is written atomically (``utils/atomic.py``) with environment secrets redacted, and
only by the global-zero process; ``privacy_ledger.json`` holds the events behind the printed ε so
that anyone can recompute it (``fl_lightning.privacy.accounting.recompute``, docs/privacy.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info

from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.privacy.guarantee.observers import from_state as observer_rows
from fl_lightning.privacy.guarantee.statement import RunFacts, privacy_statement
from fl_lightning.utils.atomic import atomic_write
from fl_lightning.utils.redact import redact


def run_files_dir(log_dir: str | None) -> str | None:
    """Where a run's own files go: the trainer's ``log_dir``, or None when that is the directory
    the process was started in.

    Lightning falls back to the working directory when a Trainer has neither a logger nor a
    ``default_root_dir``: a run never chose it, and a ``summary.json`` or ``privacy_statement.md``
    there may be the user's own, so the run writes none of its files (the CLI chooses ``runs/``;
    a Trainer given ``default_root_dir`` or a logger gets them there).
    """
    if not log_dir:
        return None
    if Path(log_dir).resolve() == Path.cwd().resolve():
        return None
    return log_dir


NOT_WRITTEN = (
    "run files not written: the trainer's directory is the working directory "
    "(give the Trainer a default_root_dir or a logger to keep summary.json, "
    "privacy_ledger.json and privacy_statement.md)"
)


def write_label_histogram(hist: torch.Tensor, log_dir: str | None, loggers: Iterable[Any]) -> None:
    """The partition's client × label counts, as ``label_histogram.csv`` and hyperparameters."""
    sizes = hist.sum(dim=1)
    if log_dir:
        rows = ["client," + ",".join(f"label_{c}" for c in range(hist.shape[1]))]
        rows += [f"{i}," + ",".join(str(int(v)) for v in row) for i, row in enumerate(hist)]
        atomic_write(Path(log_dir) / "label_histogram.csv", "\n".join(rows) + "\n")
    for logger in loggers:
        logger.log_hyperparams(
            {
                "partition/label_histogram": hist.tolist(),
                "partition/min_client_size": int(sizes.min()),
                "partition/max_client_size": int(sizes.max()),
            }
        )


def log_upload_guarantee(note: str | None, loggers: Iterable[Any]) -> None:
    """What the strategy's upload mechanism guarantees (``UploadPrivacy.guarantee_note``), when
    it says: logged once at INFO (``rank_zero_info``; the CLI's console keeps to the round bar,
    warnings and the summary, so it shows there only with Lightning's INFO logging on) and as the
    ``strategy/guarantee`` hyperparameter, beside the accountant's headline."""
    if note is None:
        return
    rank_zero_info(f"local_dp privacy: {note}")
    for logger in loggers:
        logger.log_hyperparams({"strategy/guarantee": note})


def run_summary(
    *,
    rounds: int,
    stopped_by_budget: bool,
    final: dict[str, float],
    accountant: PrivacyAccountant | None,
    strategy_metrics: dict[str, float],
) -> dict[str, Any]:
    """The run's final numbers: rounds, final test metrics, the accountant's report, and for a
    published variant without a guarantee the sound ε of the same noise."""
    summary: dict[str, Any] = {
        "rounds": rounds,
        "stopped_by_budget": stopped_by_budget,
        **{f"test/{k}": v for k, v in final.items()},
    }
    if accountant is not None:
        summary.update(accountant.report())
    sound = strategy_metrics.get("epsilon_sound")
    if sound is not None and math.isinf(summary.get("privacy/epsilon", 0.0)):
        summary["privacy/epsilon_sound"] = float(sound)
    return summary


def write_run_files(
    summary: dict[str, Any],
    accountant: PrivacyAccountant | None,
    log_dir: str | None,
    loggers: Iterable[Any],
) -> None:
    """The summary to W&B and ``summary.json``, and the privacy ledger beside it."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            for k, v in summary.items():
                logger.experiment.summary[k] = v
    if not log_dir:
        return
    path = Path(log_dir) / "summary.json"
    atomic_write(path, json.dumps(redact(summary), indent=2, default=str) + "\n")
    if accountant is not None:
        ledger = {
            **ledger_of(accountant),
            **({"status": summary["status"]} if "status" in summary else {}),
        }
        atomic_write(path.parent / "privacy_ledger.json", json.dumps(ledger) + "\n")


def ledger_of(accountant: PrivacyAccountant) -> dict[str, Any]:
    """``privacy_ledger.json``: the accountant's events and state, with the per-observer table
    they give (``privacy/guarantee/observers.py``; recomputable from the events)."""
    return {
        "accountant": accountant.accountant,
        "delta": accountant.delta,
        **accountant.state_dict(),
        "observers": [row.to_state() for row in accountant.observers()],
    }


def write_privacy_statement(
    accountant: PrivacyAccountant | None,
    facts: RunFacts,
    log_dir: str | None,
    *,
    status: str | None = None,
) -> Path | None:
    """``privacy_statement.md`` beside ``privacy_ledger.json`` (``privacy/guarantee/statement.py``),
    from the same ledger; returns its path (None without an accountant or a run directory)."""
    if accountant is None or not log_dir:
        return None
    path = Path(log_dir) / "privacy_statement.md"
    text = privacy_statement(ledger_of(accountant), facts)
    if status:  # an interrupted run: the statement covers the rounds it released
        text = f"**Status: {status}.** The guarantee below covers the rounds released.\n\n{text}"
    atomic_write(path, text)
    return path


class NothingReleased(RuntimeError):
    """A run none of whose rounds aggregated: it ends with one line and exit 1 (cli.py)."""


def aggregation_counts(completed: int, aborted: int, *, planned: int) -> dict[str, int]:
    """``rounds_aggregated`` / ``rounds_planned`` for the summary of a run in which rounds
    aborted (SecAgg below ``strategy.min_survivors``: nothing released, nothing spent); empty
    when every round aggregated."""
    if not aborted:
        return {}
    return {"rounds_aggregated": completed - aborted, "rounds_aborted": aborted,
            "rounds_planned": planned}  # fmt: skip


def interrupted_status(
    signal_name: str, completed: int, *, planned: int, resume_from: str | None
) -> dict[str, Any]:
    """The summary's ``status`` (and ``resume_from``) of a run stopped by ``signal_name`` at a
    round boundary (``runs/interrupt.py``): what it holds covers the ``completed`` rounds."""
    out: dict[str, Any] = {
        "status": f"interrupted after {completed} rounds ({signal_name})",
        "rounds_planned": planned,
    }
    if resume_from:
        out["resume_from"] = resume_from
    return out


def nothing_released(summary: dict[str, Any], out: str | None) -> str | None:
    """The one line of a run none of whose rounds aggregated, or None."""
    if summary.get("rounds_aggregated", 1) > 0 or not summary.get("rounds"):
        return None
    where = f"; its files: {out}" if out else ""
    return (
        f"strategy: none of the {summary['rounds']} rounds aggregated (each had fewer "
        f"survivors than strategy.min_survivors, or a split masking graph): the run released "
        f"nothing{where}"
    )


def summary_line(summary: dict[str, Any], final: dict[str, float]) -> str:
    """The line a finished run prints: rounds, accuracy, the headline ε with δ and the
    observer it holds against, the guarantee sentence, and the server's ε (its row of the
    per-observer table, ``privacy/guarantee/observers.py``)."""
    eps = summary.get("privacy/epsilon", math.inf)
    rows = observer_rows(summary.get("privacy/observers", []))
    against = f" against {rows[0].observer.words}" if rows and not math.isinf(eps) else ""
    aborted = summary.get("rounds_aborted")
    interrupted = str(summary.get("status", "")).startswith("interrupted")
    rounds = f"{summary['rounds']} rounds"
    if interrupted:  # stopped by SIGINT/SIGTERM at a round boundary (runs/interrupt.py)
        rounds = f"after {summary['rounds']} of {summary['rounds_planned']} rounds"
    if aborted:
        done = summary["rounds_aggregated"]
        rounds += f" ({done} aggregated, {aborted} aborted: nothing released)"
    verb = "Interrupted" if interrupted else "Finished"
    line = (
        f"{verb} {rounds}: test accuracy "
        f"{final.get('accuracy', float('nan')):.4f}, ε = {eps:.3f} "
        f"(δ = {summary.get('privacy/delta', 0):g}){against}; "
        f"guarantee: {summary.get('privacy/guarantee', 'none: no accountant')}"
    )
    if against and len(rows) > 1:
        line += f"; {rows[1].clause()}"
    if "privacy/epsilon_sound" in summary:
        line += f"; sound ε of the same noise = {summary['privacy/epsilon_sound']:.3f}"
    if summary.get("resume_from"):
        line += f"; resume: --ckpt_path {summary['resume_from']}"
    return line


__all__ = [
    "NOT_WRITTEN",
    "ledger_of",
    "NothingReleased",
    "interrupted_status",
    "aggregation_counts",
    "nothing_released",
    "run_files_dir",
    "run_summary",
    "summary_line",
    "write_label_histogram",
    "write_privacy_statement",
    "write_run_files",
]
