"""Where the command is (config, setup or training), which decides how an error is reported
(``cli.run_lightning``), and the callback that marks the start of training."""

from __future__ import annotations

from typing import Any


class RunPhase:
    """Where the command is: ``config`` (parsing, building), ``setup`` (``Trainer.fit`` before
    the first round) or ``training`` (rounds or evaluation running). Decides how an error is
    reported (:func:`run_lightning`)."""

    value = "config"


def phase_callback() -> Any:
    from lightning.pytorch.callbacks import Callback

    class TrainingPhase(Callback):
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            RunPhase.value = "training"

        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            RunPhase.value = "training"

        def on_test_start(self, trainer: Any, pl_module: Any) -> None:
            RunPhase.value = "training"

    return TrainingPhase()
