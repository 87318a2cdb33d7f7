"""The aggregation-strategy interface.

A strategy is a Lightning ``Callback`` (so its state is checkpointed with the run) that owns
everything algorithm-specific about a round (DESIGN.md, "Interfaces"):

* ``setup_federation``: once, before any data moves, with the federation's frozen
  :class:`~fl_lightning.strategies.spec.FederationSpec` (validation and derived settings, σ
  calibrated to the privacy target; a strategy never reads the Lightning module).
* ``select_clients``: which of the sampled clients are dispatched (async: busy ones are not).
* ``configure_round``: the round's typed plan (``records.py: RoundPlan``): the cohort and the
  overrides of the clients' local loop (schedules, FedProx's μ, a decayed σ, ...).
* ``configure_client``: one client's plan (start weights, optimizer state, gradient hook).
* ``process_update``: client-side post-processing of an update (clipping, local mechanisms).
* ``deliver``: what of the processed upload crosses to the server (under SecAgg the masked
  vector of a survivor only); ``server_view`` declares what the server side receives
  (``privacy/guarantee/server_view.py``), and a contract test checks every round against it.
* ``aggregate``: server-side combination into the global delta (central noise included).
* ``round_privacy``: what the round spent, for the accountant.
* ``after_round``: bookkeeping once the global model moved.

Hooks that observe something return it with their value, as pfl's postprocessors do:
``aggregate`` and ``finalize`` return ``(delta, metrics)`` and ``after_round`` returns its
metrics; the server logs them as ``strategy/<key>`` for that round only. A strategy keeps no
metrics attribute, so nothing is overridden just to log and no value outlives its round.

DP placed on the aggregate or on uploads is a component, not a subclass (Flower's server- and
client-side DP wrappers):

* ``central_dp`` (a :class:`~fl_lightning.strategies.placement.CentralPrivacy`: the fixed-clip
  :class:`~fl_lightning.strategies.central_dp.CentralGaussian`, McMahan et al. 2018, or
  :class:`~fl_lightning.strategies.adaptive_clipping.AdaptiveClipping`, Andrew et al. 2021): the
  default ``process_update`` clips each upload, ``partial_aggregate`` sums the clipped deltas
  and ``finalize`` releases their noisy mean. ``DPFedAvg`` is FedAvg holding a CentralGaussian.
* ``local_dp`` (an :class:`~fl_lightning.strategies.upload_privacy.UploadPrivacy`, the
  contract of every mechanism placed on uploads): ``process_update`` privatises each upload on
  the client; a budgeted mechanism
  (:class:`~fl_lightning.strategies.budgeted_uploads.BudgetedUploads`, Wu et al. 2025) also
  has ``select_clients`` dispatch only clients that can afford their next upload and
  ``configure_round`` charge their budgets. The ADP-FL baseline and FedBuff/FedAsync with "the
  same noise" hold a ``BudgetedUploads``; SPM-FL's ``LDPFedAvg`` a
  :class:`~fl_lightning.strategies.per_coordinate_ldp.PerCoordinateLDP`; the DP-FedASGP
  paper's ``DPFedAvgLocal`` and ``DPFedSNLC`` a
  :class:`~fl_lightning.strategies.clipped_upload_noise.ClippedUploadNoise` and a
  :class:`~fl_lightning.strategies.high_impact_noise.HighImpactNoise`.

``round_privacy``, ``traits`` and ``after_round``'s metrics
follow from the two (the server logs ``local_dp``'s guarantee note at the start of fit); a
subclass that overrides one of those hooks calls ``super()`` to keep them.

The default path is FedAvg: the weighted mean of the clients' deltas. Aggregation is split in
two so that a round can be sharded over processes (docs/distributed.md):

* ``partial_aggregate(updates, ctx)``: this process's clients summed into one flat buffer
  (FedAvg: the weighted delta sum followed by the total weight; a strategy that overrides both
  halves chooses its own layout, e.g. DP-FedAvg's plain sum);
* ``finalize(reduced, ctx, generator=)``: the global delta from the buffer summed over all
  processes (central noise from the generator every rank shares).

``aggregate`` is ``finalize(partial_aggregate(...))``, so a single process behaves exactly as
before. How a strategy consumes the round's updates is declared, not inferred, in
:attr:`Strategy.reduction`: ``"sum"`` (the split above: one all-reduce under DDP),
``"stream"`` (``aggregate`` reads the updates once, in client order) or ``"gather"``
(``aggregate`` needs them all at once, e.g. a projection between clients). Under several
processes ``"stream"`` and ``"gather"`` gather every update to every rank. A class that
overrides ``aggregate`` but declares ``"sum"`` is refused when it is defined; one that declares
nothing gets ``"gather"``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from lightning.pytorch.callbacks import Callback

from fl_lightning.privacy.accounting.events import RoundPrivacy
from fl_lightning.privacy.guarantee.server_view import ServerView
from fl_lightning.records import ClientPlan, ClientUpdate, Metrics, RoundContext, RoundPlan
from fl_lightning.strategies.placement import CentralPrivacy
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.strategies.upload_privacy import UploadPrivacy

Weighting = Literal["num_examples", "uniform"]
Reduction = Literal["sum", "stream", "gather"]


@dataclass(frozen=True)
class StrategyTraits:
    """What the server must know about a strategy before round 0 (``Strategy.traits``).

    Args:
        private: the strategy privatises what clients upload or what the server releases
            (the accountant then reports a guarantee; a run that has released nothing yet says
            "no release yet", not "not private").
        amplified_by_sampling: its client-level noise is amplified by cohort sampling
            (``central_dp``, FedSMP): ``model.sampling: auto`` then draws Poisson cohorts, whose
            accounting is tight.
        distributed_problem: why it cannot run with its clients spread over processes (None:
            it can). A strategy that keeps per-client state syncs it by keeping it in
            ``Strategy.client_states``; the server refuses a sharded run with a problem here on
            every rank before any collective.
        adaptive_noise: what chooses its noise from released outputs (None: its σ is fixed
            before training). Composing such steps needs a fully adaptive composition theorem:
            the server then refuses accountants without one (only RDP has it, as a Rényi filter
            per order, Feldman & Zrnic 2021) and the guarantee says so (docs/privacy.md).
        horizon_bound: what of its accounting is fixed for the planned rounds
            (``FederationSpec.rounds``), in a clause of the refusal to resume past them
            (``privacy/accounting/horizon.py``: DP-FTRL's whole-run event, a budget scheduled over E
            rounds, σ fixed from T); None when every round is priced on its own, so the run may
            be resumed with a larger ``trainer.max_steps``.
    """

    private: bool = False
    amplified_by_sampling: bool = False
    distributed_problem: str | None = None
    adaptive_noise: str | None = None
    horizon_bound: str | None = None


def client_weight(update: ClientUpdate, weighting: Weighting) -> float:
    """FedAvg's weight of one update: n_i (``"num_examples"``, McMahan et al. 2017) or 1."""
    return float(update.num_examples) if weighting == "num_examples" else 1.0


def unsynced_state_problem(strategy: Strategy) -> str:
    """The reason a strategy that keeps per-client optimizer state without syncing it cannot be
    sharded over processes (``StrategyTraits.distributed_problem``, the executor's guard)."""
    return (
        f"{type(strategy).__name__} keeps per-client optimizer state on the process that "
        "trained the client and does not sync it (Strategy.client_states), so it cannot be "
        "sharded over processes; run one process"
    )


class Strategy(Callback):
    """Base class: FedAvg behaviour with every hook overridable.

    Args:
        weighting: ``"num_examples"`` weights client i by n_i (McMahan et al. 2017),
            ``"uniform"`` weights every client equally (ignored with ``central_dp``, whose sum
            is unweighted).
        local_dp: a mechanism on every upload (``UploadPrivacy``: ``BudgetedUploads``, local DP
            within a per-client budget, ``PerCoordinateLDP``, ``ClippedUploadNoise``, ...);
            ``None``: uploads as trained.
        central_dp: client-level DP on the aggregate (clip, sum, Gaussian noise, divide by the
            expected cohort size); ``None``: none.
    """

    reduction: ClassVar[Reduction] = "sum"
    """How ``aggregate`` consumes the round's updates (the module's contract with it):

    * ``"sum"``: through ``partial_aggregate`` / ``finalize`` only, so that the processes of a
      DDP run sum their partial buffers with one all-reduce;
    * ``"stream"``: ``aggregate`` reads the updates once, in client order (a single process
      streams them without holding the cohort; DDP gathers them to every rank);
    * ``"gather"``: ``aggregate`` needs every update at once (it gets a list).
    """

    def __init__(
        self,
        *,
        weighting: Weighting = "num_examples",
        local_dp: UploadPrivacy | None = None,
        central_dp: CentralPrivacy | None = None,
    ) -> None:
        super().__init__()
        if weighting not in ("num_examples", "uniform"):
            raise ValueError(f"weighting: expected 'num_examples' or 'uniform', got {weighting!r}")
        self.weighting = weighting
        self.local_dp = local_dp
        self.central_dp = central_dp
        self.num_clients = 0
        self.num_parameters = 0
        self.seed = 0
        self.client_states: dict[int, Any] | None = None
        """Per-client state that client-side hooks keep for a later round of the same client
        (SCAFFOLD's c_i, per-client Adam state), keyed by client id; None when there is none.
        Under DDP the client may train on another process next time, so after every round the
        server copies the entries of the clients each process trained to every other process
        (inside the round's existing gather). A strategy that keeps such state elsewhere
        cannot be sharded (``StrategyTraits.distributed_problem``)."""

    # -- lifecycle ---------------------------------------------------------------------------
    def setup_federation(self, spec: FederationSpec) -> None:
        """Called once by the server before the first round and before any data moves: checks
        the strategy's settings against the federation (``ValueError`` naming the field) and
        derives what it needs, an unset noise multiplier included (calibrated to
        ``spec.privacy``, the run's target, over ``spec.rounds``). Overrides call
        ``super().setup_federation(spec)``."""
        self.num_clients = spec.num_clients
        self.num_parameters = spec.num_parameters
        self.seed = spec.seed
        if self.local_dp is not None:
            self.local_dp.setup(spec)
        if self.central_dp is not None:
            self.central_dp.setup(spec)

    @property
    def traits(self) -> StrategyTraits:
        """What the server reads from the strategy before round 0: private when ``local_dp``
        privatises uploads or ``central_dp`` the release; amplified by sampling with
        ``central_dp``; shardable; bound to the planned rounds when the upload or central
        mechanism says so (its ``horizon_bound`` attribute, when it has one). A subclass
        overrides it with ``dataclasses.replace(super().traits, ...)``."""
        local = self.local_dp is not None and self.local_dp.private
        central = self.central_dp is not None
        bounds = [getattr(part, "horizon_bound", None) for part in (self.local_dp, self.central_dp)]
        return StrategyTraits(
            private=local or central,
            amplified_by_sampling=central,
            horizon_bound=next((str(b) for b in bounds if b), None),
        )

    @property
    def server_view(self) -> ServerView:
        """What the server-side objects receive from the clients
        (``privacy/guarantee/server_view.py``),
        declared in this one place: the statement names it as the server's view and the
        contract test (``fl_lightning/testing/server_view.py``) checks every round against it.
        ``central_dp``'s view (clipped updates; secure sums under SecAgg), else noised uploads
        when ``local_dp`` privatises them, else the updates as trained. A strategy that
        privatises uploads in its own ``process_update`` overrides it."""
        if self.central_dp is not None:
            return self.central_dp.server_view
        if self.local_dp is not None and self.local_dp.private:
            return ServerView("noised uploads")
        return ServerView("updates")

    # -- client side -------------------------------------------------------------------------
    def select_clients(self, ctx: RoundContext) -> list[int]:
        """The clients dispatched this round, given the sampled ``ctx.cohort``. Default: all.

        Asynchronous strategies drop clients still busy with an earlier round (and may top the
        cohort up); with ``local_dp``, clients that cannot afford their next upload leave.
        """
        if self.local_dp is None:
            return list(ctx.cohort)
        self.local_dp.start_selection(ctx)
        return [c for c in ctx.cohort if self.local_dp.eligible(c, ctx)]

    def configure_round(self, ctx: RoundContext) -> RoundPlan:
        """The round's plan (``records.py: RoundPlan``): the dispatched cohort (``ctx.cohort``,
        what ``select_clients`` kept) and typed overrides of the clients' local loop
        (``LocalOverrides``: round-wide in ``local``, a client's own in ``per_client``); charges
        the dispatched clients' upload budgets (``local_dp``). Default: the cohort, no
        overrides. An override calls ``super()`` and adds to its plan
        (``plan.with_local(prox_mu=0.1)``); returning a mapping of overrides is the short form
        (``server/round.py: as_round_plan``)."""
        if self.local_dp is not None:
            self.local_dp.charge(ctx)
        return RoundPlan(tuple(ctx.cohort))

    def configure_client(self, client_id: int, ctx: RoundContext) -> ClientPlan:
        """The plan of client ``client_id``'s local training this round (``records.py:
        ClientPlan``): the weights it starts from, optimizer state to resume, a gradient hook
        after each backward pass and where the optimizer state goes afterwards. The local loop
        runs it without seeing the strategy. Default: start from the global model, a fresh
        optimizer, no hook (SCAFFOLD adds a gradient hook, Isolate starts each client from its
        own model, DPFL-AGN resumes a client's Adam state)."""
        return ClientPlan(start_params=ctx.global_params)

    def process_update(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        """Client-side processing before upload (clip, privatise). Default: privatised by
        ``local_dp`` (e.g. clipped and noised at the client's budget), clipped to C with
        ``central_dp``."""
        if self.local_dp is not None:
            update = self.local_dp.privatize(update, ctx, generator=generator)
        if self.central_dp is None:
            return update
        return self.central_dp.on_client(update, ctx, generator=generator)

    def deliver(self, update: ClientUpdate, ctx: RoundContext) -> ClientUpdate | None:
        """What of the processed upload crosses to the server (``server/round.py: processed``,
        after the client's ``process_update`` and ``on_client_end``): the whole upload, or
        ``central_dp``'s delivery (under SecAgg: the masked vector only, and nothing of a
        client that dropped, None). Everything the server side receives passes here."""
        if self.central_dp is None:
            return update
        return self.central_dp.deliver(update, ctx)

    # -- server side -------------------------------------------------------------------------
    def aggregate(
        self, updates: Iterable[ClientUpdate], ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        """The global delta (added to the global weights by the server optimizer) and what the
        aggregation observed this round."""
        return self.finalize(self.partial_aggregate(updates, ctx), ctx, generator=generator)

    def partial_aggregate(self, updates: Iterable[ClientUpdate], ctx: RoundContext) -> torch.Tensor:
        """This process's share: [Σ w_i Δ_i, Σ w_i] (summed over processes by one all-reduce);
        with ``central_dp`` the plain sum of clipped deltas Σ Δ_k (Alg. 1: finalize divides by
        qN, not by a data-dependent weight)."""
        if self.central_dp is not None:
            return self.central_dp.partial(updates, ctx)
        d = ctx.global_params.numel()
        buf = torch.zeros(d + 1, device=ctx.global_params.device)
        total = buf[:d]
        for update in updates:
            w = client_weight(update, self.weighting)
            total.add_(update.delta, alpha=w)
            buf[d] += w
        return buf

    def finalize(
        self, reduced: torch.Tensor, ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        """The global delta from the all-process sum of ``partial_aggregate``, Σ w_i Δ_i / Σ w_i
        ((Σ Δ_k + N(0, σ²C²)) / qN with ``central_dp``), and what it observed (nothing)."""
        if self.central_dp is not None:
            return self.central_dp.release(reduced, ctx, generator=generator)
        d = ctx.global_params.numel()
        total_weight = float(reduced[d])
        if total_weight == 0.0:
            return torch.zeros_like(ctx.global_params), {}
        return reduced[:d].div(total_weight), {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Keeps ``reduction`` true to ``aggregate``: the all-reduce path calls only
        ``partial_aggregate`` / ``finalize``, so a class that overrides ``aggregate`` below them
        cannot be ``"sum"``. Declaring ``"sum"`` there is refused; a class that does not declare
        a reduction (e.g. a user's robust aggregator) gets ``"gather"``, which is always
        correct."""
        super().__init_subclass__(**kwargs)
        if cls.reduction not in ("sum", "stream", "gather"):
            raise TypeError(f"{cls.__name__}.reduction: {cls.reduction!r} is not one of "
                            "'sum', 'stream', 'gather'")  # fmt: skip
        if cls.reduction != "sum":
            return

        def owner(name: str) -> type:
            return next(k for k in cls.__mro__ if name in vars(k))

        agg = owner("aggregate")
        if all(issubclass(owner(n), agg) for n in ("partial_aggregate", "finalize")):
            return
        if "reduction" in vars(cls):
            raise TypeError(
                f"{cls.__name__} overrides aggregate but declares reduction = 'sum', under "
                "which DDP calls only partial_aggregate/finalize: move the logic there, or "
                "declare reduction = 'stream' (reads the updates once) or 'gather'"
            )
        cls.reduction = "gather"

    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        """Client-level and local-DP spending of this round (record-level comes from clients):
        ``local_dp``'s releases and ``central_dp``'s subsampled Gaussian, else nothing."""
        spent = RoundPrivacy() if self.local_dp is None else self.local_dp.round_privacy(ctx)
        if self.central_dp is not None:
            central = self.central_dp.round_privacy(ctx)
            spent.client_level.extend(central.client_level)
            spent.distributed.extend(central.distributed)
        return spent

    def after_round(self, ctx: RoundContext, aggregate: torch.Tensor) -> Metrics:
        """Called once the global model moved; returns what it observed this round (what
        ``local_dp`` observed, e.g. the uploads' budgets)."""
        return {} if self.local_dp is None else self.local_dp.metrics(ctx)

    def evaluation_models(self) -> list[torch.Tensor] | None:
        """Flat weight vectors whose test metrics are averaged in place of the global model's
        (e.g. Isolate's per-client models). Default None: evaluate the global model."""
        return None

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        if self.local_dp is not None:
            state["local_dp"] = self.local_dp.state_dict()
        if self.central_dp is not None:
            state["central_dp"] = self.central_dp.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Also loads checkpoints written before the components (their keys flat beside the
        strategy's own: AsyncLocalDP/ADP-FL's uploads, LDPFedAvg's report counts, DPFedAvg's
        σ)."""
        if self.local_dp is not None:
            self.local_dp.load_state_dict(state_dict.get("local_dp", state_dict))
        if self.central_dp is not None:
            self.central_dp.load_state_dict(state_dict.get("central_dp", state_dict))
