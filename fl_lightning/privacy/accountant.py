"""The run's privacy accountant: a checkpointed Lightning Callback.

It composes only the events the mechanisms produced (``privacy/events.py``), in three ledgers,
one per level of protection:

* client level: the subsampled-Gaussian events on the aggregate (DP-FedAvg), one history; the
  sampling (Poisson or fixed-size without replacement) comes from the cohort sampler and sets
  the adjacency (add/remove or replace-one client);
* record level: each client's DP-SGD steps, one history per client. The reported ε is the
  maximum over clients of the ε of the steps that client actually ran; no amplification from
  client sampling is claimed;
* local: each client's privatised uploads (:class:`LocalRelease`), composed over all its
  coordinates and all its uploads by the best valid theorem (basic, or the optimal composition
  of dp-accounting's PLD); the headline is the worst client's whole participation, with the
  per-coordinate and per-upload figures as secondary metrics named with their unit.

``privacy/epsilon`` is the headline: client level when the run has client-level noise, else
record level, else local. When the strategy says its algorithm gives no guarantee (e.g. values
uploaded without noise), ``privacy/epsilon`` is ∞ and ``privacy/guarantee`` says why. The budget
stop, the checkpoint and every report read this one ledger.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

from lightning.pytorch.callbacks import Callback

from fl_lightning.privacy.analysis import ACCOUNTANTS, as_history, epsilon, local_epsilon
from fl_lightning.privacy.events import RoundPrivacy, SampledGaussian
from fl_lightning.privacy.statement import with_seed_clause

ACCOUNTANT_NAMES = {
    "rdp": "RDP accountant (Opacus)",
    "prv": "PRV accountant (Opacus)",
    "pld": "PLD accountant (dp-accounting)",
}


def describe_sampling(events: list[SampledGaussian], what: str) -> str:
    """Adjacency and sampling of a client-level history, in words."""
    last = events[-1]
    if last.population:
        m = round(last.sample_rate * last.population)
        return (
            f"replace-one {what}, fixed-size cohorts ({m} of {last.population} without "
            "replacement), RDP accountant (dp-accounting, Wang et al. 2019)"
        )
    if last.sample_rate < 1.0:
        return f"add/remove one {what}, Poisson cohorts (q = {last.sample_rate:.3g})"
    return f"add/remove one {what}, every {what} in every round"


class PrivacyAccountant(Callback):
    """Composes every round's privacy events and reports ε at ``delta``.

    Args:
        accountant: ``rdp`` or ``prv`` (Opacus) or ``pld`` (dp-accounting); ``none`` (CLI
            only) runs without an accountant, which only a non-private run may do.
        delta: δ of the reported (ε, δ).
        target_epsilon: stop training before the round that would exceed it; also the target
            of noise calibration when a noise multiplier is left unset.
        secure_mode: draw the seed of every noise, cohort and batch generator from the OS's
            entropy and write it nowhere but the checkpoint (then a secret); the guarantee
            drops its simulation caveat (``privacy/statement.py``, docs/privacy.md).
    """

    def __init__(
        self,
        accountant: Literal["rdp", "prv", "pld", "none"] = "rdp",
        delta: float = 1e-5,
        target_epsilon: float | None = None,
        secure_mode: bool = False,
    ) -> None:
        super().__init__()
        if accountant not in (*ACCOUNTANTS, "none"):
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
        self.secure_mode = bool(secure_mode)
        self.client_level: list[SampledGaussian] = []
        self.record_level: dict[int, list[SampledGaussian]] = {}
        self.local: dict[int, dict[tuple[float, float, str, int], int]] = {}
        """Per client: how many uploads of each (ε, δ, unit, coordinates) release."""
        self.no_guarantee: str | None = None
        self.rounds = 0
        self.private_run = True
        """False for a run whose strategy declares no privacy (set by the FederatedModule);
        then a round that releases nothing is "not private", not "no release yet"."""
        self.not_private_reason = "non-private run"

    # -- ledger ------------------------------------------------------------------------------
    def record(self, spent: RoundPrivacy) -> None:
        self.client_level.extend(spent.client_level)
        for cid, events in spent.record_level.items():
            self.record_level.setdefault(int(cid), []).extend(events)
        for cid, releases in spent.local.items():
            ledger = self.local.setdefault(int(cid), {})
            for r in releases:
                key = (float(r.epsilon), float(r.delta), r.unit, int(r.units))
                ledger[key] = ledger.get(key, 0) + 1
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

    def local_client_epsilon(self, cid: int) -> tuple[float, float, str]:
        """(ε, δ, theorem) of client ``cid``'s whole participation (all units, all uploads)."""
        rows = [(e, d, units * n) for (e, d, _, units), n in self.local.get(cid, {}).items()]
        return local_epsilon(rows, self.delta)

    def _local_report(self, out: dict[str, Any]) -> tuple[float, float, str] | None:
        if not self.local:
            return None
        per_client = {cid: self.local_client_epsilon(cid) for cid in self.local}
        worst = max(per_client, key=lambda c: per_client[c][0])
        eps, dlt, theorem = per_client[worst]
        uploads = max(sum(rows.values()) for rows in self.local.values())
        keys = [k for rows in self.local.values() for k in rows]
        out["privacy/epsilon_local_per_client"] = eps
        out["privacy/delta_local_per_client"] = dlt
        out["privacy/epsilon_local_per_upload"] = max(e * u for e, _, _, u in keys)
        per_coordinate = [e for e, _, unit, _ in keys if unit == "coordinate"]
        if per_coordinate:
            out["privacy/epsilon_local_per_coordinate"] = max(per_coordinate)
        out["privacy/uploads_max"] = float(uploads)
        units = max(u for _, _, _, u in keys)
        unit_words = (
            f"{units} coordinates an upload, ε = {max(per_coordinate):.3g} per coordinate"
            if per_coordinate
            else f"ε = {out['privacy/epsilon_local_per_upload']:.3g} per upload"
        )
        sentence = (
            f"local ({eps:.3g}, {dlt:g})-DP per client for its whole participation (any two "
            f"inputs of one client; up to {uploads} uploads, {unit_words}), {theorem}"
        )
        return eps, dlt, sentence

    def report(self) -> dict[str, Any]:
        """The metrics to log: ε per level, the headline ε and the guarantee in words."""
        out: dict[str, Any] = {"privacy/delta": self.delta}
        local = self._local_report(out)
        eps_client = eps_record = None
        if self.client_level:
            eps_client = out["privacy/epsilon_client"] = self._client_level_epsilon()
        if self.record_level:
            eps_record = out["privacy/epsilon_record"] = self._record_level_epsilon(
                self.record_level
            )
        eps, guarantee = self._headline(lambda: local, eps_client, eps_record)
        out["privacy/epsilon"] = eps
        out["privacy/guarantee"] = with_seed_clause(guarantee, secure_mode=self.secure_mode)
        return out

    def _client_level_epsilon(self) -> float:
        return epsilon(self.client_level, self.delta, self.accountant)

    def _headline(
        self,
        local: Callable[[], tuple[float, float, str] | None],
        eps_client: float | None = None,
        eps_record: float | None = None,
    ) -> tuple[float, str]:
        """The headline ε and its sentence: the first level that released something, in the
        order no guarantee, client, record, local. A level's ε not given is computed only if
        it is the headline (the budget stop before every round needs the headline alone, and
        the record level is one PRV/PLD computation per client)."""
        name = ACCOUNTANT_NAMES[self.accountant]
        if self.no_guarantee:
            return math.inf, f"none: {self.no_guarantee}"
        if self.client_level:
            client = self._client_level_epsilon() if eps_client is None else eps_client
            how = describe_sampling(self.client_level, "client")
            if not self.client_level[-1].population:
                how = f"{how}, {name}"
            return client, f"client-level ({client:.3g}, {self.delta:g})-DP, {how}"
        if self.record_level:
            record = eps_record
            if record is None:
                record = self._record_level_epsilon(self.record_level)
            return record, (
                f"record-level ({record:.3g}, {self.delta:g})-DP, add/remove one record, "
                f"Poisson batches, {name}, max over clients, no amplification by client "
                "sampling claimed"
            )
        released = local()
        if released is not None:
            return released[0], released[2]
        if self.rounds == 0:
            return 0.0, "nothing released: no round completed"
        if self.private_run:
            return 0.0, "no release yet, ε = 0"
        return math.inf, f"none: not private ({self.not_private_reason})"

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
        trial.private_run = self.private_run
        eps, guarantee = trial._headline(lambda: trial._local_report({}))
        return not guarantee.startswith("none") and eps > self.target_epsilon

    def report_alone(self, prospective: RoundPrivacy) -> dict[str, Any]:
        """The report ``prospective`` alone would give (what one such round costs)."""
        trial = PrivacyAccountant(self.accountant, self.delta, None)
        trial.record(prospective)
        return trial.report()

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        def dump(events: list[SampledGaussian]) -> list[tuple[float, float, int, int]]:
            return [(e.noise_multiplier, e.sample_rate, e.steps, e.population) for e in events]

        return {
            "client_level": dump(self.client_level),
            "record_level": {cid: dump(ev) for cid, ev in self.record_level.items()},
            "local": {
                cid: [[e, d, unit, units, n] for (e, d, unit, units), n in rows.items()]
                for cid, rows in self.local.items()
            },
            "no_guarantee": self.no_guarantee,
            "rounds": self.rounds,
            "private_run": self.private_run,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        def load(rows: list) -> list[SampledGaussian]:
            # Rows of checkpoints written before fixed-size sampling was accounted have 3 fields.
            return [
                SampledGaussian(float(r[0]), float(r[1]), int(r[2]), int(r[3]) if len(r) > 3 else 0)
                for r in rows
            ]

        self.client_level = load(state_dict["client_level"])
        self.record_level = {int(c): load(r) for c, r in state_dict["record_level"].items()}
        self.local = {
            int(c): {(float(e), float(d), str(u), int(k)): int(n) for e, d, u, k, n in rows}
            for c, rows in state_dict.get("local", {}).items()
        }
        if "local_epsilon" in state_dict:  # checkpoints written before per-unit local ledgers
            for c, eps in state_dict["local_epsilon"].items():
                d = float(state_dict.get("local_delta", {}).get(c, 0.0))
                self.local.setdefault(int(c), {})[(float(eps), d, "upload", 1)] = 1
        self.no_guarantee = state_dict["no_guarantee"]
        self.private_run = bool(state_dict.get("private_run", True))
        self.rounds = int(state_dict["rounds"])
