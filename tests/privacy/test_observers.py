"""Every guarantee lists its observers (privacy/guarantee/observers.py, issue 55): the third party
who sees the released models (amplified where the cohorts are secret from it), the server (what the
server-side code receives: ∞ under central DP, each client's sums under SecAgg, priced with
q = 1) and, under SecAgg, another client; the δ reading with P[privacy loss > ε]; the label of
what computed the ε; the distributed budget stop's worst case."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from fl_lightning.privacy.accounting.events import (
    DistributedNoiseEvent,
    RoundPrivacy,
    SampledGaussian,
)
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.privacy.guarantee.observers import Observer, ServerSees, secure_sum_epsilons
from fl_lightning.privacy.guarantee.statement import RunFacts, privacy_statement
from fl_lightning.server.run_files import ledger_of, summary_line
from tests.conftest import REPO

DDG = REPO / "benchmarks" / "results" / "distributed_dp"


def _facts(acc: PrivacyAccountant, **extra) -> RunFacts:
    report = acc.report()
    return RunFacts(
        num_clients=40,
        num_records=4000,
        secure_mode=False,
        accountant_name=acc.accountant_words(),
        epsilon=report["privacy/epsilon"],
        guarantee=report["privacy/guarantee"],
        strategy="S",
        loss_tail=report.get("privacy/loss_tail"),
        **extra,
    )


def _quickstart(accountant: str = "pld", q: float = 0.5) -> PrivacyAccountant:
    acc = PrivacyAccountant(accountant, 1e-5)
    for _ in range(40):
        acc.record(RoundPrivacy(client_level=[SampledGaussian(1.5, q, 1, 0)]))
    return acc


@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
def test_server_epsilon_of_the_stored_run_is_recomputed_from_its_survivor_sets(mechanism):
    """``configs/experiment/distributed_dp/<mechanism>.yaml``'s stored ledger: each client's ε
    against the server, recomputed here client by client from the survivor sets (the rounds it
    was in, each at q = 1: recompute.py's numpy formulas, dp-accounting's RDP conversion),
    agrees with the ledger's table; the mean client is priced above the third party's amplified
    ε (the audit: 19.1-21.2 for a client in 18 sums, 31.0 for one in all 40)."""
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    from fl_lightning.privacy.accounting.recompute import distributed_rows_rdp

    ledger = json.loads((DDG / f"{mechanism}.privacy_ledger.json").read_text())
    rows = ledger["distributed"]
    clients = sorted({c for r in rows for c in r[11]})
    assert len(clients) == 40
    own: dict[int, float] = {}
    for c in clients:
        mine = [[*r[:8], 1.0, *r[9:11]] for r in rows if c in r[11]]
        orders, rdp = distributed_rows_rdp(mine)
        own[c] = compute_epsilon(orders, rdp, ledger["delta"])[0]
    table = {row["observer"]: row for row in ledger["observers"]}
    server, third = table["server"], table["third_party"]
    assert server["epsilon"] == pytest.approx(max(own.values()), rel=1e-3)
    assert server["epsilon_mean"] == pytest.approx(np.mean(list(own.values())), rel=1e-3)
    # no amplification: the mean client already costs more than the third party's ε, the
    # worst client much more, and a client in every sum more still (31.0, the audit's figure)
    assert third["epsilon"] < server["epsilon_mean"] < server["epsilon"]
    every = [[*r[:8], 1.0, *r[9:11]] for r in rows]
    orders, rdp = distributed_rows_rdp(every)
    assert compute_epsilon(orders, rdp, ledger["delta"])[0] == pytest.approx(31.0, abs=0.05)
    assert table["client"]["epsilon"] == server["epsilon"]
    sums = [sum(c in r[11] for r in rows) for c in clients]
    assert server["sums_mean"] == pytest.approx(np.mean(sums))
    events = [DistributedNoiseEvent.from_state(r) for r in rows]
    per_client = secure_sum_epsilons(events, ledger["delta"])
    assert per_client.epsilon == pytest.approx(own, rel=1e-3)


def test_secure_sum_members_are_the_sums_a_client_was_in():
    base = DistributedNoiseEvent("ddg", 1.0, 50.0, 300.0, 3, 64, 0.6, 16, 0.5, False, 4)
    events = [
        dataclasses.replace(base, members=(0, 1, 2)),
        dataclasses.replace(base, members=(0, 1, 3)),
        dataclasses.replace(base, members=(0, 2, 3)),
    ]
    per_client = secure_sum_epsilons(events, 1e-5)
    assert per_client.sums == {0: 3, 1: 2, 2: 2, 3: 2}
    assert per_client.worst == 0 and per_client.epsilon[0] > per_client.epsilon[1]
    assert per_client.epsilon[1] == pytest.approx(per_client.epsilon[3])
    assert DistributedNoiseEvent.from_state(events[0].to_state()).members == (0, 1, 2)
    old = [DistributedNoiseEvent.from_state(e.to_state()[:11]) for e in events]
    assert old[0].members == ()  # a ledger written before survivor sets: every sum counts
    assert secure_sum_epsilons(old, 1e-5).epsilon == {-1: per_client.epsilon[0]}


def test_central_dp_names_its_observer_and_has_no_finite_epsilon_against_the_server():
    acc = _quickstart()
    rows = acc.observers()
    assert [r.observer for r in rows] == [Observer.THIRD_PARTY, Observer.SERVER]
    assert rows[0].epsilon == acc.epsilon and "Poisson cohorts (q = 0.5)" in rows[0].priced
    assert math.isinf(rows[1].epsilon) and "clipped update before the noise" in rows[1].receives
    report = acc.report()
    line = summary_line({"rounds": 40, **report}, {"accuracy": 0.5})
    assert "ε = 12.353 (δ = 1e-05) against a third party; guarantee: client-level" in line
    assert "; against the server: ε = ∞ (central DP: it receives the clipped updates and " in line
    text = privacy_statement(ledger_of(acc), _facts(acc))
    assert "## Who observes what" in text and "| the server |" in text
    assert "against the server, which receives the cohorts and each client's clipped" in text


def test_client_side_noise_is_priced_without_amplification_against_the_server():
    acc = _quickstart("rdp")
    acc.server_view = ServerSees.NOISED_UPLOADS
    server = acc.observers()[1]
    from fl_lightning.privacy.accounting.analysis import epsilon

    assert server.epsilon == pytest.approx(epsilon([SampledGaussian(1.5, 1.0, 40)], 1e-5, "rdp"))
    assert server.epsilon > acc.epsilon
    restored = PrivacyAccountant("rdp", 1e-5)
    restored.load_state_dict(acc.state_dict())
    assert restored.server_view == ServerSees.NOISED_UPLOADS


def test_record_and_local_levels_give_the_server_the_clients_epsilon():
    acc = PrivacyAccountant("rdp", 1e-5)
    acc.record(RoundPrivacy(record_level={0: [SampledGaussian(1.0, 0.1, 10)]}))
    third, server = acc.observers()
    assert server.epsilon == third.epsilon == acc.epsilon
    assert "DP-SGD" in server.receives


def test_loss_tail_is_the_pld_probability_that_the_loss_exceeds_epsilon():
    """The quickstart: (12.35, 1e-5)-DP, and the privacy loss exceeds 12.35 with probability
    2.6e-5 (the audit's figure), recomputed here from dp-accounting's PLD of the same event."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    acc = _quickstart()
    report = acc.report()
    pld = pld_lib.from_gaussian_mechanism(
        1.5, sampling_prob=0.5, value_discretization_interval=1e-3
    ).self_compose(40)
    eps = report["privacy/epsilon"]
    tails = []
    for pmf in (pld._pmf_remove, pld._pmf_add):
        dense = pmf.to_dense_pmf()
        losses = (dense._lower_loss + np.arange(dense._probs.size)) * dense._discretization
        tails.append(dense._probs[losses > eps].sum() + dense._infinity_mass)
    assert report["privacy/loss_tail"] == pytest.approx(max(tails), rel=1e-6)
    assert report["privacy/loss_tail"] == pytest.approx(2.6e-5, abs=0.1e-5)
    assert report["privacy/loss_tail"] > acc.delta  # δ is not that probability
    text = privacy_statement(ledger_of(acc), _facts(acc))
    assert "plus at most δ = 1e-05: the probability of any outcome changes" in text
    assert "the privacy loss exceeds ε with probability 2.6e-05 (2.6·δ)" in text
    assert "fails with probability" not in text
    assert "privacy/loss_tail" not in _quickstart("rdp").report()


def test_accountant_label_names_what_computed_the_number():
    """q = 1 on ``prv``: the ε is the closed-form exact Gaussian of the composed multiplier
    (``analysis.epsilon`` takes that path), so it is labelled as such, not as Opacus' PRV, whose
    own figure differs (the audit: 2.2581 printed, 2.2683 Opacus')."""
    from fl_lightning.privacy.accounting.analysis import (
        EXACT_GAUSSIAN,
        effective_gaussian,
        gaussian_epsilon,
    )

    acc = _quickstart("prv", q=1.0)
    guarantee = acc.report()["privacy/guarantee"]
    assert EXACT_GAUSSIAN in guarantee and "PRV accountant (Opacus)" not in guarantee
    sigma = effective_gaussian(((1.5, 1.0, 40, 0),))
    assert acc.epsilon == gaussian_epsilon(sigma, 1e-5)
    assert acc.accountant_words() == EXACT_GAUSSIAN
    sampled = _quickstart("prv", q=0.5)
    assert "PRV accountant (Opacus)" in sampled.report()["privacy/guarantee"]
    assert _quickstart("rdp", q=1.0).accountant_words() == "RDP accountant (Opacus)"


def test_budget_stop_worst_case_is_one_more_round_with_the_fewest_survivors():
    from fl_lightning.privacy.distributed.accounting import distributed_epsilon

    events = [
        DistributedNoiseEvent.from_state(r)
        for r in json.loads((DDG / "ddg.privacy_ledger.json").read_text())["distributed"]
    ]
    acc = PrivacyAccountant("pld", 1e-5)
    acc.server_view = ServerSees.SECURE_SUM
    acc.record(RoundPrivacy(distributed=events[:10]))
    worst = acc.one_more_round(2)
    assert worst == pytest.approx(
        distributed_epsilon([*events[:10], dataclasses.replace(events[9], survivors=2)], 1e-5)
    )
    assert worst > distributed_epsilon(events[:11], 1e-5)
    text = privacy_statement(ledger_of(acc), _facts(acc, one_more_round=(2, worst)))
    assert "exact here only because the simulation knows each round's survivors" in text
    assert (
        "one more round with 2 survivors (the fewest SecAgg accepts), which would take ε from "
        f"{acc.epsilon:.4g} to {worst:.4g}" in text
    )
    docs = (REPO / "docs" / "distributed_dp.md").read_text()
    assert "never overshoots" not in docs and "simulated survivors" in docs
