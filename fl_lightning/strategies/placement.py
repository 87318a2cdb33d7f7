"""Where the server applies a mechanism: the placement protocols.

A mechanism says what it does to its input (constrain, add noise, record its event); a placement
says *where* the server calls it. Today one placement is a protocol of its own:

* :class:`CentralPrivacy`, on the aggregate of a summing strategy (``Strategy(central_dp=...)``,
  McMahan et al. 2018, Alg. 1; Flower's server-side DP wrappers). Per client, on the client's
  side, ``clip`` constrains the upload; per process, ``partial`` sums this process's clipped
  uploads into one buffer (one all-reduce under DDP); once a round, on every process with the
  generator every rank shares, ``release`` adds the noise to the all-process sum and returns the
  global delta. ``round_privacy`` is the event of that release, known before any client trains
  (the budget stop prices the round with it).

  Implementations: :class:`~fl_lightning.strategies.central_dp.CentralGaussian` (fixed clip),
  :class:`~fl_lightning.strategies.adaptive_clipping.AdaptiveClipping` (Andrew et al. 2021) and
  :class:`~fl_lightning.strategies.distributed_dp.SecAggDistributedDP` (distributed discrete
  noise behind secure aggregation: ``on_client`` encodes, noises and masks each upload, the
  server only ever sums masked vectors; Kairouz et al. 2021, Agarwal et al. 2021).

On uploads the placement is ``strategies/upload_privacy.py: UploadPrivacy``; on each example's
gradient it is the DP-SGD engine (``client/dp_sgd.py``, Opacus's optimizer-reports-the-step).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any, Protocol

import torch

from fl_lightning.privacy.accounting.events import CohortSampling, RoundPrivacy
from fl_lightning.privacy.guarantee.server_view import ServerView
from fl_lightning.records import ClientUpdate, Metrics, RoundContext


class CohortSpec(Protocol):
    """What a central mechanism reads from the federation at set-up
    (``strategies/spec.py: FederationSpec`` is one)."""

    @property
    def num_clients(self) -> int: ...

    @property
    def sampling(self) -> CohortSampling: ...

    def cohort_noise_multiplier(
        self, sigma: float | None, *, target_epsilon: float | None = None
    ) -> float: ...


class CentralPrivacy(abc.ABC):
    """Client-level DP placed on the aggregate of a summing strategy.

    Attributes:
        noise_multiplier: σ of the round's one client-level Gaussian (``None`` until ``setup``
            calibrates it to the run's target).
        clip_norm: the L2 bound C the round's updates are clipped to (adaptive clipping: the
            current one); the noise's standard deviation is σ·C.
    """

    noise_multiplier: float | None
    clip_norm: float

    @abc.abstractmethod
    def setup(self, spec: CohortSpec) -> None:
        """Once, before round 0: fixes an unset σ from the run's target and checks settings
        (``ValueError`` naming the field)."""

    @abc.abstractmethod
    def clip(self, update: ClientUpdate) -> ClientUpdate:
        """Client side: bounds the upload's contribution (in place) and records its norm in
        ``update.metrics``."""

    def on_client(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        """Client side, the whole upload path (``Strategy.process_update`` calls it with the
        client's keyed generator): :meth:`clip` here; a mechanism whose clients add noise or
        encode their upload (``strategies/distributed_dp.py``) overrides it."""
        return self.clip(update)

    def deliver(self, update: ClientUpdate, ctx: RoundContext) -> ClientUpdate | None:
        """What of the client's processed upload reaches the server (``server/round.py:
        processed``): all of it here; a mechanism whose uploads travel inside a secure sum
        (``strategies/distributed_dp.py``) keeps per-client values on the client and delivers
        nothing of a client that dropped (None)."""
        return update

    @property
    def server_view(self) -> ServerView:
        """What the server receives (``privacy/guarantee/server_view.py``): each update clipped to
        C."""
        return ServerView("clipped updates", clip_norm=float(self.clip_norm))

    def partial(self, updates: Iterable[ClientUpdate], ctx: RoundContext) -> torch.Tensor:
        """This process's buffer, summed over processes by one all-reduce: Σ Δ_k of the
        clipped deltas (a mechanism that also releases a statistic of the cohort appends it)."""
        total = torch.zeros_like(ctx.global_params)
        for update in updates:
            total.add_(update.delta)
        return total

    @abc.abstractmethod
    def release(
        self, reduced: torch.Tensor, ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        """The global delta from the all-process sum of ``partial`` (noise drawn from
        ``generator``, the same on every process), and what the release observed."""

    @abc.abstractmethod
    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        """The client-level event of this round's release, sampled as the cohort sampler did."""

    def state_dict(self) -> dict[str, Any]:
        return {"noise_multiplier": self.noise_multiplier}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.noise_multiplier = state_dict["noise_multiplier"]


__all__ = ["CentralPrivacy", "CohortSpec"]
