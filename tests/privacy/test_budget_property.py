"""Issue 23, item 5: the budget is never overspent, and the reported ε can be recomputed.

A property test (hypothesis) of the accountant with the budget stop exactly as
``FederatedModule.training_step`` drives it: before each round, ``would_exceed(planned)``; if
False, ``record(planned)``. Random configurations: accountant (rdp / prv / pld), level
(client-level DP-FedAvg events, record-level DP-SGD events per client, or both), sampling
(poisson / fixed), σ, cohort, rounds, target ε, δ, heterogeneous client sizes (so every client
has its own DP-SGD rate B/n_i and steps), and resume points (the accountant rebuilt from its
``state_dict`` as a checkpoint resume does). Properties:

1. the final ε never exceeds ``target_epsilon``;
2. the stop is tight: the round it refused would have exceeded the target;
3. the reported ε equals an independent recomputation from the logged events with
   dp-accounting alone (not through ``fl_lightning.privacy.accounting.analysis``).

Assumptions (the lead's accountant rewrite may change them; adapt ``round_events`` and
``independent_epsilon``, nothing else):

* API: ``PrivacyAccountant(accountant, delta, target_epsilon)``, ``would_exceed(RoundPrivacy)``,
  ``record(RoundPrivacy)``, ``report()["privacy/epsilon"]``, ``state_dict()`` /
  ``load_state_dict()``; events are ``SampledGaussian(noise_multiplier, sample_rate, steps)``.
* A round's client-level event is ``SampledGaussian(σ, m/N, 1, population)``: Poisson
  (population 0, add/remove adjacency) for Poisson cohorts; for fixed-size cohorts of m < N,
  population N, recomputed as its dominating pair's event (Zhu, Dong & Wang 2022):
  ``PoissonSampledDpEvent(m/N, GaussianDpEvent(σ/2))`` under add/remove, on every accountant.
* A cohort client's record-level events are ``steps_i = E·ceil(n_i/B)`` Poisson-subsampled
  Gaussian steps at q_i = min(1, B/n_i) (``planned_privacy`` today); the headline is the
  client level when present, else the max over clients of the record-level ε.
* rdp is Opacus' RDP at Opacus' default orders (recomputed with dp-accounting's RDP accountant
  at the same orders); prv is Opacus' PRV (recomputed with dp-accounting's PLD, within PRV's
  stated ε error); pld is dp-accounting's PLD at discretisation 1e-3.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os

import dp_accounting
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fl_lightning.privacy.accounting.events import LocalRelease, RoundPrivacy, SampledGaussian
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant

EXAMPLES = int(os.environ.get("FL_HYPOTHESIS_EXAMPLES", "30"))
RANDOM = os.environ.get("FL_HYPOTHESIS_RANDOM") == "1"  # explore beyond the fixed examples


@st.composite
def configs(draw: st.DrawFn) -> dict:
    n_clients = draw(st.integers(2, 20))
    rounds = draw(st.integers(1, 25))
    level = draw(st.sampled_from(["client", "record", "both"]))
    sampling = draw(st.sampled_from(["poisson", "fixed"]))
    return {
        "accountant": draw(st.sampled_from(["rdp", "prv", "pld"])),
        "level": level,
        "sampling": sampling,
        "n_clients": n_clients,
        "cohort": draw(st.integers(1, n_clients)),
        "sigma": draw(st.floats(0.6, 4.0)),
        "dp_sgd_sigma": draw(st.floats(0.6, 4.0)),
        "rounds": rounds,
        "target": draw(st.floats(0.3, 12.0)),
        "delta": draw(st.sampled_from([1e-5, 1e-6, 1e-3])),
        "sizes": draw(st.lists(st.integers(4, 300), min_size=n_clients, max_size=n_clients)),
        "batch": draw(st.integers(1, 64)),
        "local_epochs": draw(st.integers(1, 2)),
        "resume_at": draw(st.sets(st.integers(1, rounds), max_size=3)),
        "seed": draw(st.integers(0, 2**16)),
    }


def round_events(cfg: dict, round_idx: int) -> RoundPrivacy:
    """What round ``round_idx`` spends (the shape ``planned_privacy`` gives the accountant)."""
    rng = np.random.default_rng([cfg["seed"], round_idx])
    n, m = cfg["n_clients"], cfg["cohort"]
    if cfg["sampling"] == "poisson":
        cohort = [int(c) for c in np.flatnonzero(rng.random(n) < m / n)]
    else:
        cohort = sorted(int(c) for c in rng.choice(n, size=m, replace=False))
    spent = RoundPrivacy()
    if cfg["level"] in ("client", "both"):
        # fixed-size cohorts smaller than the population: sampled without replacement
        population = n if cfg["sampling"] == "fixed" and m < n else 0
        spent.client_level = [SampledGaussian(cfg["sigma"], m / n, 1, population)]
    if cfg["level"] in ("record", "both"):
        b, e = cfg["batch"], cfg["local_epochs"]
        for cid in cohort:
            size = cfg["sizes"][cid]
            steps = e * math.ceil(size / b)
            spent.record_level[cid] = [
                SampledGaussian(cfg["dp_sgd_sigma"], min(1.0, b / size), steps)
            ]
    return spent


OPACUS_ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))


def _runs(events: list[SampledGaussian]) -> list[tuple[SampledGaussian, int]]:
    """Consecutive equal events as (event, total steps), each composed as dp-accounting's
    ``compose(event, k)``: RDP adds k times one step's RDP, PLD builds one step's PLD once and
    self-composes it k times (building it again for every logged round is what made this
    recomputation cost most of the test)."""
    runs: list[tuple[SampledGaussian, int]] = []
    for e in events:
        if runs and dataclasses.replace(runs[-1][0], steps=e.steps) == e:
            runs[-1] = (runs[-1][0], runs[-1][1] + e.steps)
        else:
            runs.append((e, e.steps))
    return runs


def _history_epsilon(events: list[SampledGaussian], delta: float, accountant: str) -> float:
    # Examples share histories (hypothesis varies one field at a time): each is computed once.
    return _history_epsilon_of(tuple(events), delta, accountant)


@functools.cache
def _history_epsilon_of(
    events: tuple[SampledGaussian, ...], delta: float, accountant: str
) -> float:
    if not events:
        return 0.0
    if any(e.population for e in events):
        # Fixed-size cohorts (replace-one): the dominating pair ((1-q)N(0,σ²) + qN(2,σ²),
        # N(0,σ²)) is, scaled by 1/2, the add/remove pair of a Poisson-sampled Gaussian of σ/2.
        events = tuple(
            dataclasses.replace(e, noise_multiplier=e.noise_multiplier / 2, population=0)
            for e in events
        )
    if accountant == "rdp":
        acc = dp_accounting.rdp.RdpAccountant(orders=OPACUS_ORDERS)
    else:
        acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    for e, steps in _runs(list(events)):
        event = dp_accounting.GaussianDpEvent(e.noise_multiplier)
        if e.sample_rate < 1.0:
            event = dp_accounting.PoissonSampledDpEvent(e.sample_rate, event)
        acc.compose(event, steps)
    return float(acc.get_epsilon(delta))


def independent_epsilon(log: list[RoundPrivacy], cfg: dict) -> float:
    """The headline ε recomputed from the logged rounds with dp-accounting only."""
    if not log:
        return 0.0
    client = [e for spent in log for e in spent.client_level]
    if client:
        return _history_epsilon(client, cfg["delta"], cfg["accountant"])
    per_client: dict[int, list[SampledGaussian]] = {}
    for spent in log:
        for cid, events in spent.record_level.items():
            per_client.setdefault(cid, []).extend(events)
    return max(
        (_history_epsilon(ev, cfg["delta"], cfg["accountant"]) for ev in per_client.values()),
        default=0.0,
    )


def tolerance(accountant: str, eps: float) -> float:
    """rdp: the same bound at the same orders by two implementations (Opacus and dp-accounting
    differ in the last digits of the fractional-order series, 3.7e-6 relative seen; 3.4e-4 at
    σ = 1.19, q = 0.74, δ = 1e-3, 15 rounds; and at σ < 0.75 dp-accounting drops fractional
    orders whose series does not converge, 1.4e-4 at σ = 0.72, q = 0.25). pld: the same
    library composing the same runs (5e-11 relative seen), except a history without sampling,
    whose ε the accountant takes in closed form (Balle & Wang 2018) and this recomputation from
    a discretised Gaussian PLD (2e-7 relative seen). prv: Opacus' PRV error bound (eps_error
    0.01) and the PLD's 1e-3 discretisation."""
    return {"rdp": 1e-3 * max(1.0, eps), "pld": 1e-5 * max(1.0, eps), "prv": 0.02 + 0.01 * eps}[
        accountant
    ]


def simulate(cfg: dict) -> tuple[PrivacyAccountant, list[RoundPrivacy], RoundPrivacy | None]:
    """The budget stop of ``training_step``, with checkpoint/resume at ``resume_at``."""
    acc = PrivacyAccountant(cfg["accountant"], cfg["delta"], cfg["target"])
    log: list[RoundPrivacy] = []
    refused = None
    for r in range(cfg["rounds"]):
        if r in cfg["resume_at"]:  # a resume: a fresh accountant from the checkpointed state
            state = acc.state_dict()
            acc = PrivacyAccountant(cfg["accountant"], cfg["delta"], cfg["target"])
            acc.load_state_dict(state)
        planned = round_events(cfg, r)
        if acc.would_exceed(planned):
            refused = planned
            break
        acc.record(planned)
        log.append(planned)
    assert acc.rounds == len(log)  # no round counted twice or lost across resumes
    return acc, log, refused


@pytest.mark.fault
@pytest.mark.heavy
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not RANDOM,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(cfg=configs())
def test_budget_is_never_overspent_and_epsilon_is_recomputable(cfg):
    acc, log, refused = simulate(cfg)
    reported = acc.report()["privacy/epsilon"]
    assert reported <= cfg["target"]
    expected = independent_epsilon(log, cfg)
    assert reported == pytest.approx(expected, abs=tolerance(cfg["accountant"], expected))
    if refused is not None:  # the stop was needed: one more round would have gone over
        over = independent_epsilon([*log, refused], cfg)
        assert over > cfg["target"] - tolerance(cfg["accountant"], over)


@pytest.mark.parametrize("accountant", ["pld", "prv"])
def test_record_level_headline_is_the_worst_client_under_the_chosen_accountant(accountant):
    """Found by this file's recomputation: ranking clients by RDP and evaluating only that one
    under PLD/PRV under-reported ε (here PLD 2.09 instead of 2.40), so the budget stop could
    let the worst client overspend. RDP ranks A worst (2.96 vs 2.63), PLD ranks B worst."""
    a = SampledGaussian(0.7, 0.02, 5)
    b = SampledGaussian(4.0, 0.5, 20)
    acc = PrivacyAccountant(accountant, 1e-5, None)
    acc.record(RoundPrivacy(record_level={0: [a], 1: [b]}))
    cfg = {"delta": 1e-5, "accountant": accountant}
    expected = max(_history_epsilon([a], 1e-5, accountant), _history_epsilon([b], 1e-5, accountant))
    reported = acc.report()["privacy/epsilon"]
    assert reported == pytest.approx(expected, abs=tolerance(accountant, expected))
    assert independent_epsilon([RoundPrivacy(record_level={0: [a], 1: [b]})], cfg) == expected


def _would_exceed_by_report(acc: PrivacyAccountant, prospective: RoundPrivacy) -> bool:
    """``would_exceed`` as it read before it skipped the levels the headline does not use:
    the full ``report()`` of the accountant with ``prospective`` recorded."""
    trial = PrivacyAccountant(acc.accountant, acc.delta, None)
    trial.load_state_dict(acc.state_dict())
    trial.record(prospective)
    report = trial.report()
    if report["privacy/guarantee"].startswith("none"):
        return False
    return report["privacy/epsilon"] > acc.target_epsilon


RECORD = {0: [SampledGaussian(1.1, 0.1, 40)], 1: [SampledGaussian(0.9, 0.5, 10)]}
ROUNDS = {
    "client and record": RoundPrivacy([SampledGaussian(1.2, 0.3, 1)], dict(RECORD)),
    "record": RoundPrivacy(record_level=dict(RECORD)),
    "local": RoundPrivacy(local={3: [LocalRelease(0.5, 0.0, "coordinate", 4)]}),
    "no guarantee": RoundPrivacy([SampledGaussian(1.2, 0.3, 1)], no_guarantee="values in clear"),
    "nothing": RoundPrivacy(),
}


@pytest.mark.parametrize("private_run", [True, False])
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("spent", list(ROUNDS))
def test_the_budget_stop_decides_as_the_full_report_would(spent, accountant, private_run):
    """``would_exceed`` computes only the headline ε (not, e.g., every client's record-level ε
    of a run with client-level noise); it must stop exactly where the full report says so."""
    for rounds_before in (0, 1, 2):
        reported = PrivacyAccountant(accountant, 1e-5, None)
        reported.private_run = private_run
        for _ in range(rounds_before):
            reported.record(ROUNDS[spent])
        after = PrivacyAccountant(accountant, 1e-5, None)
        after.load_state_dict(reported.state_dict())
        after.record(ROUNDS[spent])
        eps = after.report()["privacy/epsilon"]
        finite = eps if 0 < eps < math.inf else 1.0
        for target in (finite * 0.5, finite * 0.999, finite * 1.001, finite * 2 + 0.1):
            acc = PrivacyAccountant(accountant, 1e-5, target)
            acc.load_state_dict(reported.state_dict())
            assert acc.would_exceed(ROUNDS[spent]) == _would_exceed_by_report(acc, ROUNDS[spent]), (
                spent,
                rounds_before,
                target,
            )
