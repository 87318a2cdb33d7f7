"""The run's privacy accountant: a checkpointed Lightning Callback.

It composes only the events the mechanisms produced (``privacy/accounting/events.py``), in three
ledgers, one per level of protection:

* client level: the subsampled-Gaussian events on the aggregate (DP-FedAvg), one history; the
  sampling (Poisson or fixed-size without replacement) comes from the cohort sampler and sets
  the adjacency (add/remove, or replace-one client with the fixed-size dominating pair);
* record level: each client's DP-SGD steps, one history per client. The reported ε is the
  maximum over clients of the ε of the steps that client actually ran; no amplification from
  client sampling is claimed;
* local: each client's privatised uploads (:class:`LocalRelease`), composed over all its
  coordinates and all its uploads at the run's δ: Gaussian releases as Gaussian events on the
  run's accountant, the others by the best of basic and optimal composition
  (``analysis.local_epsilon``); the headline is the worst client's whole participation, with the
  per-coordinate and per-upload figures as secondary metrics named with their unit.

Every ε it reports is at the run's δ (``privacy/delta``); a ledger that cannot be stated at that
δ reports ε = ∞ and says why. ``privacy/epsilon`` is the headline: client level when the run has
client-level noise, else record level, else local. When the strategy says its algorithm gives no
guarantee (e.g. values uploaded without noise), ``privacy/epsilon`` is ∞ and
``privacy/guarantee`` says why. The budget stop, the checkpoint and every report read this one
ledger.

Accounting is incremental: each history (the client level, each client's record level) is kept
merged as it grows and its ε cached at the run's δ, so a round's report and the budget check
before it (:meth:`PrivacyAccountant.would_exceed`) compose only the histories the round changes
(``benchmarks/accountant_share.py`` measures the share of wall time).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

from lightning.pytorch.callbacks import Callback

from fl_lightning.privacy.accounting.analysis import (
    ACCOUNTANTS,
    DEFAULT_ACCOUNTANT,
    EXACT_GAUSSIAN,
    History,
    as_history,
    computed_by,
    epsilon,
    extend_history,
    local_epsilon,
    loss_tail,
    rdp_screen_epsilon,
)
from fl_lightning.privacy.accounting.events import (
    DistributedNoiseEvent,
    LocalRelease,
    RoundPrivacy,
    SampledGaussian,
)
from fl_lightning.privacy.accounting.horizon import PlannedHorizon, horizon_problem
from fl_lightning.privacy.distributed.accounting import rdp_to_epsilon, total_rdp
from fl_lightning.privacy.guarantee.observers import (
    ObserverEpsilon,
    ServerSees,
    observer_table,
    secure_sum_epsilons,
)
from fl_lightning.privacy.guarantee.statement import with_seed_clause

ACCOUNTANT_NAMES = {
    "rdp": "RDP accountant (Opacus)",
    "prv": "PRV accountant (Opacus)",
    "pld": "PLD accountant (dp-accounting, connect-the-dots)",
}

LocalKey = tuple[float, float, str, int, float]
"""(ε, δ, unit, units, noise multiplier) of one kind of local release."""


def _tally(ledger: dict[LocalKey, int], releases: list[LocalRelease]) -> None:
    """Counts each release under its kind (:func:`local_key`) in one client's ledger."""
    for r in releases:
        key = local_key(r)
        ledger[key] = ledger.get(key, 0) + 1


def _dump_local(ledger: dict[int, dict[LocalKey, int]]) -> dict[int, list[list[Any]]]:
    return {
        cid: [[e, d, unit, units, n, z] for (e, d, unit, units, z), n in rows.items()]
        for cid, rows in ledger.items()
    }


def _load_local(rows_by_client: dict[Any, list[list[Any]]]) -> dict[int, dict[LocalKey, int]]:
    """:func:`_dump_local`'s rows back (rows of checkpoints written before Gaussian releases
    carried σ/Δ have 5 fields)."""
    return {
        int(c): {
            (
                float(r[0]),
                float(r[1]),
                str(r[2]),
                int(r[3]),
                float(r[5]) if len(r) > 5 else 0.0,
            ): int(r[4])
            for r in rows
        }
        for c, rows in rows_by_client.items()
    }


def describe_sampling(events: list[SampledGaussian], what: str) -> str:
    """Adjacency and sampling of a client-level history, in words."""
    last = events[-1]
    if last.scheme:
        return f"add/remove one {what}, {last.scheme}"
    if last.population:
        m = round(last.sample_rate * last.population)
        return (
            f"replace-one {what}, fixed-size cohorts ({m} of {last.population} without "
            "replacement) by their dominating pair (Zhu, Dong & Wang 2022)"
        )
    if last.sample_rate < 1.0:
        return f"add/remove one {what}, Poisson cohorts (q = {last.sample_rate:.3g})"
    return f"add/remove one {what}, every {what} in every round"


class PrivacyAccountant(Callback):
    """Composes every round's privacy events and reports ε at ``delta``.

    Args:
        accountant: ``pld`` (default; dp-accounting) or ``rdp`` or ``prv`` (Opacus); ``none``
            (CLI only) runs without an accountant, which only a non-private run may do.
        delta: δ of every reported (ε, δ).
        target_epsilon: stop training before the round that would exceed it (at ``delta``);
            also the target of noise calibration when a noise multiplier is left unset.
        allow_large_delta: release a guarantee whose δ is at least 1/N (N clients) or 1/n
            (the smallest client's n records), which is refused otherwise
            (``privacy/accounting/population.py``); the guarantee sentence then says so.
        secure_mode: draw the seed of every noise, cohort and batch generator from the OS's
            entropy and write it nowhere but the checkpoint (then a secret); the guarantee
            drops its simulation caveat (``privacy/guarantee/statement.py``, docs/privacy.md).
    """

    def __init__(
        self,
        accountant: Literal["pld", "rdp", "prv", "none"] = "pld",
        delta: float = 1e-5,
        target_epsilon: float | None = None,
        allow_large_delta: bool = False,
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
        self.allow_large_delta = allow_large_delta
        self.large_delta_note: str | None = None
        """Set by the run's set-up when ``allow_large_delta`` let a δ ≥ 1/N (1/n) through."""
        self.secure_mode = bool(secure_mode)
        self.client_level: list[SampledGaussian] = []
        self.record_level: dict[int, list[SampledGaussian]] = {}
        self.local: dict[int, dict[LocalKey, int]] = {}
        """Per client: how many uploads of each (ε, δ, unit, coordinates, σ/Δ) release."""
        self.local_seen_by_server: dict[int, dict[LocalKey, int]] = {}
        """The same uploads priced as the server receives them (``RoundPrivacy.
        local_seen_by_server``; else as in ``local``): the server's row of the observers."""
        self.distributed: list[DistributedNoiseEvent] = []
        """Client-level rounds of distributed DP behind SecAgg (RDP, whatever ``accountant``:
        ``privacy/distributed/accounting.py``)."""
        self.no_guarantee: str | None = None
        self.rounds = 0
        self.private_run = True
        """False for a run whose strategy declares no privacy (set by the FederatedModule);
        then a round that releases nothing is "not private", not "no release yet"."""
        self.not_private_reason = "non-private run"
        self.adaptive_noise: str | None = None
        """Set by the server when the strategy chooses its noise from released outputs
        (``StrategyTraits.adaptive_noise``): the sentence then names the theorem that covers
        it."""
        self.server_view = ServerSees.CLEAR
        """What the server-side code of the strategy's client-level mechanism receives (set
        by the server from ``Strategy.server_view`` through ``ServerSees.of``;
        ``privacy/guarantee/observers.py``)."""
        self.horizon: PlannedHorizon | None = None
        """The rounds this run's accounting was priced for and why it depends on them (set by
        the run's set-up, ``server/federation.py``; saved in the checkpoint, so that a resume
        past a bound horizon is refused: ``privacy/accounting/horizon.py``)."""
        self._reset_caches()

    # -- incremental state -------------------------------------------------------------------
    def _reset_caches(self) -> None:
        """Merged histories and their ε at the run's δ, rebuilt from the ledger (after a load)
        and then extended round by round, never replayed."""
        self._client_history: History = as_history(self.client_level)
        self._record_histories: dict[int, History] = {
            cid: as_history(events) for cid, events in self.record_level.items()
        }
        self._record_eps: dict[int, float] = {}
        self._local_eps: dict[int, tuple[float, str]] = {}
        self._distributed_rdp = total_rdp(self.distributed)

    def _history_epsilon(self, history: History) -> float:
        return epsilon(history, self.delta, self.accountant)

    def _screened_epsilon(self, history: History, known: float) -> float:
        """A valid ε of ``history`` for taking a max over clients whose max is at least
        ``known``: a quick RDP bound when that is already ≤ ``known`` (an RDP bound is a
        guarantee too, and cannot raise the max), else its ε on the run's accountant. The
        bound (``rdp_screen_epsilon``, integer orders) costs milliseconds for a new (σ, q),
        PLD/PRV tens of milliseconds, so only the clients that can be the worst pay for it."""
        if self.accountant not in ("rdp", "none"):
            bound = rdp_screen_epsilon(history, self.delta)
            if bound <= known:
                return bound
        return self._history_epsilon(history)

    def _refresh_record_level(self) -> float:
        """Fills the per-client cache (clients whose history changed, in decreasing RDP ε, so
        the worst are computed first) and returns the max over clients."""
        known = max(self._record_eps.values(), default=0.0)
        stale = [c for c in self._record_histories if c not in self._record_eps]
        if self.accountant not in ("rdp", "none"):
            stale.sort(key=lambda c: -rdp_screen_epsilon(self._record_histories[c], self.delta))
        for c in stale:
            self._record_eps[c] = self._screened_epsilon(self._record_histories[c], known)
            known = max(known, self._record_eps[c])
        return known

    def _client_eps(self, cid: int) -> float:
        if cid not in self._record_eps:
            self._refresh_record_level()
        return self._record_eps[cid]

    # -- ledger ------------------------------------------------------------------------------
    def record(self, spent: RoundPrivacy) -> None:
        if (self.client_level or spent.client_level) and (self.distributed or spent.distributed):
            raise ValueError(
                "strategy: one run mixes central Gaussian and distributed (SecAgg) client-level "
                "rounds, which this accountant does not compose"
            )
        self.distributed.extend(spent.distributed)
        if spent.distributed:
            self._distributed_rdp = self._distributed_rdp + total_rdp(spent.distributed)
        self.client_level.extend(spent.client_level)
        self._client_history = extend_history(self._client_history, spent.client_level)
        for cid, events in spent.record_level.items():
            c = int(cid)
            self.record_level.setdefault(c, []).extend(events)
            self._record_histories[c] = extend_history(self._record_histories.get(c, ()), events)
            self._record_eps.pop(c, None)
        for cid, releases in spent.local.items():
            _tally(self.local.setdefault(int(cid), {}), releases)
            self._local_eps.pop(int(cid), None)  # the cache holds ``local``'s ε only
        for cid, releases in (spent.local_seen_by_server or spent.local).items():
            _tally(self.local_seen_by_server.setdefault(int(cid), {}), releases)
        if spent.no_guarantee:
            self.no_guarantee = spent.no_guarantee
        self.rounds += 1

    # -- reporting ---------------------------------------------------------------------------
    def _record_level_epsilon(
        self, ledger: dict[int, list[SampledGaussian]] | None = None
    ) -> float:
        """Max over clients of each client's ε (every distinct history under the chosen
        accountant: the client worst by RDP need not be the worst by PLD/PRV,
        tests/privacy/test_budget_property.py has a pair). ``ledger`` None: the run's own,
        from the per-client cache."""
        if ledger is not None:
            histories = {as_history(events) for events in ledger.values()}
            return max((self._history_epsilon(h) for h in histories), default=0.0)
        return self._refresh_record_level()

    def local_client_epsilon(self, cid: int) -> tuple[float, str]:
        """(ε at the run's δ, theorem) of client ``cid``'s whole participation."""
        if cid not in self._local_eps:
            self._local_eps[cid] = self._local_epsilon(self.local.get(cid, {}))
        return self._local_eps[cid]

    def _local_epsilon(self, rows: dict[LocalKey, int]) -> tuple[float, str]:
        releases = [(e, d, units * n, z) for (e, d, _, units, z), n in rows.items()]
        return local_epsilon(releases, self.delta, self._backend)

    @property
    def _backend(self) -> str:
        return DEFAULT_ACCOUNTANT if self.accountant == "none" else self.accountant

    def _local_report(self, out: dict[str, Any]) -> tuple[float, float, str] | None:
        if not self.local:
            return None
        per_client = {cid: self.local_client_epsilon(cid) for cid in self.local}
        worst = max(per_client, key=lambda c: per_client[c][0])
        eps, theorem = per_client[worst]
        uploads = max(sum(rows.values()) for rows in self.local.values())
        keys = [k for rows in self.local.values() for k in rows]
        out["privacy/epsilon_local_per_client"] = eps
        out["privacy/uploads_max"] = float(uploads)
        sigmas = [z for *_, z in keys if z > 0]
        approx = [k for k in keys if k[4] == 0]
        if approx:
            out["privacy/epsilon_local_per_upload"] = max(e * u for e, _, _, u, _ in approx)
        per_coordinate = [e for e, _, unit, _, _ in approx if unit == "coordinate"]
        if per_coordinate:
            out["privacy/epsilon_local_per_coordinate"] = max(per_coordinate)
        units = max(u for _, _, _, u, _ in keys)
        coordinates = any(unit == "coordinate" for _, _, unit, _, _ in keys)
        per = "per coordinate" if coordinates else "per upload"
        if sigmas:
            unit_words = f"Gaussian noise σ/Δ ≥ {min(sigmas):.3g} {per}"
        elif per_coordinate:
            unit_words = f"ε = {max(per_coordinate):.3g} per coordinate"
        else:
            unit_words = f"ε = {out['privacy/epsilon_local_per_upload']:.3g} per upload"
        if per == "per coordinate":
            unit_words = f"{units} coordinates an upload, {unit_words}"
        if math.isinf(eps):
            return eps, self.delta, f"none: {theorem}"
        sentence = (
            f"local ({eps:.3g}, {self.delta:g})-DP per client for its whole participation (any "
            f"two inputs of one client; up to {uploads} uploads, {unit_words}), {theorem}"
        )
        return eps, self.delta, sentence

    def report(self, *, tail: bool = True) -> dict[str, Any]:
        """The metrics to log: ε per level (all at ``privacy/delta``), the headline ε and the
        guarantee in words. ``tail``: also P[privacy loss > ε] (``privacy/loss_tail``, a dense
        PLD pass of about a millisecond; the run's summary and statement read it, a round's
        log leaves it out)."""
        out: dict[str, Any] = {"privacy/delta": self.delta}
        local = self._local_report(out)
        eps_client = eps_record = None
        if self.client_level:
            eps_client = out["privacy/epsilon_client"] = self._client_level_epsilon()
        if self.distributed:
            eps_client = out["privacy/epsilon_client"] = self._distributed_epsilon()
            released = [e.survivors for e in self.distributed if e.survivors > 0]
            out["privacy/secagg_survivors_min"] = float(min(released, default=0))
            out["privacy/secagg_aborted_rounds"] = float(len(self.distributed) - len(released))
        if self.record_level:
            eps_record = out["privacy/epsilon_record"] = self._record_level_epsilon()
        eps, guarantee = self._headline(lambda: local, eps_client, eps_record)
        guarantee = with_seed_clause(guarantee, secure_mode=self.secure_mode)
        if self.large_delta_note and not guarantee.startswith("none"):
            guarantee = f"{guarantee}; {self.large_delta_note}"
        out["privacy/epsilon"], out["privacy/guarantee"] = eps, guarantee
        rows = self.observers(eps)
        if rows:
            out["privacy/observer"] = rows[0].observer.words
            out["privacy/epsilon_server"] = rows[1].epsilon
            if rows[1].epsilon_mean is not None:
                out["privacy/epsilon_server_mean"] = rows[1].epsilon_mean
            out["privacy/observers"] = [r.to_state() for r in rows]
        beyond = self.loss_tail(eps) if tail else None
        if beyond is not None:
            out["privacy/loss_tail"] = beyond
        return out

    def _level(self) -> str | None:
        """The level of the headline (None: nothing released, no claim either way)."""
        if self.no_guarantee:
            return "none"
        for level, ledger in (
            ("distributed", self.distributed),
            ("client", self.client_level),
            ("record", self.record_level),
            ("local", self.local),
        ):
            if ledger:
                return level
        return None if self.private_run or self.rounds == 0 else "none"

    def _amplified(self, level: str) -> str | None:
        """The sampling the third party's ε is amplified by, in words (None: none)."""
        if level == "distributed":
            final = self.distributed[-1]
            if final.replace_one or final.sample_rate >= 1.0:
                return None
            return f"Poisson cohorts (q = {final.sample_rate:.3g})"
        if level == "client":
            last = self.client_level[-1]
            if last.sample_rate >= 1.0:
                return None
            if last.population:
                m = round(last.sample_rate * last.population)
                return f"fixed-size cohorts ({m} of {last.population})"
            if last.scheme:
                return f"its sampling (q = {last.sample_rate:.3g}; {last.scheme})"
            return f"Poisson cohorts (q = {last.sample_rate:.3g})"
        if level == "record":
            return "each client's Poisson batches"
        return None

    def observers(self, headline: float | None = None) -> list[ObserverEpsilon]:
        """The per-observer table of the guarantee (``privacy/guarantee/observers.py``): the third
        party (the headline), the server and, under SecAgg, another client; empty when nothing was
        released by a private run."""
        level = self._level()
        if level is None:
            return []
        eps = self.epsilon if headline is None else headline
        server_eps = None
        if level == "local" and self.local_seen_by_server != self.local:
            distinct = {frozenset(rows.items()) for rows in self.local_seen_by_server.values()}
            server_eps = max(self._local_epsilon(dict(rows))[0] for rows in distinct)
        if level == "client" and self.server_view == ServerSees.NOISED_UPLOADS:
            own = [
                SampledGaussian(e.noise_multiplier / (2.0 if e.population else 1.0), 1.0, e.steps)
                for e in self.client_level
            ]
            server_eps = self._history_epsilon(as_history(own))
        return observer_table(
            level=level,
            headline=eps,
            amplified=self._amplified(level),
            server_view=self.server_view,
            server_epsilon=server_eps,
            secure_sum=(
                secure_sum_epsilons(self.distributed, self.delta)
                if level == "distributed"
                else None
            ),
        )

    def accountant_words(self) -> str:
        """What computed the headline ε, in words (``analysis.computed_by``: a history without
        sampling is the exact Gaussian on ``pld`` and ``prv``, not the backend's own figure)."""
        name = ACCOUNTANT_NAMES[self._backend]
        if self.client_level:
            return computed_by(self._client_history, self._backend, name)
        histories = self._record_histories.values()
        if histories and all(
            computed_by(h, self._backend, name) == EXACT_GAUSSIAN for h in histories
        ):
            return EXACT_GAUSSIAN
        return name

    def one_more_round(self, survivors: int) -> float | None:
        """The distributed ε after one more round like the last with ``survivors`` survivors
        (the budget stop's worst case in a deployment, ``privacy/guarantee/statement.py``); None
        without distributed rounds."""
        if not self.distributed:
            return None
        extra = replace(self.distributed[-1], survivors=int(survivors), members=())
        return rdp_to_epsilon(self._distributed_rdp + total_rdp([extra]), self.delta)

    def loss_tail(self, eps: float) -> float | None:
        """P[privacy loss > ε] of the headline, where the accountant can compute it: the PLD
        accountant's composed PLD of the client-level history, or of the worst client's
        record-level history (``analysis.loss_tail``); None on RDP and PRV, for distributed
        and local ledgers and for no guarantee."""
        if self.accountant != "pld" or self.no_guarantee or math.isinf(eps):
            return None
        if self.distributed:
            return None
        if self.client_level:
            return loss_tail(self._client_history, eps)
        if self.record_level:
            self._refresh_record_level()
            worst = max(self._record_eps, key=lambda c: self._record_eps[c])
            return loss_tail(self._record_histories[worst], eps)
        return None

    def _client_level_epsilon(self) -> float:
        return self._history_epsilon(self._client_history)

    def _distributed_epsilon(self) -> float:
        return rdp_to_epsilon(self._distributed_rdp, self.delta)

    def _headline(
        self,
        local: Callable[[], tuple[float, float, str] | None],
        eps_client: float | None = None,
        eps_record: float | None = None,
    ) -> tuple[float, str]:
        """The headline ε and its sentence: the first level that released something, in the
        order no guarantee, client, record, local. A level's ε not given is computed only if
        it is the headline."""
        name = ACCOUNTANT_NAMES[self._backend]
        if self.no_guarantee:
            return math.inf, f"none: {self.no_guarantee}"
        if self.distributed:
            eps = self._distributed_epsilon() if eps_client is None else eps_client
            words = distributed_words(self.distributed)
            return eps, f"client-level ({eps:.3g}, {self.delta:g})-DP, {words}"
        if self.client_level:
            client = self._client_level_epsilon() if eps_client is None else eps_client
            how = describe_sampling(self.client_level, "client")
            name = self.accountant_words()
            return client, (
                f"client-level ({client:.3g}, {self.delta:g})-DP, {how}, {name}"
                f"{self._adaptive_words()}"
            )
        if self.record_level:
            record = self._record_level_epsilon() if eps_record is None else eps_record
            name = self.accountant_words()
            return record, (
                f"record-level ({record:.3g}, {self.delta:g})-DP, add/remove one record, "
                f"Poisson batches, {name}, max over clients, no amplification by client "
                f"sampling claimed{self._adaptive_words()}"
            )
        released = local()
        if released is not None:
            return released[0], released[2]
        if self.rounds == 0:
            return 0.0, "nothing released: no round completed"
        if self.private_run:
            return 0.0, "no release yet, ε = 0"
        return math.inf, f"none: not private ({self.not_private_reason})"

    def _adaptive_words(self) -> str:
        if not self.adaptive_noise:
            return ""
        return (
            f"; {self.adaptive_noise}: composed by RDP as a Rényi filter per order "
            "(Feldman & Zrnic 2021)"
        )

    @property
    def epsilon(self) -> float:
        return float(self.report(tail=False)["privacy/epsilon"])

    def would_exceed(self, prospective: RoundPrivacy) -> bool:
        """True when recording ``prospective`` would push the headline ε (at the run's δ) past
        the target. Only the histories ``prospective`` extends are composed; every other
        client's ε comes from the cache (the ledger is never replayed)."""
        if self.target_epsilon is None:
            return False
        eps = self._prospective_headline(prospective)
        return eps is not None and eps > self.target_epsilon

    def _prospective_headline(self, prospective: RoundPrivacy) -> float | None:
        """The headline ε after ``prospective``; None when the headline would be no guarantee."""
        if self.no_guarantee or prospective.no_guarantee:
            return None
        if self.distributed or prospective.distributed:
            rdp = self._distributed_rdp + total_rdp(prospective.distributed)
            return rdp_to_epsilon(rdp, self.delta)
        if self.client_level or prospective.client_level:
            return self._history_epsilon(
                extend_history(self._client_history, prospective.client_level)
            )
        if self.record_level or prospective.record_level:
            self._refresh_record_level()
            changed = {int(c) for c in prospective.record_level}
            worst = max((e for c, e in self._record_eps.items() if c not in changed), default=0.0)
            histories = [
                extend_history(self._record_histories.get(int(c), ()), ev)
                for c, ev in prospective.record_level.items()
            ]
            if self.accountant not in ("rdp", "none"):  # the likely worst first (see screen)
                histories.sort(key=lambda h: -rdp_screen_epsilon(h, self.delta))
            for history in histories:
                worst = max(worst, self._screened_epsilon(history, worst))
            return worst
        if self.local or prospective.local:
            changed = {int(c) for c in prospective.local}
            worst = max(
                (self.local_client_epsilon(c)[0] for c in self.local if c not in changed),
                default=0.0,
            )
            for cid, releases in prospective.local.items():
                rows = dict(self.local.get(int(cid), {}))
                for r in releases:
                    rows[local_key(r)] = rows.get(local_key(r), 0) + 1
                worst = max(worst, self._local_epsilon(rows)[0])
            return None if math.isinf(worst) else worst
        return None if not self.private_run else 0.0

    def report_alone(self, prospective: RoundPrivacy) -> dict[str, Any]:
        """The report ``prospective`` alone would give (what one such round costs)."""
        trial = PrivacyAccountant(self.accountant, self.delta, None)
        trial.record(prospective)
        return trial.report()

    # -- checkpointing -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        def dump(events: list[SampledGaussian]) -> list[tuple]:
            return [
                (e.noise_multiplier, e.sample_rate, e.steps, e.population)
                + ((e.scheme,) if e.scheme else ())
                for e in events
            ]

        return {
            "client_level": dump(self.client_level),
            "record_level": {cid: dump(ev) for cid, ev in self.record_level.items()},
            "local": _dump_local(self.local),
            "local_seen_by_server": _dump_local(self.local_seen_by_server),
            "distributed": [e.to_state() for e in self.distributed],
            "no_guarantee": self.no_guarantee,
            "rounds": self.rounds,
            "private_run": self.private_run,
            "horizon": None if self.horizon is None else self.horizon.state(),
            "server_view": self.server_view.value,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        def load(rows: list) -> list[SampledGaussian]:
            # Rows of checkpoints written before fixed-size sampling was accounted have 3 fields.
            return [
                SampledGaussian(
                    float(r[0]),
                    float(r[1]),
                    int(r[2]),
                    int(r[3]) if len(r) > 3 else 0,
                    str(r[4]) if len(r) > 4 else "",
                )
                for r in rows
            ]

        self.client_level = load(state_dict["client_level"])
        self.record_level = {int(c): load(r) for c, r in state_dict["record_level"].items()}
        self.local = _load_local(state_dict.get("local", {}))
        if "local_epsilon" in state_dict:  # checkpoints written before per-unit local ledgers
            for c, eps in state_dict["local_epsilon"].items():
                d = float(state_dict.get("local_delta", {}).get(c, 0.0))
                self.local.setdefault(int(c), {})[(float(eps), d, "upload", 1, 0.0)] = 1
        # checkpoints written before the server's pricing was kept: it is the ledger's own
        seen = state_dict.get("local_seen_by_server")
        self.local_seen_by_server = (
            _load_local(seen) if seen is not None else {c: dict(r) for c, r in self.local.items()}
        )
        self.distributed = [
            DistributedNoiseEvent.from_state(r) for r in state_dict.get("distributed", [])
        ]
        self.no_guarantee = state_dict["no_guarantee"]
        self.private_run = bool(state_dict.get("private_run", True))
        self.server_view = ServerSees(state_dict.get("server_view", self.server_view.value))
        self.rounds = int(state_dict["rounds"])
        saved = PlannedHorizon.from_state(state_dict.get("horizon"))
        if self.horizon is not None:  # the resumed run's plan, set up before the load
            problem = horizon_problem(saved, self.horizon.rounds, path="the checkpoint")
            if problem:
                raise ValueError(problem)
        if saved is not None and saved.reason is not None:
            self.horizon = saved  # the bound stays the one the run was priced for
        self._reset_caches()


def distributed_words(events: list[DistributedNoiseEvent]) -> str:
    """The trust model, noise, field and sampling of distributed-DP rounds, in words."""
    from fl_lightning.privacy.distributed.registry import distributed_noise

    last = events[-1]
    released = [e.survivors for e in events if e.survivors > 0]
    aborted = len(events) - len(released)  # too few survivors, or a split masking graph
    if not released:
        fewest = f"all {aborted} rounds aborted, nothing released"
    elif aborted:
        fewest = (f"n ≥ {min(released)} surviving clients in each round released, {aborted} "
                  f"of {len(events)} rounds aborted (nothing released)")  # fmt: skip
    else:
        fewest = f"n ≥ {min(released)} surviving clients a round"
    rdp = "RDP (integer orders)"
    if last.replace_one:
        how = (
            f"replace-one client, fixed-size cohorts ({last.cohort} a round), no amplification "
            "claimed"
        )
    elif last.sample_rate < 1.0:
        how = f"add/remove one client, Poisson cohorts (q = {last.sample_rate:.3g})"
        rdp = "RDP (integer orders; Zhu & Wang 2019 subsampling)"
    else:
        how = "add/remove one client, every client in every round"
    return (
        f"distributed DP: the server sees only the sum (SecAgg, honest-but-curious server, "
        f"{fewest}), {distributed_noise(last.mechanism).words} "
        f"noise shares, {last.bits}-bit modular field, {how}, {rdp}"
    )


def local_key(release: Any) -> LocalKey:
    """The ledger key of a :class:`LocalRelease`."""
    return (
        float(release.epsilon),
        float(release.delta),
        release.unit,
        int(release.units),
        float(getattr(release, "noise_multiplier", 0.0)),
    )
