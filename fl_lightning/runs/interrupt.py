"""An interrupt loses nothing (issue 58 item 2): SIGINT (Ctrl-C) or SIGTERM during training
stops the run at the next round boundary, with what a finished run leaves.

Lightning's own handling ends a run on Ctrl-C with exit 1 and nothing but the metrics and the
last periodic checkpoint: no ``summary.json``, ``privacy_ledger.json`` or
``privacy_statement.md`` for the rounds it released; on SIGTERM it raises at the next step.
:class:`RoundInterrupt` takes both signals over once training starts (``on_train_start``, after
Lightning has installed its SIGTERM handler) and its handler only records the signal, so the
round in progress runs to its end: a round is released and accounted whole or not at all.
After the round (``on_train_batch_end``; under DDP the ranks agree with one boolean
all-reduce, as ``runs/slurm.py`` does) it

1. saves ``last.ckpt`` in the run's checkpoint folder (the state of that round boundary: the
   global model, the server optimizer, the strategy's and the accountant's state);
2. marks the module ``interrupted`` (the signal's name) and stops the Trainer, whose
   ``on_train_end`` writes the summary, the ledger and the statement for the rounds released
   with status "interrupted after N rounds" (``server/run_files.py``), and the CLI exits
   128 + the signal's number.

Rounds are keyed by (seed, round), so ``--ckpt_path <run>/checkpoints/last.ckpt`` with the
same ``trainer.max_steps`` ends where the uninterrupted run ends, to the last digit (weights
and ε; ``tests/reliability/test_interrupt.py``). A second signal stops at once (Python's
``KeyboardInterrupt``): the round in progress is then lost, and released nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def last_checkpoint_path(trainer: Any) -> str | None:
    """Where the run's ``ModelCheckpoint`` keeps ``last.ckpt`` (None without one)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    for cb in trainer.checkpoint_callbacks:
        if isinstance(cb, ModelCheckpoint) and cb.dirpath:
            return os.path.join(cb.dirpath, cb.CHECKPOINT_NAME_LAST + cb.FILE_EXTENSION)
    return None


def round_interrupt_callback() -> Any:
    """A :class:`RoundInterrupt` callback (built here so that importing this module does not
    import Lightning)."""
    from lightning.pytorch.callbacks import Callback

    class RoundInterrupt(Callback):
        """Stop at the next round boundary on SIGINT/SIGTERM, saving and summarising the
        rounds released (module docstring)."""

        def __init__(self) -> None:
            self.signum: int | None = None
            self._previous: dict[int, Any] = {}

        def _on_signal(self, signum: int, frame: Any) -> None:
            if self.signum is not None:  # the second: stop now, the round in progress is lost
                raise KeyboardInterrupt
            self.signum = signum
            print(
                f"\n{signal.Signals(signum).name}: stopping after the round in progress, with "
                "its checkpoint, summary and privacy statement (send it again to stop at once; "
                "that round is then lost)",
                file=sys.stderr,
                flush=True,
            )

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            for signum in SIGNALS:
                try:
                    self._previous[signum] = signal.signal(signum, self._on_signal)
                except ValueError:  # not the main thread: leave the signals as they are
                    return

        def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
            for signum, previous in self._previous.items():
                with contextlib.suppress(ValueError, TypeError):
                    signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
            self._previous = {}

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            if not self._previous:
                return
            requested = trainer.strategy.reduce_boolean_decision(self.signum is not None, all=False)
            # the last round, or a budget stop: the run ends as it would have anyway
            if not requested or trainer.should_stop or trainer.global_step >= trainer.max_steps:
                return
            signum = trainer.strategy.broadcast(self.signum or signal.SIGINT)
            pl_module.interrupted = signal.Signals(signum).name
            path = last_checkpoint_path(trainer)
            if path:  # the round boundary's full state; rank 0 writes it
                trainer.save_checkpoint(path, weights_only=False)
                pl_module.resume_from = path
            trainer.should_stop = True

    return RoundInterrupt()


def exit_code(signal_name: str) -> int:
    """128 + the signal's number, the shell's code for a process ended by that signal."""
    return 128 + int(signal.Signals[signal_name])


__all__ = ["exit_code", "last_checkpoint_path", "round_interrupt_callback"]
