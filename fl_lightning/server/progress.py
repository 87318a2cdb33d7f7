"""A progress bar over rounds (the round stream is endless, so Lightning cannot size it)."""

from __future__ import annotations

from lightning.pytorch.callbacks import TQDMProgressBar


class RoundProgressBar(TQDMProgressBar):
    """TQDM bar whose total is ``trainer.max_steps`` rounds."""

    @property
    def total_train_batches(self) -> int | float:
        max_steps = self.trainer.max_steps
        return max_steps if max_steps and max_steps > 0 else float("inf")

    def get_metrics(self, trainer, pl_module):  # noqa: ANN001, ANN201
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        keep = ("train/loss", "test/accuracy", "privacy/epsilon")
        return {k: v for k, v in items.items() if k in keep}
