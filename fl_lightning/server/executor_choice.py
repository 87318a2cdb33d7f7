"""Which executor a run gets (``model.executor``): ``sequential``, ``vectorized`` or ``auto``.

``auto`` considers the vectorised path only when the model can be stacked
(``client/stacked.py``, with or without DP-SGD) and then measures both paths on the first rounds
(``server/executor.py: AutoExecutor``); otherwise it says in one WARNING line why it trains
sequentially.
"""

from __future__ import annotations

import logging

from fl_lightning.client.local_loop import LocalTrainer
from fl_lightning.server.executor import AutoExecutor, Executor, SequentialExecutor
from fl_lightning.server.vectorized_executor import (
    VectorizedExecutor,
    model_blocker,
    precision_blocker,
)

log = logging.getLogger(__name__)


def auto_blocker(trainer: LocalTrainer) -> str | None:
    """Why ``executor: auto`` cannot consider the vectorised path (None when the model can be
    stacked, ``client/stacked.py: stack_blocker``, with or without DP-SGD, and
    ``client.precision`` is ``"32"``)."""
    cfg = trainer.config
    return model_blocker(trainer.client.net, dp=cfg.dp_sgd is not None) or precision_blocker(cfg)


def auto_vectorizes(trainer: LocalTrainer) -> bool:
    """Whether ``executor: auto`` considers the vectorised path at all. Which path runs is
    then measured (``server/executor.py: AutoExecutor``)."""
    return auto_blocker(trainer) is None


def build_executor(name: str, trainer: LocalTrainer) -> Executor:
    if name == "vectorized":
        return VectorizedExecutor(trainer)
    if name == "auto":
        reason = auto_blocker(trainer)
        if reason is None:
            return AutoExecutor(
                SequentialExecutor(trainer), VectorizedExecutor(trainer), device=trainer.device
            )
        log.warning("executor auto: sequential training: %s", reason)
    return SequentialExecutor(trainer)


__all__ = ["auto_blocker", "auto_vectorizes", "build_executor"]
