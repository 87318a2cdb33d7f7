"""Adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy 2021) as a central-DP plug-in."""

from __future__ import annotations

import math

import dp_accounting
import pytest
import torch

from fl_lightning.privacy.accounting.events import CohortSampling, SampledGaussian
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.adaptive_clipping import AdaptiveClipping, sum_noise_multiplier
from fl_lightning.strategies.central_dp import CentralGaussian
from fl_lightning.strategies.dp_fedprox import DPFedProx
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.strategies.placement import CentralPrivacy
from fl_lightning.strategies.spec import FederationSpec, PrivacyTarget
from fl_lightning.testing import round_context


def _ctx(d: int, m: int, n: int = 1000, mode: str = "poisson", round_idx: int = 0):
    return round_context(d, range(m), num_clients=n, round_idx=round_idx, sampling=mode)


def _updates(norms: torch.Tensor, d: int, gen: torch.Generator) -> list[ClientUpdate]:
    """Clients whose deltas point in random directions with the given L2 norms."""
    out = []
    for i, norm in enumerate(norms.tolist()):
        v = torch.randn(d, generator=gen)
        out.append(ClientUpdate(client_id=i, delta=v * (norm / v.norm()), num_examples=1, loss=0))
    return out


def _round(strategy: FedAvg, norms: torch.Tensor, ctx: RoundContext, seed: int):
    gen = torch.Generator().manual_seed(seed)
    updates = _updates(norms, ctx.global_params.numel(), gen)
    updates = [strategy.process_update(u, ctx, generator=gen) for u in updates]
    return strategy.aggregate(updates, ctx, generator=torch.Generator().manual_seed(10_000 + seed))


def test_sum_multiplier_is_the_papers_split():
    """σ_Δ = (σ⁻² − (2σ_b)⁻²)^(−1/2), so that σ_Δ⁻² + (2σ_b)⁻² = σ⁻² (Sec. 3)."""
    sigma, sigma_b = 1.0, 5.0
    s_delta = sum_noise_multiplier(sigma, sigma_b)
    assert s_delta == pytest.approx((1.0 - 1.0 / 100.0) ** -0.5, rel=1e-12)
    assert s_delta**-2 + (2 * sigma_b) ** -2 == pytest.approx(sigma**-2, rel=1e-12)
    assert sum_noise_multiplier(0.0, 1.0) == 0.0
    with pytest.raises(ValueError, match="count_noise_std: must be > noise_multiplier / 2"):
        sum_noise_multiplier(1.0, 0.5)


def test_bad_settings_are_refused_with_the_field():
    for kwargs, field in [
        ({"clip_norm": 0.0}, "clip_norm"),
        ({"target_quantile": 1.0}, "target_quantile"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"noise_multiplier": -1.0}, "noise_multiplier"),
        ({"count_noise_std": 0.0}, "count_noise_std"),
    ]:
        with pytest.raises(ValueError, match=f"strategy.central_dp.{field}"):
            AdaptiveClipping(**kwargs)


@pytest.mark.parametrize("mode", ["poisson", "fixed"])
def test_the_rounds_event_is_the_effective_sigma_gaussian(mode):
    """The round's event is DP-FedAvg's at the effective σ, and that σ is what dp_accounting
    gives for the two Gaussians it adds (the sum at σ_Δ, sensitivity C; the centred count at
    σ_b, sensitivity ½, i.e. multiplier 2σ_b) composed on the same cohort."""
    sigma, sigma_b = 0.8, 3.0
    mech = AdaptiveClipping(noise_multiplier=sigma, count_noise_std=sigma_b)
    ctx = _ctx(4, 50, mode=mode)
    assert mech.round_privacy(ctx).client_level == [
        SampledGaussian.for_cohort(sigma, ctx.cohort_sampling())
    ]
    fixed = CentralGaussian(clip_norm=1.0, noise_multiplier=sigma)
    assert mech.round_privacy(ctx).client_level == fixed.round_privacy(ctx).client_level

    parts = dp_accounting.ComposedDpEvent(
        [
            dp_accounting.GaussianDpEvent(mech.sum_noise_multiplier),
            dp_accounting.GaussianDpEvent(2 * sigma_b),
        ]
    )
    joint = dp_accounting.GaussianDpEvent(sigma)
    for make in (dp_accounting.rdp.RdpAccountant, dp_accounting.pld.PLDAccountant):
        eps_parts = make().compose(parts).get_epsilon(1e-5)
        eps_joint = make().compose(joint).get_epsilon(1e-5)
        assert eps_parts == pytest.approx(eps_joint, rel=2e-3)
    # Spending only the sum's noise would be cheaper: the count is not free.
    alone = dp_accounting.rdp.RdpAccountant().compose(
        dp_accounting.GaussianDpEvent(mech.sum_noise_multiplier)
    )
    assert alone.get_epsilon(1e-5) < dp_accounting.rdp.RdpAccountant().compose(joint).get_epsilon(
        1e-5
    )


def test_the_noise_has_the_split_stds():
    """Zero updates: the mean's noise has std σ_Δ·C/m per coordinate, the count's σ_b/m."""
    m, sigma, sigma_b, clip = 10, 1.2, 2.0, 0.3
    mech = AdaptiveClipping(clip_norm=clip, noise_multiplier=sigma, count_noise_std=sigma_b)
    s = FedAvg(weighting="uniform", central_dp=mech)
    counts = []
    for r, d in enumerate([100_000] + [1] * 400):
        ctx = _ctx(d, m)
        zeros = [ClientUpdate(i, torch.zeros(d), num_examples=1, loss=0) for i in range(m)]
        mech.clip_norm = clip
        agg, metrics = s.aggregate(
            [s.process_update(u, ctx, generator=None) for u in zeros],
            ctx,
            generator=torch.Generator().manual_seed(r),
        )
        if r == 0:
            want = mech.sum_noise_multiplier * clip / m
            assert float(agg.std()) == pytest.approx(want, rel=0.02)
            assert metrics["clip_norm"] == pytest.approx(clip)
        else:
            counts.append(metrics["unclipped_fraction"])
    b = torch.tensor(counts, dtype=torch.float64)
    # Every zero update is unclipped: b̃ = 1 + N(0, (σ_b/m)²); std of a 400-sample std ≈ 3.5 %.
    assert float(b.mean()) == pytest.approx(1.0, abs=4 * sigma_b / m / 20)
    assert float(b.std()) == pytest.approx(sigma_b / m, rel=0.15)


@pytest.mark.parametrize(("gamma", "start"), [(0.5, 0.01), (0.5, 50.0), (0.8, 1.0)])
def test_clip_converges_to_the_target_quantile(gamma, start):
    """A stream of lognormal update norms (median 1): the clip walks geometrically to the
    γ-quantile and then stays within the band the noisy count allows. The count b̃ has std
    s = √(γ(1−γ)/m + (σ_b/m)²) a round; near the quantile a step moves the unclipped fraction by
    about η·f·C·(b̃−γ) with f the norm density there, so it tracks γ with a spread of order s."""
    torch.manual_seed(0)
    d, m, rounds, eta = 2, 100, 300, 0.2
    mech = AdaptiveClipping(
        clip_norm=start, target_quantile=gamma, learning_rate=eta, noise_multiplier=1.0
    )
    s = FedAvg(weighting="uniform", central_dp=mech)
    spec = FederationSpec(
        num_clients=1000,
        num_parameters=d,
        privacy=PrivacyTarget(sampling=CohortSampling("poisson", m / 1000, 1000)),
    )
    s.setup_federation(spec)
    assert mech.count_noise_std == pytest.approx(m / 20)  # the paper's default σ_b
    dist = torch.distributions.LogNormal(0.0, 0.5)
    clips = []
    for r in range(rounds):
        norms = dist.sample((m,))
        _round(s, norms, _ctx(d, m, round_idx=r), seed=r)
        clips.append(mech.clip_norm)
    quantile = math.exp(0.5 * torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(gamma)).item())
    fractions = [float(dist.cdf(torch.tensor(c))) for c in clips[150:]]
    spread = math.sqrt(gamma * (1 - gamma) / m + (mech.count_noise_std / m) ** 2)
    mean_fraction = sum(fractions) / len(fractions)
    assert mean_fraction == pytest.approx(gamma, abs=spread)
    assert max(abs(f - gamma) for f in fractions) < 4 * spread
    geo_mean = math.exp(sum(math.log(c) for c in clips[150:]) / len(clips[150:]))
    assert geo_mean == pytest.approx(quantile, rel=0.1)


def test_clip_value_is_checkpointed_and_resumes_exactly():
    """Strategy.state_dict holds the clip; a strategy loaded from it continues bit for bit."""
    d, m = 16, 20

    def make() -> tuple[DPFedProx, AdaptiveClipping]:
        mech = AdaptiveClipping(clip_norm=0.05, noise_multiplier=1.0, count_noise_std=2.0)
        return DPFedProx(weighting="uniform", central_dp=mech), mech

    def norms(r: int) -> torch.Tensor:
        return torch.rand(m, generator=torch.Generator().manual_seed(r)) * 2

    straight, mech = make()
    results = [_round(straight, norms(r), _ctx(d, m, round_idx=r), seed=r)[0] for r in range(6)]

    first, mech_first = make()
    for r in range(3):
        _round(first, norms(r), _ctx(d, m, round_idx=r), seed=r)
    state = first.state_dict()
    assert state["central_dp"]["clip_norm"] == mech_first.clip_norm != 0.05
    resumed, mech_resumed = make()
    resumed.load_state_dict(state)
    for r in range(3, 6):
        agg, _ = _round(resumed, norms(r), _ctx(d, m, round_idx=r), seed=r)
        assert torch.equal(agg, results[r])
    assert mech_resumed.clip_norm == mech.clip_norm


def test_it_plugs_into_any_summing_strategy_from_config():
    """The central slot takes any CentralPrivacy: the config form of the issue parses."""
    from jsonargparse import ArgumentParser

    parser = ArgumentParser()
    parser.add_subclass_arguments(FedAvg, "strategy")
    cfg = parser.parse_object(
        {
            "strategy": {
                "class_path": "fl_lightning.strategies.fedavg.FedAvg",
                "init_args": {
                    "weighting": "uniform",
                    "central_dp": {
                        "class_path": "fl_lightning.strategies.adaptive_clipping.AdaptiveClipping",
                        "init_args": {"target_quantile": 0.5},
                    },
                },
            }
        }
    )
    strategy = parser.instantiate_classes(cfg).strategy
    assert isinstance(strategy.central_dp, AdaptiveClipping)
    assert isinstance(strategy.central_dp, CentralPrivacy)
    assert strategy.traits.private and strategy.traits.amplified_by_sampling


def test_a_small_cohorts_count_noise_defaults_to_sigma():
    """m/20 (the paper's σ_b) would leave a cohort of 2 no budget for the sum at σ = 1: the
    default is then σ, and the sum's multiplier σ/√(3/4)."""
    mech = AdaptiveClipping(noise_multiplier=1.0)
    sampling = CohortSampling("poisson", 2 / 400, 400)
    mech.setup(FederationSpec(400, 4, privacy=PrivacyTarget(sampling=sampling)))
    assert mech.count_noise_std == 1.0
    assert mech.sum_noise_multiplier == pytest.approx(1 / math.sqrt(0.75), rel=1e-12)
    with pytest.raises(ValueError, match="count_noise_std: must be > noise_multiplier / 2"):
        AdaptiveClipping(noise_multiplier=1.0, count_noise_std=0.4).setup(
            FederationSpec(400, 4, privacy=PrivacyTarget(sampling=sampling))
        )
