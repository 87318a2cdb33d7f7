"""Cohort execution: runs local training for the clients of a round.

``SequentialExecutor`` trains this process's clients one after another on the one reused
LocalTrainer and applies the strategy's client-side processing, with a generator keyed by
(seed, round, client) so results do not depend on the order or the process.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from fl_lightning.client.local_loop import LocalTrainer
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.utils.rng import generator_for

if TYPE_CHECKING:
    from fl_lightning.callbacks import ClientHooks
    from fl_lightning.data.datamodule import FederatedDataModule
    from fl_lightning.strategies.base import Strategy


class SequentialExecutor:
    """Trains the given clients one at a time; yields their processed updates."""

    def __init__(self, trainer: LocalTrainer) -> None:
        self.local_trainer = trainer
        # ``fl_lightning.callbacks.ClientHooks`` (set by the FederatedModule): the callbacks'
        # on_client_start / on_client_end around each client.
        self.hooks: ClientHooks | None = None

    def run(
        self,
        clients: Sequence[int],
        ctx: RoundContext,
        data: FederatedDataModule,
        strategy: Strategy,
    ) -> Iterator[ClientUpdate]:
        hooks = self.hooks
        for client_id in clients:
            x, y = data.client_data(client_id)
            if hooks is not None:
                hooks.start(client_id, ctx)
            update = self.local_trainer.train(client_id, x, y, ctx, strategy)
            g = generator_for(ctx.seed, ctx.round_idx, client_id, "client_mechanism")
            update = strategy.process_update(update, ctx, generator=g)
            if hooks is not None:
                hooks.end(client_id, ctx, update)
            yield update
