"""A progress bar over rounds (the round stream is endless, so Lightning cannot size it).

One bar, ``Round 3/10 [...] loss=0.52, acc=0.81, ε=1.23``: rounds done out of
``trainer.max_steps``, the mean client training loss of the last round, the latest test
accuracy (rounds with an evaluation, ``model.eval_every``) and the ε spent so far.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm, _update_n, convert_inf

# logged metric -> label on the bar, in display order
SHOWN = {"train/loss": "loss", "test/accuracy": "acc", "privacy/epsilon": "ε"}


class RoundProgressBar(TQDMProgressBar):
    """TQDM bar in rounds, whose total is ``trainer.max_steps``."""

    def __init__(self, refresh_rate: int = 1, process_position: int = 0) -> None:
        super().__init__(refresh_rate=refresh_rate, process_position=process_position)
        self._last: dict[str, float] = {}

    @property
    def train_description(self) -> str:
        return "Round"

    @property
    def total_train_batches(self) -> int | float:
        max_steps = self.trainer.max_steps
        return max_steps if max_steps and max_steps > 0 else float("inf")

    def init_train_tqdm(self) -> Tqdm:
        bar = super().init_train_tqdm()
        bar.unit = "round"
        return bar

    def on_train_epoch_start(self, trainer: Any, *_: Any) -> None:
        if self._leave:
            self.train_progress_bar = self.init_train_tqdm()
        bar = self.train_progress_bar
        bar.reset(total=convert_inf(self.total_train_batches))
        bar.initial = bar.n = int(trainer.global_step)  # a resumed run starts at its round
        bar.set_description(self.train_description)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, *_: Any) -> None:
        bar = self.train_progress_bar
        done = int(trainer.global_step)
        if bar is not None and self._should_update(done, bar.total):
            _update_n(bar, done)
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def get_metrics(  # type: ignore[override]  # formatted strings are what the bar shows
        self, trainer: Any, pl_module: Any
    ) -> dict[str, str]:
        """Loss, accuracy and ε as logged (every metric is logged, none marked for the bar);
        accuracy is kept from the last round that evaluated."""
        for key in SHOWN:
            value = trainer.callback_metrics.get(key)
            if value is not None:
                self._last[key] = float(value)
        shown = {label: f"{self._last[k]:.4g}" for k, label in SHOWN.items() if k in self._last}
        aborted = int(getattr(pl_module, "rounds_aborted", 0))
        if aborted:  # rounds that released nothing (SecAgg below its threshold)
            done = int(trainer.global_step)
            shown["aggregated"] = f"{done - aborted}/{done}"
        return shown
