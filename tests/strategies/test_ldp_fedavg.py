"""LDPFedAvg: privatised model upload, unweighted mean, privacy statement (paper 003, Alg. 1)."""

from __future__ import annotations

import math

import pytest
import torch

from fl_lightning.privacy.accounting.events import LocalRelease
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.ldp_fedavg import LDPFedAvg
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.testing import round_context


def _ctx(global_params: torch.Tensor, cohort=(0, 1, 2)) -> RoundContext:
    return round_context(global_params, cohort, num_clients=5, sample_rate=0.6,
                         expected_cohort_size=3.0)  # fmt: skip


def _updates(strategy, ctx, locals_):
    out = []
    for cid, local in enumerate(locals_):
        u = ClientUpdate(
            client_id=cid, delta=local - ctx.global_params, num_examples=10 * (cid + 1), loss=0.0
        )
        g = torch.Generator().manual_seed(cid)
        out.append(strategy.process_update(u, ctx, generator=g))
    return out


def test_nodp_is_unweighted_mean_of_models():
    s = LDPFedAvg(mechanism="none")
    g = torch.zeros(4)
    ctx = _ctx(g)
    locals_ = [torch.full((4,), float(i)) for i in range(3)]
    agg, metrics = s.aggregate(_updates(s, ctx, locals_), ctx, generator=torch.Generator())
    assert torch.allclose(g + agg, torch.full((4,), 1.0))  # not weighted by n_i (would be 4/3)


@pytest.mark.parametrize("variant", ["debiased", "unbiased_c"])
def test_spm_model_upload_mean_is_unbiased(variant):
    s = LDPFedAvg(mechanism="spm", epsilon=1.5, variant=variant)
    d = 200_000
    g = torch.full((d,), 0.3)
    ctx = _ctx(g)
    local = torch.full((d,), 0.5)
    agg, metrics = s.aggregate(
        _updates(s, ctx, [local, local, local]), ctx, generator=torch.Generator()
    )
    new = g + agg
    se = math.sqrt(float(s.mechanism.variance(0.5)) / (3 * d))
    assert abs(float(new.mean()) - 0.5) < 5 * se
    # each privatised model keeps |w| within [s|w|, sC|w|]: the uploads reveal the magnitude
    u = _updates(s, ctx, [local])[0]
    up = (u.delta + g).abs()
    lo, hi = s.mechanism.magnitude_support(0.5)
    assert float(up.min()) >= float(lo) - 1e-6 and float(up.max()) <= float(hi) + 1e-6


def test_published_spm_shrinks_the_model():
    s = LDPFedAvg(mechanism="spm", epsilon=0.6, variant="published")
    d = 200_000
    g = torch.zeros(d)
    ctx = _ctx(g, cohort=(0,))
    u = _updates(s, ctx, [torch.full((d,), 1.0)])[0]
    shrink = math.exp(0.6) / (math.exp(0.6) + 1)
    assert float((u.delta + g).mean()) == pytest.approx(shrink, abs=0.02)


def test_clip_range_and_update_upload():
    s = LDPFedAvg(mechanism="duchi", epsilon=1.0, upload="update", clip_bound=0.1)
    g = torch.full((1000,), 5.0)
    ctx = _ctx(g)
    u = _updates(s, ctx, [g + 0.05])[0]
    b = 0.1 * s.mechanism.bound
    assert torch.allclose(u.delta.abs(), torch.full((1000,), b), rtol=1e-5)


def test_ldp_fl_adaptive_global_range():
    s = LDPFedAvg(mechanism="ldp_fl", epsilon=1.0, range_margin=1.0)
    g = torch.linspace(-0.2, 0.6, 1000)
    ctx = _ctx(g)
    u = _updates(s, ctx, [g.clone()])[0]
    vals = torch.unique((u.delta + g).round(decimals=5))
    centre, radius = 0.2, 0.4
    expect = sorted([centre - radius * s.mechanism.bound, centre + radius * s.mechanism.bound])
    assert vals.tolist() == pytest.approx(expect, abs=1e-4)
    assert s.no_guarantee_reason() is None


def test_privacy_statement():
    s = LDPFedAvg(mechanism="pm", epsilon=0.3)
    s.setup_federation(FederationSpec(num_clients=5, num_parameters=1000, seed=0))
    ctx = _ctx(torch.zeros(1000), cohort=(1, 3))
    rp = s.round_privacy(ctx)
    assert rp.local == {c: [LocalRelease(0.3, 0.0, "coordinate", 1000)] for c in (1, 3)}
    assert rp.no_guarantee is None
    s.after_round(ctx, torch.zeros(1000))
    metrics = s.after_round(ctx, torch.zeros(1000))
    assert metrics["epsilon_per_report"] == pytest.approx(300.0)
    assert metrics["epsilon_total"] == pytest.approx(600.0)
    spm = LDPFedAvg(mechanism="spm", epsilon=0.3)
    reason = spm.round_privacy(ctx).no_guarantee
    assert reason and "only the sign" in reason and "6.717" in reason
    assert LDPFedAvg(mechanism="pm", input_range="scale").no_guarantee_reason()
    assert LDPFedAvg(mechanism="none").round_privacy(ctx).local == {}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"mechanism": "foo"}, "strategy.mechanism"),
        ({"epsilon": 0.0}, "strategy.epsilon"),
        ({"upload": "grads"}, "strategy.upload"),
        ({"input_range": "foo", "mechanism": "pm"}, "strategy.input_range"),
        ({"mechanism": "ldp_fl", "upload": "update"}, "strategy.range_source"),
        ({"mechanism": "pm", "clip_bound": -1.0}, "strategy.clip_bound"),
    ],
)
def test_bad_config(kwargs, field):
    with pytest.raises(ValueError, match=field):
        LDPFedAvg(**kwargs)
