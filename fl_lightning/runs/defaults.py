"""What the Trainer of a run gets unless the config says otherwise: its settings, the loggers
(CSV and W&B under the run's root), the callbacks (round progress bar, last checkpoint, plots)
and the checkpoint plugin (atomic, ``weights_only`` loading)."""

from __future__ import annotations

import os
from typing import Any


def trainer_defaults() -> dict[str, Any]:
    return {
        "log_every_n_steps": 1,
        "num_sanity_val_steps": 0,
        "enable_model_summary": False,
        "max_steps": 20,
        "default_root_dir": "runs",
        # True: the default loggers, built under default_root_dir by default_loggers.
        "logger": True,
    }


def default_loggers(root: str | os.PathLike[str]) -> list[Any]:
    """CSV (``<root>/fl/version_N``) and W&B (``<root>/wandb``; mode from the environment,
    :mod:`fl_lightning.loggers`)."""
    from lightning.pytorch.loggers import CSVLogger

    from fl_lightning.loggers import WandbLogger

    return [CSVLogger(save_dir=os.fspath(root), name="fl"), WandbLogger()]


def loggers_under(root: str | os.PathLike[str], logger: Any) -> Any:
    """The trainer's ``logger`` argument with every output under ``root``: ``True`` becomes the
    default loggers; a W&B logger given without a directory writes under ``root``."""
    from fl_lightning.loggers import WandbLogger

    if logger is True:
        logger = default_loggers(root)
    for lg in logger if isinstance(logger, (list, tuple)) else [logger]:
        if isinstance(lg, WandbLogger):
            lg.default_save_dir(root)
    return logger


PLOTS_ENV = "FL_LIGHTNING_PLOTS"  # "0": no end-of-fit PNGs (sweeps of many short runs)


def plots_enabled() -> bool:
    """Whether runs write their end-of-fit PNGs: yes unless ``FL_LIGHTNING_PLOTS`` is ``0``
    (they cost 0.09 of a tiny run's 0.32 CPU-seconds, docs/performance.md)."""
    value = os.environ.get(PLOTS_ENV, "1").strip()
    if value not in ("0", "1"):
        raise ValueError(f"{PLOTS_ENV}: expected 0 or 1, got {value!r}")
    return value == "1"


def default_callbacks(trainer_config: dict[str, Any]) -> list[Any]:
    """A round progress bar and a last-checkpoint writer, unless the config turned them off,
    the end-of-fit plots (``fl_lightning.callbacks.RunPlots``) unless ``FL_LIGHTNING_PLOTS=0``,
    the stop-at-a-round-boundary on SIGINT/SIGTERM (``runs/interrupt.py``) and in a SLURM job
    step the requeue-at-a-round-boundary callback (``runs/slurm.py``)."""
    from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar

    from fl_lightning.server.progress import RoundProgressBar

    given = trainer_config.get("callbacks") or []
    callbacks: list[Any] = []
    if trainer_config.get("enable_progress_bar") is not False and not any(
        isinstance(c, ProgressBar) for c in given
    ):
        callbacks.append(RoundProgressBar())
    if trainer_config.get("enable_checkpointing") is not False and not any(
        isinstance(c, ModelCheckpoint) for c in given
    ):
        callbacks.append(ModelCheckpoint(save_last=True, every_n_train_steps=10, save_top_k=0))
    from fl_lightning.callbacks import RunPlots

    if plots_enabled() and not any(isinstance(c, RunPlots) for c in given):  # accuracy / ε PNGs
        callbacks.append(RunPlots())
    from fl_lightning.runs.interrupt import round_interrupt_callback

    callbacks.append(round_interrupt_callback())  # Ctrl-C / SIGTERM: stop at a round boundary
    if "SLURM_NTASKS" in os.environ:  # a SLURM job step: checkpoint and requeue on SIGUSR1
        from fl_lightning.runs.slurm import slurm_requeue_callback

        callbacks.append(slurm_requeue_callback())
    return callbacks


def default_plugins(given: Any) -> Any:
    """The user's plugins plus an atomic, ``weights_only``-loading CheckpointIO
    (``utils/atomic.py``), unless a CheckpointIO was given."""
    from lightning.fabric.plugins import CheckpointIO

    from fl_lightning.utils.atomic import build_checkpoint_io

    plugins = [] if given is None else list(given) if isinstance(given, (list, tuple)) else [given]
    if any(isinstance(p, CheckpointIO) for p in plugins):
        return given
    return [*plugins, build_checkpoint_io()]
