"""The run's privacy accountant: a checkpointed Lightning Callback.

It keeps three ledgers, one per level of protection (see ``privacy/events.py``):

* client level: the sampled-Gaussian events on the aggregate (DP-FedAvg), one history;
* record level: each client's DP-SGD steps, one history per client. The reported ε is the
  maximum over clients of the ε of the steps that client actually ran; no amplification from
  client sampling is claimed;
* local: pure-ε (or (ε, δ)) local reports per client, composed by basic composition.

``privacy/epsilon`` is the headline: client level when the run has client-level noise, else
record level, else local. When the strategy says its algorithm gives no guarantee (e.g. values
uploaded without noise), ``privacy/epsilon`` is ∞ and ``privacy/guarantee`` says why.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from lightning.pytorch.callbacks import Callback

from fl_lightning.privacy.analysis import ACCOUNTANTS, as_history, epsilon
from fl_lightning.privacy.events import RoundPrivacy, SampledGaussian


class PrivacyAccountant(Callback):
    """Composes every round's privacy events and reports ε at ``delta``.

    Args:
        accountant: ``rdp`` or ``prv`` (Opacus) or ``pld`` (dp-accounting).
        delta: δ of the reported (ε, δ).
        target_epsilon: stop training before the round that would exceed it; also the target
            of noise calibration when a noise multiplier is left unset.
    """

    def __init__(
        self,
        accountant: Literal["rdp", "prv", "pld"] = "rdp",
        delta: float = 1e-5,
        target_epsilon: float | None = None,
    ) -> None:
        super().__init__()
        if accountant not in ACCOUNTANTS:
            raise ValueError(
                f"privacy.accountant: unknown {accountant!r}; choose from {list(ACCOUNTANTS)}"
            )
        if not 0.0 < delta < 1.0:
            raise ValueError(f"privacy.delta: must be in (0, 1), got {delta}")
        if target_epsilon is not None and target_epsilon <= 0:
            raise ValueError(f"privacy.target_epsilon: must be > 0, got {target_epsilon}")
        self.accountant = accountant
        self.delta = delta
        self.target_epsilon = target_epsilon
        self.client_level: list[SampledGaussian] = []
        self.record_level: dict[int, list[SampledGaussian]] = {}
        self.local_epsilon: dict[int, float] = {}
        self.local_delta: dict[int, float] = {}
        self.no_guarantee: str | None = None
        self.rounds = 0

    # -- ledger ------------------------------------------------------------------------------
    def record(self, spent: RoundPrivacy) -> None:
        self.client_level.extend(spent.client_level)
        for cid, events in spent.record_level.items():
            self.record_level.setdefault(int(cid), []).extend(events)
        for cid, eps in spent.local_epsilon.items():
            self.local_epsilon[int(cid)] = self.local_epsilon.get(int(cid), 0.0) + eps
            self.local_delta[int(cid)] = self.local_delta.get(int(cid), 0.0) + spent.local_delta
        if spent.no_guarantee:
            self.no_guarantee = spent.no_guarantee
        self.rounds += 1

    # -- reporting ---------------------------------------------------------------------------
    def _record_level_epsilon(self, ledger: dict[int, list[SampledGaussian]]) -> float:
        if not ledger:
            return 0.0
        histories = {as_history(events) for events in ledger.values()}
        # Every distinct history under the chosen accountant: the client worst by RDP need not
        # be the worst by PLD/PRV (tests/privacy/test_budget_property.py has a pair).
        return max(epsilon(h, self.delta, self.accountant) for h in histories)

    def report(self) -> dict[str, Any]:
        """The metrics to log: ε per level, the headline ε and the guarantee in words."""
        out: dict[str, Any] = {"privacy/delta": self.delta}
        eps_client = epsilon(self.client_level, self.delta, self.accountant)
        eps_record = self._record_level_epsilon(self.record_level)
        eps_local = max(self.local_epsilon.values(), default=0.0)
        if self.client_level:
            out["privacy/epsilon_client"] = eps_client
        if self.record_level:
            out["privacy/epsilon_record"] = eps_record
        if self.local_epsilon:
            out["privacy/epsilon_local"] = eps_local
            out["privacy/delta_local"] = max(self.local_delta.values(), default=0.0)
        if self.rounds == 0:
            out["privacy/epsilon"] = 0.0
            out["privacy/guarantee"] = "nothing released: no round completed"
        elif self.no_guarantee:
            out["privacy/epsilon"] = math.inf
            out["privacy/guarantee"] = f"none: {self.no_guarantee}"
        elif self.client_level:
            out["privacy/epsilon"] = eps_client
            out["privacy/guarantee"] = (
                f"client-level ({eps_client:.3g}, {self.delta:g})-DP ({self.accountant})"
            )
        elif self.record_level:
            out["privacy/epsilon"] = eps_record
            out["privacy/guarantee"] = (
                f"record-level ({eps_record:.3g}, {self.delta:g})-DP ({self.accountant}, "
                "max over clients, no amplification by client sampling claimed)"
            )
        elif self.local_epsilon:
            out["privacy/epsilon"] = eps_local
            d = out["privacy/delta_local"]
            out["privacy/guarantee"] = (
                f"local ({eps_local:.3g}, {d:g})-DP per client by basic composition"
            )
        else:
            out["privacy/epsilon"] = math.inf
            out["privacy/guarantee"] = "none: non-private run"
        return out

    @property
    def epsilon(self) -> float:
        return float(self.report()["privacy/epsilon"])

    def would_exceed(self, prospective: RoundPrivacy) -> bool:
        """True when recording ``prospective`` would push the headline ε past the target."""
        if self.target_epsilon is None:
            return False
        trial = PrivacyAccountant(self.accountant, self.delta, None)
        trial.load_state_dict(self.state_dict())
        trial.record(prospective)
        report = trial.report()
        if report["privacy/guarantee"].startswith("none"):
            return False
        return report["privacy/epsilon"] > self.target_epsilon

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        def dump(events: list[SampledGaussian]) -> list[tuple[float, float, int]]:
            return [(e.noise_multiplier, e.sample_rate, e.steps) for e in events]

        return {
            "client_level": dump(self.client_level),
            "record_level": {cid: dump(ev) for cid, ev in self.record_level.items()},
            "local_epsilon": dict(self.local_epsilon),
            "local_delta": dict(self.local_delta),
            "no_guarantee": self.no_guarantee,
            "rounds": self.rounds,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        def load(rows: list) -> list[SampledGaussian]:
            return [SampledGaussian(float(s), float(q), int(k)) for s, q, k in rows]

        self.client_level = load(state_dict["client_level"])
        self.record_level = {int(c): load(r) for c, r in state_dict["record_level"].items()}
        self.local_epsilon = {int(c): float(v) for c, v in state_dict["local_epsilon"].items()}
        self.local_delta = {int(c): float(v) for c, v in state_dict["local_delta"].items()}
        self.no_guarantee = state_dict["no_guarantee"]
        self.rounds = int(state_dict["rounds"])
