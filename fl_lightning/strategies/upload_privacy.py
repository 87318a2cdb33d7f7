"""The contract of ``Strategy.local_dp``: a privacy mechanism placed on every upload.

An :class:`UploadPrivacy` sits beside an aggregation algorithm the way Flower's client-side DP
wrappers and pfl's local mechanisms do: the algorithm (FedAvg, FedBuff, FedAsync, ADP-FL's
Eq. 8, DP-FedProx) never sees the noise, and the noise never sees the algorithm. The base
:class:`~fl_lightning.strategies.base.Strategy` calls it at these points of a round, and at no
other:

* ``setup(spec)``: once, from ``Strategy.setup_federation``;
* ``start_selection(ctx)`` and ``eligible(client_id, ctx)``: from ``Strategy.select_clients``
  (and the asynchronous loop's refill), which clients may upload;
* ``charge(ctx)``: from ``Strategy.configure_round``, the dispatched clients' cost;
* ``privatize(update, ctx, generator=)``: from ``Strategy.process_update``, on the client;
* ``round_privacy(ctx)``: from ``Strategy.round_privacy``, the round's events for the
  accountant (also before training, for the budget stop);
* ``metrics(ctx)``: from ``Strategy.after_round``, logged as ``strategy/<key>``;
* ``guarantee_note()``: from ``Strategy.on_fit_start``, logged as ``strategy/guarantee``;
* ``state_dict`` / ``load_state_dict``: inside the strategy's checkpoint (``"local_dp"``);

and ``private`` answers ``Strategy.traits.private``. The three budget hooks (``start_selection``,
``eligible``, ``charge``) are for a mechanism that keeps a per-client budget
(:class:`~fl_lightning.strategies.budgeted_uploads.BudgetedUploads`, Wu et al. 2025, Alg. 1);
an unbudgeted one keeps the defaults, so every sampled client is dispatched.

Mechanisms implementing it: ``BudgetedUploads`` (clip and Gaussian/Laplace noise within a
per-client ε), ``per_coordinate_ldp.py: PerCoordinateLDP`` (SPM-FL's per-coordinate ε-LDP
mechanisms on the model or update), ``clipped_upload_noise.py: ClippedUploadNoise`` (the
DP-FedASGP paper's DP-FedAvg baseline: clip, then Laplace or Gaussian on every coordinate) and
``high_impact_noise.py: HighImpactNoise`` (the DP-FedSNLC approximation). A strategy holds one
as ``local_dp`` (``strategy.init_args.local_dp`` in a config, with its ``class_path``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from fl_lightning.privacy.accounting.events import RoundPrivacy
from fl_lightning.records import ClientUpdate, Metrics, RoundContext
from fl_lightning.strategies.spec import FederationSpec


class UploadPrivacy(ABC):
    """A mechanism on every client upload (``Strategy.local_dp``); the module docstring lists
    which ``Strategy`` hook calls which method."""

    # -- set-up ------------------------------------------------------------------------------
    def setup(self, spec: FederationSpec) -> None:  # noqa: B027 (optional hook)
        """Once, before any data moves: checks settings against the federation (``ValueError``
        naming the field) and keeps what it needs (d, the layers, the horizon)."""

    @property
    @abstractmethod
    def private(self) -> bool:
        """True when the uploads are privatised (False: e.g. a NoDP baseline's ``none``)."""

    def guarantee_note(self) -> str | None:
        """A one-line statement of what the mechanism guarantees, logged once at the start of
        fit (``strategy/guarantee``); None: nothing to add to the accountant's headline."""
        return None

    # -- dispatch (budgeted mechanisms) ------------------------------------------------------
    def start_selection(self, ctx: RoundContext) -> None:  # noqa: B027 (optional hook)
        """A new cohort is being chosen for ``ctx.round_idx``."""

    def eligible(self, client_id: int, ctx: RoundContext) -> bool:
        """Whether the client can afford its next upload. Default: always."""
        return True

    def charge(self, ctx: RoundContext) -> None:  # noqa: B027 (optional hook)
        """Charges the dispatched clients (``ctx.cohort``) the upload they are about to make."""

    # -- on the client -----------------------------------------------------------------------
    @abstractmethod
    def privatize(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        """The upload as it leaves the client (``update.delta`` replaced; ``ctx.global_params``
        is the model the client started from), noise drawn from the client's ``generator``."""

    # -- on the server -----------------------------------------------------------------------
    @abstractmethod
    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        """What the round's uploads spend (one ``LocalRelease`` list per dispatched client, or
        ``no_guarantee`` with the reason). Called before training too (the budget stop), so it
        depends on the round's context and the mechanism's settings, not on the uploads."""

    def metrics(self, ctx: RoundContext) -> Metrics:
        """What the mechanism observed this round, logged as ``strategy/<key>``."""
        return {}

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:  # noqa: B027 (optional hook)
        """Loads ``state_dict()``; also the keys of a checkpoint written before the mechanism
        was a component, which sat flat beside the strategy's own."""


__all__ = ["UploadPrivacy"]
