"""Asynchronous FL with local DP on every upload and a strict per-client budget.

The common machinery of ADP-FL (Wu et al. 2025) and of its baselines ("even budget" FedAvg,
FedBuff and FedAsync with the same noise): each dispatched client gets a per-upload budget
ε_i^t (``upload_budget``; here the paper's even split ε_i = N·ε/(n·E), Eq. 10), participates
only while ε_acc + ε_i^t ≤ ε (strict form of Alg. 1 line 2, decision D9; a client that cannot
afford its next upload leaves the federation for good), clips and noises its delta on the
client (``fl_lightning.privacy.local_budget``) and uploads it through the simulated clock of
:class:`~fl_lightning.strategies.asynchronous.base.AsyncStrategy`.

Accounting: the accountant receives, per upload, the ε basic composition can defend
(``RoundPrivacy.local_epsilon`` / ``local_delta``, the paper's Thm. 2); ``after_round`` also
returns the tighter RDP/PLD composition of the same events per participating client and the max
over clients of both (``strategy/eps_basic_max``, ``strategy/eps_tight_max``).

``sensitivity="record"`` calibrates the noise to Δ = 2C/|D_i| (the paper's record adjacency,
Def. 2, applied to the averaged update; see ``fl_lightning.privacy.local_budget``): the run then
claims no guarantee (``privacy/epsilon`` = ∞ with the reason) and logs the sound client-level ε
of the noise it added, basic composition per client, max over clients
(``strategy/epsilon_sound``).

A configuration whose per-upload budget exceeds the total ε for every round (e.g. Eq. 10 with
n·E < N: each client expects fewer than one upload, so N·ε/(n·E) > ε) is refused before
training: Alg. 1 line 2 and Alg. 2 line 10 never let a client spend more than ε, so no client
could ever upload, and the paper defines no other split.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import torch

from fl_lightning.privacy.events import RoundPrivacy
from fl_lightning.privacy.local_budget import (
    BudgetLedger,
    MechanismName,
    Sensitivity,
    TightAccountant,
    UploadMechanism,
)
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.asynchronous.base import AsyncStrategy
from fl_lightning.strategies.base import Metrics
from fl_lightning.strategies.spec import FederationSpec

RECORD_READING = (
    "noise calibrated to the record-level sensitivity 2C/|D_i| (the paper's Def. 2 adjacency "
    "applied to the averaged update), which multi-step local SGD does not enforce (only the "
    "clip 2C is); the paper's per-client eps is strategy/eps_paper_max and the sound "
    "client-level eps of the same noise strategy/epsilon_sound"
)


class AsyncLocalDP(AsyncStrategy):
    """Async FedAvg with local DP uploads at an even per-upload budget (the paper's baseline).

    Args:
        epsilon: total budget ε of each client (``None``: no budget; only with ``none``).
        upload_epsilon: per-upload budget; ``None``: N·ε/(n·E) (Eq. 10) with n/N the cohort rate
            and E = ``trainer.max_steps``.
        mechanism: ``gaussian`` (δ = ``delta``), ``laplace`` or ``none``.
        clip_norm: C, the clip norm of the delta (L2 for Gaussian, L1 for Laplace); Δ = 2C.
        delta: δ of each Gaussian upload.
        accountant: ``rdp`` or ``pld`` for the tight per-client composition.
        rounds: E of Eq. 6 / Eq. 10 (the budget horizon); ``None``: ``trainer.max_steps``.
        sensitivity: ``client`` (Δ = 2C) or ``record`` (Δ = 2C/|D_i|, no guarantee claimed;
            module docstring).
        log_clients: also log each participating client's ε (``strategy/eps_basic/<id>``).
        **kwargs: the clock and delay model of :class:`AsyncStrategy` (and ``weighting``).
    """

    def __init__(
        self,
        *,
        epsilon: float | None = None,
        upload_epsilon: float | None = None,
        mechanism: MechanismName = "none",
        clip_norm: float = 1.0,
        delta: float = 1e-5,
        accountant: TightAccountant = "rdp",
        rounds: int | None = None,
        sensitivity: Sensitivity = "client",
        log_clients: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
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
        self.horizon = rounds
        self.upload_epsilon = upload_epsilon
        self.ledger = BudgetLedger(mechanism=self.upload, accountant=accountant)
        self.log_clients = log_clients
        self.rounds = 0
        self.rate = 0.0
        self.exited: set[int] = set()
        self._planned: dict[int, float] = {}
        self._round_eps: dict[int, float] = {}
        self._tight: dict[int, float] = {}
        self._sound: dict[int, float] = {}
        self._mark = 0.0
        self.client_time_total = 0.0

    # -- budget ------------------------------------------------------------------------------
    def setup_federation(self, spec: FederationSpec) -> None:
        """Fixes the budget horizon E (``strategy.rounds``, else the run's rounds) and the
        cohort rate, and refuses a budget no client can spend (``check_affordable``)."""
        super().setup_federation(spec)
        self.rounds, self.rate = int(self.horizon or spec.rounds), float(spec.sampling.rate)
        self.check_affordable()

    def planned_budgets(self) -> list[float]:
        """The per-upload budget of a client dispatched in each round 0..E−1 (before the
        accuracy callback); the even split is the same every round."""
        return [self.even_budget()] * self.rounds

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
            f"Eq. 10 N·ε/(n·E) = {self.even_budget():.4g} with n·E/N = {expected:.3g} expected "
            f"uploads a client in {self.rounds} rounds, times the schedule) exceeds the total "
            f"ε = {self.epsilon:g}, so no client could ever upload (Alg. 1 line 2); raise "
            "clients_per_round or trainer.max_steps (n·E ≥ N at the least), or set "
            "strategy.upload_epsilon"
        )

    def _ensure_horizon(self, ctx: RoundContext) -> None:
        if not self.rounds:
            self.rounds = int(self.horizon or ctx.total_rounds)
            self.rate = float(ctx.sample_rate)

    def even_budget(self) -> float:
        """ε_i = N·ε/(n·E) (Eq. 10): ε spread over a client's expected n·E/N uploads."""
        if self.upload_epsilon is not None:
            return self.upload_epsilon
        assert self.epsilon is not None and self.rounds > 0 and self.rate > 0
        return self.epsilon / (self.rate * self.rounds)

    def upload_budget(self, client_id: int, ctx: RoundContext) -> float:
        """ε_i^t of a client dispatched in this round (called once per dispatch)."""
        return self.even_budget() if (self.upload.private or self.epsilon) else 1.0

    def client_eligible(self, client_id: int, ctx: RoundContext) -> bool:
        if client_id in self.exited:
            return False
        if client_id not in self._planned:
            self._planned[client_id] = self.upload_budget(client_id, ctx)
        eps = self._planned[client_id]
        if self.epsilon is not None and not self.ledger.can_afford(client_id, eps, self.epsilon):
            self.exited.add(client_id)
            return False
        return True

    def select_clients(self, ctx: RoundContext) -> list[int]:
        self._ensure_horizon(ctx)
        self._planned = {}
        return super().select_clients(ctx)

    def configure_round(self, ctx: RoundContext) -> dict[str, Any]:
        self._round_eps = {}
        for cid in ctx.cohort:
            if cid not in self._planned:  # a cohort not chosen by select_clients (tests)
                self._planned[cid] = self.upload_budget(cid, ctx)
            eps = self._planned[cid]
            self._round_eps[cid] = eps
            if self.upload.private or self.epsilon is not None:
                self.ledger.charge(cid, eps)
        self._mark = time.perf_counter()
        return {}

    # -- client side -------------------------------------------------------------------------
    def process_update(
        self, update: ClientUpdate, ctx: RoundContext, *, generator: torch.Generator
    ) -> ClientUpdate:
        update = super().process_update(update, ctx, generator=generator)
        eps = self._round_eps.get(update.client_id)
        update.delta, norm = self.upload.privatize(
            update.delta, epsilon=eps, generator=generator, num_examples=update.num_examples
        )
        update.extras["epsilon"] = eps if eps is not None else 1.0
        update.metrics["delta_norm"] = norm
        update.metrics["clipped"] = float(norm > self.upload.clip_norm)
        # Per-client time (Table 5 analogue): local training + clipping + noise of this client.
        now = time.perf_counter()
        update.metrics["client_time_s"] = now - self._mark
        self._mark = now
        return update

    def aggregate(
        self, updates: Iterable[ClientUpdate], ctx: RoundContext, *, generator: torch.Generator
    ) -> tuple[torch.Tensor, Metrics]:
        # Summed over the round's uploads on the server (under DDP: every rank's clients).
        updates = list(updates)
        self.client_time_total += sum(u.metrics.get("client_time_s", 0.0) for u in updates)
        if self.upload.private and self.upload.sensitivity_kind == "record":
            for u in updates:
                cost = self.upload.sound_epsilon(
                    epsilon=float(u.extras["epsilon"]), num_examples=u.num_examples
                )
                self._sound[u.client_id] = self._sound.get(u.client_id, 0.0) + cost
        return super().aggregate(updates, ctx, generator=generator)

    # -- accounting --------------------------------------------------------------------------
    def round_privacy(self, ctx: RoundContext) -> RoundPrivacy:
        if not self.upload.private:
            return RoundPrivacy()
        if self.upload.sensitivity_kind == "record":
            return RoundPrivacy(no_guarantee=RECORD_READING)
        return RoundPrivacy(
            local={
                cid: [self.upload.release(epsilon=self._round_eps[cid])]
                for cid in ctx.cohort
                if cid in self._round_eps
            }
        )

    @property
    def is_private(self) -> bool:
        return self.upload.private

    def after_round(self, ctx: RoundContext, aggregate: torch.Tensor) -> Metrics:
        m: Metrics = {}
        m["clients_exited"] = float(len(self.exited))
        m["dispatched"] = float(len(ctx.cohort))
        m["client_time_total_s"] = self.client_time_total
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
        if self.upload.sensitivity_kind == "record":
            m["epsilon_sound"] = max(self._sound.values(), default=0.0)
        return m

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(
            {
                "ledger": self.ledger.state_dict(),
                "exited": sorted(self.exited),
                "tight": dict(self._tight),
                "sound": dict(self._sound),
                "rounds": self.rounds,
                "rate": self.rate,
                "client_time_total": self.client_time_total,
            }
        )
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.ledger.load_state_dict(state_dict["ledger"])
        self.exited = {int(c) for c in state_dict["exited"]}
        self._tight = {int(c): float(v) for c, v in state_dict["tight"].items()}
        self._sound = {int(c): float(v) for c, v in state_dict.get("sound", {}).items()}
        self.rounds = int(state_dict["rounds"])
        self.rate = float(state_dict["rate"])
        self.client_time_total = float(state_dict["client_time_total"])


__all__ = ["AsyncLocalDP"]
