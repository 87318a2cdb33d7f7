"""GCFL's server-side correction (Wan et al., Eqs. 11-12, Algorithm 1)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.records import ClientUpdate, RoundContext
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.strategies.gcfl import (
    GCFL,
    cosine_statistics,
    project_published,
    project_sequential,
)
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.testing import round_context


def _ctx(dim: int, cohort: list[int], **client_config) -> RoundContext:
    return round_context(dim, cohort, num_clients=len(cohort), sample_rate=1.0,
                         client_config=client_config)  # fmt: skip


def _updates(deltas: list[torch.Tensor], sizes: list[int] | None = None) -> list[ClientUpdate]:
    sizes = sizes or [10] * len(deltas)
    return [
        ClientUpdate(
            client_id=i, delta=d.clone(), num_examples=n, loss=0.0, metrics={"local_steps": 1.0}
        )
        for i, (d, n) in enumerate(zip(deltas, sizes))
    ]


def test_projection_removes_exactly_the_conflicting_component() -> None:
    g = torch.tensor([1.0, 2.0, -3.0, 0.5])
    r = torch.tensor([-2.0, 1.0, 1.0, 0.0])
    assert torch.dot(g, r) < 0
    out, count, cosines = project_sequential(g, [r], threshold=0.0)
    assert count == 1
    assert cosines[0] == pytest.approx(float(torch.dot(g, r) / (g.norm() * r.norm())))
    assert float(torch.dot(out, r)) == pytest.approx(0.0, abs=1e-6)
    # What was removed is a multiple of r (the component along r), nothing else.
    removed = g - out
    expected = (torch.dot(g, r) / torch.dot(r, r)) * r
    torch.testing.assert_close(removed, expected)


def test_non_conflicting_gradient_untouched() -> None:
    g = torch.tensor([1.0, 2.0, 3.0])
    r = torch.tensor([0.5, -0.1, 0.2])
    assert torch.dot(g, r) > 0
    for project in (project_sequential, project_published):
        out, count, _ = project(g, [r], threshold=0.0)
        assert count == 0
        assert torch.equal(out, g)


def test_threshold_controls_the_test() -> None:
    g = torch.tensor([1.0, 0.0])
    r = torch.tensor([1.0, 1.0])  # cos = 0.707
    assert project_sequential(g, [r], threshold=0.5)[1] == 0
    out, count, _ = project_sequential(g, [r], threshold=0.8)
    assert count == 1
    assert float(torch.dot(out, r)) == pytest.approx(0.0, abs=1e-6)


def test_published_variant_uses_unsquared_norm() -> None:
    g = torch.tensor([1.0, 0.0, 1.0])
    r = torch.tensor([-3.0, 0.0, 1.0])  # ‖r‖ = √10, g·r = −2
    out, count, _ = project_published(g, [r], threshold=0.0)
    assert count == 1
    torch.testing.assert_close(out, g - (-2.0 / math.sqrt(10.0)) * r)
    # Eq. 12 as printed leaves (g·r)(1 − ‖r‖) along r: not orthogonal unless ‖r‖ = 1.
    assert float(torch.dot(out, r)) == pytest.approx(-2.0 * (1 - math.sqrt(10.0)), rel=1e-5)


def test_published_variant_last_conflict_wins() -> None:
    g = torch.tensor([1.0, 1.0])
    r1, r2 = torch.tensor([-1.0, 0.0]), torch.tensor([0.0, -1.0])
    out, count, _ = project_published(g, [r1, r2], threshold=0.0)
    assert count == 2
    torch.testing.assert_close(out, g - (torch.dot(g, r2) / r2.norm()) * r2)


def test_sequential_projection_over_several_references() -> None:
    g = torch.tensor([1.0, 1.0, 0.0])
    r1, r2 = torch.tensor([-1.0, 0.0, 0.0]), torch.tensor([0.0, -1.0, 1.0])
    out, count, _ = project_sequential(g, [r1, r2], threshold=0.0)
    assert count == 2
    # PCGrad: the second projection starts from the first's result.
    step1 = g - (torch.dot(g, r1) / torch.dot(r1, r1)) * r1
    step2 = step1 - (torch.dot(step1, r2) / torch.dot(r2, r2)) * r2
    torch.testing.assert_close(out, step2)
    assert float(torch.dot(out, r2)) == pytest.approx(0.0, abs=1e-6)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(-10, 10), min_size=6, max_size=6),
    st.lists(st.floats(-10, 10), min_size=6, max_size=6),
)
def test_corrected_never_leaves_a_conflict(gv: list[float], rv: list[float]) -> None:
    g, r = torch.tensor(gv, dtype=torch.float64), torch.tensor(rv, dtype=torch.float64)
    if float(r.norm()) < 1e-3 or float(g.norm()) < 1e-3:
        return
    out, count, _ = project_sequential(g, [r], threshold=0.0)
    scale = float(g.norm() * r.norm())
    if count:
        assert abs(float(torch.dot(out, r))) <= 1e-9 * max(1.0, scale)
    else:
        assert torch.equal(out, g) and float(torch.dot(g, r)) >= 0


@pytest.mark.parametrize("variant", ["corrected", "published"])
@pytest.mark.parametrize("weighting", ["num_examples", "uniform"])
def test_identical_gradients_equal_fedavg(variant: str, weighting: str) -> None:
    torch.manual_seed(0)
    d = torch.randn(50)
    deltas, sizes = [d.clone() for _ in range(4)], [5, 10, 20, 40]
    gcfl = GCFL(variant=variant, weighting=weighting)
    fedavg = FedAvg(weighting=weighting)
    ctx = _ctx(50, [0, 1, 2, 3])
    gen = torch.Generator().manual_seed(1)
    got, got_metrics = gcfl.aggregate(_updates(deltas, sizes), ctx, generator=gen)
    want, _ = fedavg.aggregate(_updates(deltas, sizes), ctx, generator=gen)
    torch.testing.assert_close(got, want)
    assert got_metrics["projected"] == 0
    assert got_metrics["mean_cosine"] == pytest.approx(1.0)


def test_aggregate_corrects_against_the_reference_and_weights_by_n() -> None:
    a = torch.tensor([1.0, 0.0])
    b = torch.tensor([-1.0, 1.0])  # cos(a, b) < 0
    gcfl = GCFL(reference_clients=1)
    ctx = _ctx(2, [0, 1])
    gen = torch.Generator().manual_seed(3)
    got, got_metrics = gcfl.aggregate(_updates([a, b], [1, 3]), ctx, generator=gen)
    ref = int(torch.randperm(2, generator=torch.Generator().manual_seed(3))[0])
    g = [a, b]
    other = g[1 - ref]
    corrected = other - (torch.dot(other, g[ref]) / torch.dot(g[ref], g[ref])) * g[ref]
    fixed = [None, None]
    fixed[ref], fixed[1 - ref] = g[ref], corrected
    want = (1 * fixed[0] + 3 * fixed[1]) / 4
    torch.testing.assert_close(got, want)
    assert got_metrics["projected"] == 1
    assert got_metrics["mean_cosine"] == pytest.approx(-1 / math.sqrt(2), rel=1e-5)


def test_reference_choice_follows_the_generator() -> None:
    torch.manual_seed(0)
    deltas = [torch.randn(30) for _ in range(10)]
    ctx = _ctx(30, list(range(10)))
    gcfl = GCFL(reference_clients=3)
    outs = [
        gcfl.aggregate(_updates(deltas), ctx, generator=torch.Generator().manual_seed(s))
        for s in (5, 5, 6)
    ]
    torch.testing.assert_close(outs[0][0], outs[1][0])
    assert not torch.allclose(outs[0][0], outs[2][0])
    assert 0 < outs[2][1]["projected"] <= 7  # references are never projected


def test_per_layer_projection() -> None:
    gcfl = GCFL(granularity="per_layer")
    gcfl.setup_federation(
        FederationSpec(
            num_clients=2, num_parameters=4, layer_slices={"w": slice(0, 2), "b": slice(2, 4)}
        )
    )
    a = torch.tensor([1.0, 0.0, 1.0, 1.0])
    b = torch.tensor([-1.0, 1.0, 2.0, 0.0])  # layer w conflicts, layer b does not
    corrected, stats = gcfl.correct([a, b], generator=torch.Generator().manual_seed(0))
    ref = int(torch.randperm(2, generator=torch.Generator().manual_seed(0))[0])
    other = corrected[1 - ref]
    refv = [a, b][ref]
    assert float(torch.dot(other[:2], refv[:2])) == pytest.approx(0.0, abs=1e-6)
    torch.testing.assert_close(other[2:], [a, b][1 - ref][2:])
    assert stats["projections"] == 1 and stats["projected"] == 1


def test_deltas_are_read_as_gradients_through_local_lr_and_steps() -> None:
    # Published variant is scale-dependent: it must see ĝ = −Δ/(η_l K), not Δ.
    lr, steps = 0.1, 4
    g1, g2 = torch.tensor([1.0, 0.0, 2.0]), torch.tensor([-2.0, 1.0, 0.0])
    updates = _updates([-lr * steps * g1, -lr * steps * g2])
    for u in updates:
        u.metrics["local_steps"] = float(steps)
    gcfl = GCFL(variant="published", weighting="uniform")
    gcfl.setup_federation(
        FederationSpec(num_clients=2, num_parameters=3, local=LocalTrainingConfig(lr=lr))
    )
    got, got_metrics = gcfl.aggregate(updates, _ctx(3, [0, 1]), generator=torch.Generator())
    c1 = project_published(g1, [g2], threshold=0.0)[0]
    c2 = project_published(g2, [g1], threshold=0.0)[0]
    torch.testing.assert_close(got, -lr * steps * (c1 + c2) / 2)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"variant": "paper"}, "strategy.variant"),
        ({"reference_clients": 0}, "strategy.reference_clients"),
        ({"threshold": 2.0}, "strategy.threshold"),
        ({"granularity": "neuron"}, "strategy.granularity"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        GCFL(**kwargs)


def test_cosine_statistics_of_a_round() -> None:
    stats = cosine_statistics([0.5, -0.25, -0.25, 0.0], dims=[100, 400])
    assert stats["mean_cosine"] == pytest.approx(0.0)
    assert stats["abs_cos_mean"] == pytest.approx(0.25)
    assert stats["cos_negative_fraction"] == pytest.approx(0.5)
    want = (math.sqrt(2 / (math.pi * 100)) + math.sqrt(2 / (math.pi * 400))) / 2
    assert stats["abs_cos_noise_only"] == pytest.approx(want)
    empty = cosine_statistics([], dims=[10])
    assert math.isnan(empty["abs_cos_mean"]) and math.isnan(empty["cos_negative_fraction"])


def test_pure_noise_uploads_sit_at_the_noise_only_cosine() -> None:
    """Two independent Gaussian uploads in d dimensions: the logged mean |cos| matches
    sqrt(2/(pi d)) (what the server sees when DP noise swamps the gradients), and about half
    of the pairs fall below 0, so the cos < 0 trigger fires by chance."""
    d, rounds = 4000, 400
    gen = torch.Generator().manual_seed(0)
    gcfl = GCFL(reference_clients=1)
    abs_cos, neg = [], []
    for _ in range(rounds):
        grads = [torch.randn(d, generator=gen) for _ in range(2)]
        _, stats = gcfl.correct(grads, generator=gen)
        abs_cos.append(stats["abs_cos_mean"])
        neg.append(stats["cos_negative_fraction"])
    floor = stats["abs_cos_noise_only"]
    assert floor == pytest.approx(math.sqrt(2 / (math.pi * d)))
    assert sum(abs_cos) / rounds == pytest.approx(floor, rel=0.15)
    assert 0.4 < sum(neg) / rounds < 0.6


def test_aligned_uploads_are_never_projected() -> None:
    """A shared signal much larger than the noise: cos > 0 every round, nothing projected, and
    the aggregate is FedAvg's."""
    gen = torch.Generator().manual_seed(1)
    signal = torch.randn(500, generator=gen)
    gcfl = GCFL(reference_clients=1)
    grads = [signal + 0.1 * torch.randn(500, generator=gen) for _ in range(2)]
    out, stats = gcfl.correct(grads, generator=gen)
    assert stats["projected"] == 0 and stats["cos_negative_fraction"] == 0
    assert stats["abs_cos_mean"] > 0.9
    for a, b in zip(out, grads):
        torch.testing.assert_close(a, b)
