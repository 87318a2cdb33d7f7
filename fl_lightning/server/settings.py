"""The round loop's own settings (``model.*`` besides sampling), checked before anything runs.

:class:`ServerSettings` holds how the server applies each round's aggregate (the server
optimizer, Reddi et al. 2021, Alg. 1), which executor trains the cohort and when the global
model is evaluated. ``FederatedModule.__init__`` builds it from its arguments, so a bad value is
refused with a one-line ``ValueError`` naming ``model.<field>`` before a Trainer exists.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch

from fl_lightning.strategies.spec import ServerOptimizerSpec


@dataclass(frozen=True)
class ServerSettings:
    """The ``FederatedModule`` arguments of the same names (see its docstring)."""

    executor: Literal["sequential", "vectorized", "auto"] = "sequential"
    server_optimizer: Literal["sgd", "adam"] = "sgd"
    server_lr: float = 1.0
    server_momentum: float = 0.0
    server_betas: tuple[float, float] = (0.9, 0.99)
    server_eps: float = 1e-3
    eval_every: int = 5

    def __post_init__(self) -> None:
        if self.executor not in ("sequential", "vectorized", "auto"):
            raise ValueError(
                "model.executor: expected 'sequential', 'vectorized' or 'auto', got "
                f"{self.executor!r}"
            )
        if self.server_optimizer not in ("sgd", "adam"):
            raise ValueError(
                f"model.server_optimizer: expected 'sgd' or 'adam', got {self.server_optimizer!r}"
            )
        if self.server_lr < 0:
            raise ValueError(f"model.server_lr: learning rate must be >= 0, got {self.server_lr}")
        if not 0 <= self.server_momentum < 1:
            raise ValueError(
                f"model.server_momentum: must be in [0, 1), got {self.server_momentum}"
            )
        if self.eval_every < 0:
            raise ValueError(f"model.eval_every: must be >= 0, got {self.eval_every}")
        betas = (float(self.server_betas[0]), float(self.server_betas[1]))
        object.__setattr__(self, "server_betas", betas)

    def optimizer(self, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
        """The server optimizer that takes the aggregate Δ as the pseudo-gradient −Δ: SGD with
        lr 1 and no momentum is FedAvg, with momentum FedAvgM, Adam FedAdam."""
        if self.server_optimizer == "adam":
            return torch.optim.Adam(
                params, lr=self.server_lr, betas=self.server_betas, eps=self.server_eps
            )
        return torch.optim.SGD(params, lr=self.server_lr, momentum=self.server_momentum)

    @property
    def optimizer_spec(self) -> ServerOptimizerSpec:
        """The server optimizer as the strategy sees it (``FederationSpec.server``)."""
        return ServerOptimizerSpec(
            self.server_optimizer, float(self.server_lr), float(self.server_momentum)
        )

    def evaluates_after(self, round_idx: int, rounds: int) -> bool:
        """Whether the global model is scored after round ``round_idx`` (0-based): every
        ``eval_every`` rounds and at the last planned round, so a short run has an accuracy."""
        last = round_idx + 1 == rounds
        return bool(self.eval_every and (round_idx + 1) % self.eval_every == 0) or last


__all__ = ["ServerSettings"]


def refuse_trainer_precision(precision: str) -> None:
    """Refuses Lightning's ``trainer.precision`` other than 32 or 64 bits: its plugin would run
    every round, DP-SGD clients included, under its autocast (see ``client.precision`` in
    ``client/config.py`` for why DP-SGD refuses bfloat16)."""
    if precision not in ("32-true", "32", "64-true", "64"):
        raise ValueError(
            f"trainer.precision: {precision!r} is not supported; set client.precision: "
            "bf16-mixed for mixed-precision local training (non-private clients only)"
        )
