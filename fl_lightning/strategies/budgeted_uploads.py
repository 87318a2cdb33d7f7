"""Local DP placed on uploads, with a strict per-client budget: a component, not a strategy.

A :class:`BudgetedUploads` sits beside an aggregation algorithm the way Flower's client-side DP
wrappers and pfl's local mechanisms do: the algorithm (FedBuff, FedAsync, ADP-FL's Eq. 8, plain
FedAvg) never sees the noise, and the noise never sees the algorithm. It implements the
:class:`~fl_lightning.strategies.upload_privacy.UploadPrivacy` contract with a budget: a
strategy holds one as ``local_dp`` (``Strategy(local_dp=...)``, synchronous or asynchronous)
and its base hooks call it at four points of the round:

1. dispatch (``eligible``): a client uploads only while ε_acc + ε_i^t ≤ ε (the strict form of
   Wu et al. 2025, Alg. 1 line 2, decision D9); one that cannot afford its next upload leaves
   the federation for good;
2. ``charge``: each dispatched client's per-upload budget ε_i^t, from a
   :class:`BudgetSchedule` (the even split ε_i = N·ε/(n·E) of Eq. 10 by default; ADP-FL's
   Eq. 6 schedule in ``strategies/adp_fl.py``), goes into the per-client ledger;
3. ``privatize``: the client clips and noises its delta
   (``fl_lightning.privacy.mechanisms.local_budget``: Gaussian, Thm. 1, or Laplace, Def. 6; Δ = 2C)
   before it leaves the client;
4. ``round_privacy`` / ``metrics``: the round's local releases for the accountant (the ε basic
   composition can defend per upload, the paper's Thm. 2), and the tighter RDP/PLD composition
   of the same events per client with the maxima over clients (``strategy/eps_basic_max``,
   ``strategy/eps_tight_max``).

``sensitivity="record"`` calibrates the noise to Δ = 2C/|D_i| (the paper's record adjacency,
Def. 2, applied to the averaged update; see ``fl_lightning.privacy.mechanisms.local_budget``): the
run then claims no guarantee (``privacy/epsilon`` = ∞ with the reason) and logs the sound
client-level ε of the noise it added, basic composition per client, max over clients
(``strategy/epsilon_sound``).

A configuration whose per-upload budget exceeds the total ε for every round (e.g. Eq. 10 with
n·E < N: each client expects fewer than one upload, so N·ε/(n·E) > ε) is refused before
training: Alg. 1 line 2 and Alg. 2 line 10 never let a client spend more than ε, so no client
could ever upload, and the paper defines no other split.
"""

from __future__ import annotations

from typing import Any

import torch

from fl_lightning.privacy.accounting.events import RoundPrivacy
from fl_lightning.privacy.mechanisms.local_budget import (
    BudgetLedger,
    MechanismName,
    Sensitivity,
    TightAccountant,
    UploadMechanism,
)
from fl_lightning.records import ClientUpdate, Metrics, RoundContext
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.strategies.upload_privacy import UploadPrivacy

RECORD_READING = (
    "noise calibrated to the record-level sensitivity 2C/|D_i| (the paper's Def. 2 adjacency "
    "applied to the averaged update), which multi-step local SGD does not enforce (only the "
    "clip 2C is); the paper's per-client eps is strategy/eps_paper_max and the sound "
    "client-level eps of the same noise strategy/epsilon_sound"
)


class BudgetSchedule:
    """The per-upload budget ε_i^t: the even split of Wu et al. 2025, Eq. 10, ε_i = N·ε/(n·E)
    (ε spread over a client's expected n·E/N uploads), the same in every round.

    Subclasses (ADP-FL's Eq. 6 schedule) override :meth:`round_epsilon` and, for per-client
    adjustments such as an accuracy callback, :meth:`client_epsilon`. The uploads it budgets
    (total ε, horizon E, cohort rate n/N) attach themselves when they are built.
    """

    _uploads: BudgetedUploads

    def attach(self, uploads: BudgetedUploads) -> None:
        """Called by the uploads this schedule budgets; refuses (``ValueError`` naming the
        field) settings the schedule cannot honour."""
        self._uploads = uploads

    def setup(self, spec: FederationSpec) -> None:
        """Called once the uploads' horizon and rate are fixed, before any data moves."""

    def even_epsilon(self) -> float:
        """ε_i = N·ε/(n·E) (Eq. 10), or the fixed ``upload_epsilon``."""
        u = self._uploads
        if u.upload_epsilon is not None:
            return u.upload_epsilon
        assert u.epsilon is not None and u.rounds > 0 and u.rate > 0
        return u.epsilon / (u.rate * u.rounds)

    def round_epsilon(self, round_idx: int) -> float:
        """ε^t planned for 0-based ``round_idx`` (before per-client adjustments)."""
        return self.even_epsilon()

    def client_epsilon(self, client_id: int, ctx: RoundContext) -> float:
        """ε_i^t of client ``client_id`` dispatched this round (called once per dispatch)."""
        return self.round_epsilon(ctx.round_idx)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


class BudgetedUploads(UploadPrivacy):
    """Clip-and-noise on every upload at a per-upload budget, within a total per-client ε.

    Args:
        epsilon: total budget ε of each client (``None``: no budget; only with ``none``).
        upload_epsilon: per-upload budget; ``None``: the schedule's (Eq. 10 by default).
        mechanism: ``gaussian`` (δ = ``delta``), ``laplace`` or ``none``.
        clip_norm: C, the clip norm of the delta (L2 for Gaussian, L1 for Laplace); Δ = 2C.
        delta: δ of each Gaussian upload.
        accountant: ``rdp`` or ``pld`` for the tight per-client composition.
        rounds: E of Eq. 6 / Eq. 10 (the budget horizon); ``None``: ``trainer.max_steps``.
        sensitivity: ``client`` (Δ = 2C) or ``record`` (Δ = 2C/|D_i|, no guarantee claimed;
            module docstring).
        log_clients: also log each participating client's ε (``strategy/eps_basic/<id>``).
        schedule: the per-upload budget ε_i^t; ``None``: the even split (Eq. 10).
    """

    def __init__(
        self,
        *,
        epsilon: float | None = None,
        upload_epsilon: float | None = None,
        mechanism: MechanismName = "gaussian",
        clip_norm: float = 1.0,
        delta: float = 1e-5,
        accountant: TightAccountant = "rdp",
        rounds: int | None = None,
        sensitivity: Sensitivity = "client",
        log_clients: bool = True,
        schedule: BudgetSchedule | None = None,
    ) -> None:
        self.upload = UploadMechanism(
            mechanism=mechanism, clip_norm=clip_norm, delta=delta, sensitivity=sensitivity
        )
        if epsilon is not None and epsilon <= 0:
            raise ValueError(f"strategy.epsilon: must be > 0, got {epsilon}")
        if upload_epsilon is not None and upload_epsilon <= 0:
            raise ValueError(f"strategy.upload_epsilon: must be > 0, got {upload_epsilon}")
        if self.upload.private and epsilon is None and upload_epsilon is None:
            raise ValueError(
                "strategy.epsilon: a private mechanism needs the total budget ε (or upload_epsilon)"
            )
        if rounds is not None and rounds < 1:
            raise ValueError(f"strategy.rounds: must be >= 1, got {rounds}")
        self.epsilon = epsilon
        self.upload_epsilon = upload_epsilon
        self.horizon = rounds
        self.ledger = BudgetLedger(mechanism=self.upload, accountant=accountant)
        self.log_clients = log_clients
        self.schedule = schedule if schedule is not None else BudgetSchedule()
        self.schedule.attach(self)
        self.rounds = 0
        self.rate = 0.0
        self.exited: set[int] = set()
        self._planned: dict[int, float] = {}
        self._round_eps: dict[int, float] = {}
        self._tight: dict[int, float] = {}
        self._sound: dict[int, float] = {}
        self._sizes: tuple[int, ...] = ()

    @property
    def private(self) -> bool:
        return self.upload.private

    @property
    def record_reading(self) -> bool:
        """True when the noise is calibrated to Δ = 2C/|D_i| (no guarantee claimed; the sound
        ε of the same noise is logged instead)."""
        return self.upload.private and self.upload.sensitivity_kind == "record"

    @property
    def budgeted(self) -> bool:
        """True when uploads are charged to a ledger (a private mechanism or a total ε)."""
        return self.upload.private or self.epsilon is not None

    # -- set-up ------------------------------------------------------------------------------
    def setup(self, spec: FederationSpec) -> None:
        """Fixes the budget horizon E (``rounds``, else the run's rounds) and the cohort rate,
        and refuses a budget no client can spend (``check_affordable``)."""
        self.rounds, self.rate = int(self.horizon or spec.rounds), float(spec.sampling.rate)
        self._sizes = spec.client_sizes
        if self.record_reading and not self._sizes:
            raise ValueError(
                "strategy.sensitivity: record calibrates to 2C/|D_i| and needs the clients' "
                "sizes (FederationSpec.client_sizes)"
            )
        self.schedule.setup(spec)
        self.check_affordable()

    def ensure_horizon(self, ctx: RoundContext) -> None:
        """Fixes E and the rate from the round when ``setup`` never ran (unit tests that drive
        the hooks by hand)."""
        if not self.rounds:
            self.rounds = int(self.horizon or ctx.total_rounds)
            self.rate = float(ctx.sample_rate)

    @property
    def horizon_bound(self) -> str | None:
        """The budget schedule's dependence on the planned horizon E (``strategy.rounds``
        unset): a reason when a round's per-upload budget of a run of E rounds differs from
        that of a run of E + 1 rounds (Eq. 6's factor, Eq. 10's ε/(q·E)), else None."""
        if self.horizon is not None or not self.budgeted or not self.rounds:
            return None
        planned = self.planned_budgets()
        self.rounds += 1
        try:
            longer = self.planned_budgets()[: len(planned)]
        finally:
            self.rounds -= 1
        if longer == planned:
            return None
        return (
            f"the per-upload budgets are scheduled over E = {self.rounds} planned rounds, "
            "strategy.rounds unset"
        )

    def planned_budgets(self) -> list[float]:
        """The per-upload budget of a client dispatched in each round 0..E−1 (before
        per-client adjustments)."""
        return [self.schedule.round_epsilon(r) for r in range(self.rounds)]

    def check_affordable(self) -> None:
        """Refuses (before training) a budget no client can ever spend: every round's
        per-upload ε (as charged) above the total ε."""
        if self.epsilon is None or not self.upload.private or not self.rounds:
            return
        if self.upload_epsilon is None and self.rate <= 0:
            return
        charged = min(self.upload.charged_epsilon(epsilon=e) for e in self.planned_budgets())
        if charged <= self.epsilon * (1 + 1e-9):
            return
        if self.upload_epsilon is not None:
            raise ValueError(
                f"strategy.upload_epsilon: one upload at {self.upload_epsilon:g} (charged "
                f"{charged:.4g}) exceeds the total budget strategy.epsilon = {self.epsilon:g}, "
                "so no client could ever upload"
            )
        expected = self.rate * self.rounds
        raise ValueError(
            f"model.clients_per_round: the smallest per-upload budget (charged {charged:.4g}; "
            f"Eq. 10 N·ε/(n·E) = {self.schedule.even_epsilon():.4g} with n·E/N = "
            f"{expected:.3g} expected uploads a client in {self.rounds} rounds, times the "
            f"schedule) exceeds the total ε = {self.epsilon:g}, so no client could ever upload "
            "(Alg. 1 line 2); raise clients_per_round or trainer.max_steps (n·E ≥ N at the "
            "least), or set strategy.upload_epsilon"
        )

    # -- dispatch ----------------------------------------------------------------------------
    def upload_budget(self, client_id: int, ctx: RoundContext) -> float:
        """ε_i^t of a client dispatched in this round (1.0, a neutral weight, without a
        budget)."""
        return self.schedule.client_epsilon(client_id, ctx) if self.budgeted else 1.0

    def start_selection(self, ctx: RoundContext) -> None:
        """Forgets the previous round's planned budgets (a new cohort is being chosen)."""
        self.ensure_horizon(ctx)
        self._planned = {}

    def planned_budget(self, client_id: int, ctx: RoundContext) -> float:
        """ε_i^t of this round's dispatch, asked of the schedule once per client and round (the
        accuracy callback runs there); a client charged without having been selected (a cohort
        handed to ``charge`` directly, in tests) is planned then."""
        if client_id not in self._planned:
            self._planned[client_id] = self.upload_budget(client_id, ctx)
        return self._planned[client_id]

    def eligible(self, client_id: int, ctx: RoundContext) -> bool:
        """Alg. 1 line 2: whether the client can afford its next upload; one that cannot leaves
        the federation for good."""
        if client_id in self.exited:
            return False
        eps = self.planned_budget(client_id, ctx)
        if self.epsilon is not None and not self.ledger.can_afford(client_id, eps, self.epsilon):
            self.exited.add(client_id)
            return False
        return True

    def charge(self, ctx: RoundContext) -> None:
        """Charges every dispatched client its planned ε_i^t (Alg. 1 line 8) and, under the
        record reading, the sound client-level ε of the smaller noise its upload gets (on the
        server, from |D_i|: every process agrees, whichever trained the client)."""
        self.ensure_horizon(ctx)
        self._round_eps = {}
        for cid in ctx.cohort:
            eps = self._round_eps[cid] = self.planned_budget(cid, ctx)
            if self.budgeted:
                self.ledger.charge(cid, eps)
            if self.record_reading:
                size = self._sizes[cid] if cid < len(self._sizes) else None
                cost = self.upload.sound_epsilon(epsilon=eps, num_examples=size)
                self._sound[cid] = self._sound.get(cid, 0.0) + cost

    # -- on the client -----------------------------------------------------------------------
    def privatize(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        """Clips and noises the client's delta at its ε_i^t (Thm. 1 / Def. 6); the budget rides
        with the upload (``extras["epsilon"]``, ADP-FL's Eq. 8 weight)."""
        eps = self._round_eps.get(update.client_id)
        if eps is None and self.upload.private:
            raise RuntimeError(
                f"local_dp: client {update.client_id} uploads without a charged budget; a "
                "strategy that overrides configure_round must call super().configure_round"
            )
        update.delta, norm = self.upload.privatize(
            update.delta, epsilon=eps, generator=generator, num_examples=update.num_examples
        )
        update.extras["epsilon"] = eps if eps is not None else 1.0
        update.metrics["delta_norm"] = norm
        update.metrics["clipped"] = float(norm > self.upload.clip_norm)
        return update

    # -- on the server -----------------------------------------------------------------------
    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        """One local release per dispatched client at its charged ε_i^t."""
        if not self.upload.private:
            return RoundPrivacy()
        if self.record_reading:
            return RoundPrivacy(no_guarantee=RECORD_READING)
        return RoundPrivacy(
            local={
                cid: [self.upload.release(epsilon=self._round_eps[cid])]
                for cid in ctx.cohort
                if cid in self._round_eps
            }
        )

    def metrics(self, ctx: RoundContext) -> Metrics:
        """Exits, the round's mean ε_i^t and, when private, every client's ε to date (basic
        composition, tight composition, the paper's sum) with their maxima."""
        m: Metrics = {"clients_exited": float(len(self.exited))}
        if self._round_eps:
            m["upload_epsilon_mean"] = sum(self._round_eps.values()) / len(self._round_eps)
        if not self.upload.private:
            return m
        delta = self.upload.delta
        for cid in ctx.cohort:
            self._tight[cid] = self.ledger.tight(cid, delta=delta)
        # Each client's basic composition and paper sum, once (per client and for the maxima).
        basics = {c: self.ledger.basic(c) for c in self.ledger.spent}
        papers = {c: self.ledger.paper_spent(c) for c in self.ledger.spent}
        if self.log_clients:  # every client dispatched so far: its budget spent to date
            for cid in sorted(self._tight):
                m[f"eps_basic/{cid}"] = basics.get(cid, (0.0, 0.0))[0]
                m[f"eps_tight/{cid}"] = self._tight[cid]
                m[f"eps_paper/{cid}"] = papers.get(cid, 0.0)
        m["eps_paper_max"] = max(papers.values(), default=0)
        m["eps_basic_max"] = max((b[0] for b in basics.values()), default=0.0)
        m["delta_basic_max"] = max((b[1] for b in basics.values()), default=0.0)
        m["eps_tight_max"] = max(self._tight.values(), default=0.0)
        m["eps_tight_delta"] = delta
        if self.record_reading:
            m["epsilon_sound"] = max(self._sound.values(), default=0.0)
        return m

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "ledger": self.ledger.state_dict(),
            "exited": sorted(self.exited),
            "tight": dict(self._tight),
            "sound": dict(self._sound),
            "rounds": self.rounds,
            "rate": self.rate,
            "schedule": self.schedule.state_dict(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Also loads the flat layout of checkpoints written before the uploads were a
        component (the keys then sat beside the strategy's own)."""
        self.ledger.load_state_dict(state_dict["ledger"])
        self.exited = {int(c) for c in state_dict["exited"]}
        self._tight = {int(c): float(v) for c, v in state_dict["tight"].items()}
        self._sound = {int(c): float(v) for c, v in state_dict.get("sound", {}).items()}
        self.rounds = int(state_dict["rounds"])
        self.rate = float(state_dict["rate"])
        self.schedule.load_state_dict(state_dict.get("schedule", state_dict))


__all__ = ["RECORD_READING", "BudgetSchedule", "BudgetedUploads"]
