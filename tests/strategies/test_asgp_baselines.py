"""Baselines of the DP-FedASGP paper: cpSGD, FedSMP, local DP-FedAvg, approximate DP-FedSNLC."""

import math

import pytest
import torch

from fl_lightning.privacy.accounting.events import CohortSampling
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.records import ClientUpdate
from fl_lightning.strategies.cpsgd import CPSGD
from fl_lightning.strategies.dp_fedavg_local import DPFedAvgLocal, paper_gaussian_sigma
from fl_lightning.strategies.dp_fedsnlc import DPFedSNLC
from fl_lightning.strategies.fedsmp import FedSMP
from fl_lightning.strategies.spec import FederationSpec, PrivacyTarget
from fl_lightning.testing import round_context
from fl_lightning.utils.rng import generator_for


def ctx(d, cohort=(0, 1, 2), round_idx=0):
    return round_context(
        d,
        cohort,
        num_clients=10,
        round_idx=round_idx,
        total_rounds=10,
        sampling="fixed",
        sample_rate=0.3,
        expected_cohort_size=len(cohort),
    )


def _cpsgd_round(s, xs, c, rep):
    ups = []
    for i, x in enumerate(xs):
        u = ClientUpdate(i, x.clone(), 1, 0.0)
        ups.append(s.process_update(u, c, generator=generator_for(rep, i, "c")))
    delta, metrics = s.aggregate(ups, c, generator=generator_for(rep, "s"))
    assert metrics["epsilon_round"] == s.round_epsilon(len(xs))
    return delta


def test_cpsgd_matches_input_without_noise_with_many_levels():
    d = 100
    xs = [torch.randn(d, generator=generator_for(i, "x")) * 0.05 for i in range(3)]
    s = CPSGD(levels=2**16, trials=0, bound_factor=3.0, clip_norm=10.0)
    s.setup_federation(FederationSpec(num_clients=10, num_parameters=d, seed=0))
    out = _cpsgd_round(s, xs, ctx(d), 0)
    assert torch.allclose(out, sum(xs) / 3, atol=1e-3)  # step ≈ 5e-4


def test_cpsgd_decoded_mean_is_unbiased_with_noise():
    d = 64
    xs = [torch.randn(d, generator=generator_for(i, "x")) * 0.1 for i in range(3)]
    s = CPSGD(levels=4, trials=200, p=0.5, bound_factor=3.0, clip_norm=10.0)
    s.setup_federation(FederationSpec(num_clients=10, num_parameters=d, seed=0))
    c = ctx(d)
    reps = 1500
    acc = torch.zeros(d)
    for r in range(reps):
        acc += _cpsgd_round(s, xs, c, r)
    target = sum(xs) / 3
    # One round: noise sd per coord ≈ step·sqrt(3·m/4)/3; mean of 1500 rounds shrinks it ~39x.
    step = 2 * s.bound / 3
    tol = 5 * step * math.sqrt(3 * 200 / 4) / 3 / math.sqrt(reps)
    assert float((acc / reps - target).abs().max()) < tol


def test_cpsgd_calibrates_trials_and_reports_epsilon():
    s = CPSGD(epsilon=2.0, levels=16)
    s.setup_federation(FederationSpec(num_clients=10, num_parameters=5000, seed=0))
    assert s.trials and s.trials > 0
    assert s.round_epsilon(1) <= 2.0
    # Two (ε, 1e-5) uploads cannot be stated at the run's δ = 1e-5: ε = ∞, saying why.
    acc = PrivacyAccountant(delta=1e-5)
    acc.record(s.round_privacy(ctx(5000)))
    acc.record(s.round_privacy(ctx(5000)))
    report = acc.report()
    assert report["privacy/epsilon"] == math.inf
    assert "past the run's δ" in report["privacy/guarantee"]
    # At a run's δ that covers the uploads' own: basic composition (or tighter) at that δ.
    acc = PrivacyAccountant(delta=1e-4)
    acc.record(s.round_privacy(ctx(5000)))
    acc.record(s.round_privacy(ctx(5000)))
    report = acc.report()
    assert s.round_epsilon(1) < report["privacy/epsilon"] <= 2 * s.round_epsilon(1) * (1 + 1e-9)
    assert ", 0.0001)-DP" in report["privacy/guarantee"]


def _observed(trust: str, rounds: int = 2) -> tuple[PrivacyAccountant, dict[str, float]]:
    s = CPSGD(epsilon=2.0, levels=16, trust=trust)
    s.setup_federation(FederationSpec(num_clients=10, num_parameters=5000, seed=0))
    acc = PrivacyAccountant(delta=1e-4)
    for r in range(rounds):
        acc.record(s.round_privacy(ctx(5000, round_idx=r)))
    return acc, {o.observer.value: o.epsilon for o in acc.observers()}


def test_cpsgd_trust_aggregate_prices_the_server_by_each_upload_alone():
    # the released sum carries three clients' noise; the server receives each upload alone
    acc, seen = _observed("aggregate")
    _, local = _observed("local")
    assert seen["third_party"] == acc.report()["privacy/epsilon"]
    assert seen["third_party"] < seen["server"] == local["server"] == local["third_party"]
    rows = {o.observer.value: o.priced for o in acc.observers()}
    assert "only its own client's noise" in rows["server"]
    # a checkpoint keeps the server's ledger; one written before it kept none prices the
    # server by the ledger it had
    again = PrivacyAccountant(delta=1e-4)
    again.load_state_dict(acc.state_dict())
    assert {o.observer.value: o.epsilon for o in again.observers()} == seen
    old = {k: v for k, v in acc.state_dict().items() if k != "local_seen_by_server"}
    again.load_state_dict(old)
    assert {o.observer.value: o.epsilon for o in again.observers()}["server"] == (
        seen["third_party"]
    )


@pytest.mark.parametrize("sparsifier", ["top_k", "rand_k"])
def test_fedsmp_keeps_exactly_k(sparsifier):
    d = 1000
    s = FedSMP(sparsifier=sparsifier, ratio=0.05, noise_multiplier=0.5, clip_norm=1.0)
    x = torch.randn(d, generator=generator_for(0, "x"))
    out = s.process_update(
        ClientUpdate(0, x.clone(), 1, 0.0), ctx(d), generator=generator_for(1, "n")
    )
    nz = out.delta != 0
    assert int(nz.sum()) == 50
    if sparsifier == "top_k":
        assert set(torch.topk(x.abs(), 50).indices.tolist()) == set(
            nz.nonzero().squeeze(1).tolist()
        )


def test_fedsmp_noise_only_on_kept_and_accounting():
    d = 20_000
    s = FedSMP(sparsifier="rand_k", ratio=0.5, noise_multiplier=1.0, clip_norm=1.0)
    x = torch.zeros(d)
    out = s.process_update(ClientUpdate(0, x, 1, 0.0), ctx(d), generator=generator_for(1, "n"))
    kept = out.delta[out.delta != 0]
    assert kept.numel() == 10_000
    assert float(kept.std()) == pytest.approx(1.0, rel=0.03)
    acc = PrivacyAccountant()
    acc.record(s.round_privacy(ctx(d)))
    assert 0 < acc.report()["privacy/epsilon"] < math.inf
    top = FedSMP(sparsifier="top_k", noise_multiplier=1.0)
    acc2 = PrivacyAccountant()
    acc2.record(top.round_privacy(ctx(d)))
    assert acc2.report()["privacy/guarantee"].startswith("none: FedSMP top_k")


def test_fedsmp_calibrates_sigma():
    s = FedSMP(sparsifier="rand_k")
    sampling = CohortSampling("fixed", 0.1, 100)
    target = PrivacyTarget(epsilon=1.0, delta=1e-5, accountant="rdp", sampling=sampling)
    s.setup_federation(
        FederationSpec(num_clients=100, num_parameters=10, rounds=20, privacy=target)
    )
    assert s.noise_multiplier and s.noise_multiplier > 0


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_dp_fedavg_local_noise_everywhere(noise):
    d = 50_000
    s = DPFedAvgLocal(epsilon=0.5, noise=noise)
    s.setup_federation(FederationSpec(num_clients=10, num_parameters=d, seed=0))
    out = s.process_update(
        ClientUpdate(0, torch.zeros(d), 1, 0.0), ctx(d), generator=generator_for(2, "n")
    )
    assert bool((out.delta != 0).all())
    expected_sd = (
        math.sqrt(2) * 2.0
        if noise == "laplace"
        else paper_gaussian_sigma(epsilon=0.5, sensitivity=1.0)
    )
    assert float(out.delta.std()) == pytest.approx(expected_sd, rel=0.03)
    acc = PrivacyAccountant()
    acc.record(s.round_privacy(ctx(d)))
    assert 0 < acc.report()["privacy/epsilon"] < math.inf


def test_dp_fedsnlc_noises_high_impact_only():
    d = 10_000
    s = DPFedSNLC(epsilon=1.0, significant_fraction=0.2, clip_norm=1e9)
    x = torch.randn(d, generator=generator_for(3, "x"))
    out = s.process_update(
        ClientUpdate(0, x.clone(), 1, 0.0), ctx(d), generator=generator_for(4, "n")
    )
    changed = out.delta != x
    assert int(changed.sum()) == pytest.approx(0.2 * d, abs=2)
    assert float(x[changed].abs().min()) >= float(x[~changed].abs().max())
    acc = PrivacyAccountant()
    acc.record(s.round_privacy(ctx(d)))
    assert math.isinf(acc.report()["privacy/epsilon"])
