"""DP-FTRL's matrix mechanisms (privacy/correlated/matrix_mechanism.py, strategies/dp_ftrl.py): the
factorisations, their sensitivity against a brute force, the streamed noise's covariance against
B·Bᵀ, tree aggregation against Kairouz et al.'s variance, C = I against independent noise, and
resuming the noise mid-run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fl_lightning.privacy.accounting.analysis import epsilon
from fl_lightning.privacy.accounting.events import CohortSampling, SampledGaussian
from fl_lightning.privacy.correlated.matrix_mechanism import (
    StreamingNoise,
    brute_force_sensitivity,
    count_patterns,
    factorization,
    min_sep_sensitivity,
    participation_patterns,
    prefix_sum_matrix,
    sqrt_coefficients,
)
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.records import RoundContext
from fl_lightning.strategies.dp_ftrl import DPFTRL
from fl_lightning.strategies.spec import FederationSpec, PrivacyTarget
from fl_lightning.testing import round_context

KINDS = ("bsr", "tree", "identity")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 5, 8, 13])
def test_factorisations_reproduce_the_prefix_sum_workload(kind, n):
    b, c = factorization(kind, n, bands=3)
    np.testing.assert_allclose(b @ c, prefix_sum_matrix(n), atol=1e-10)


def test_banded_square_root_coefficients_square_to_the_prefix_sums():
    """c_j = binom(2j, j)/4^j (Kalinin & Lampert 2024): the full (p = n) Toeplitz matrix is √A."""
    n = 12
    c = sqrt_coefficients(n)
    assert c[:4] == pytest.approx([1.0, 0.5, 0.375, 0.3125])
    assert c[7] == pytest.approx(math.comb(14, 7) / 4**7)
    _, full = factorization("bsr", n, bands=n)
    np.testing.assert_allclose(full @ full, prefix_sum_matrix(n), atol=1e-12)


def test_pattern_count_matches_the_enumeration():
    for n, k, b in [(8, 3, 2), (10, 2, 3), (6, 6, 1), (12, 4, 5)]:
        patterns = list(participation_patterns(n, k, b))
        assert len(patterns) == len(set(patterns)) == count_patterns(n, k, b)
        assert all(all(q - p >= b for p, q in zip(s, s[1:])) for s in patterns)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("n", "k", "b"), [(6, 1, 1), (9, 2, 3), (12, 3, 4), (10, 4, 2), (8, 8, 1)])
def test_sensitivity_equals_brute_force_and_the_bound_dominates_it(kind, n, k, b):
    _, c = factorization(kind, n, bands=3)
    truth = brute_force_sensitivity(c, k, b)
    exact, is_exact = min_sep_sensitivity(c, k, b)
    assert is_exact and exact == pytest.approx(truth, rel=1e-12)
    bound, bound_exact = min_sep_sensitivity(c, k, b, max_patterns=0)
    assert bound >= truth - 1e-12
    if bound_exact:  # claimed exact only when CᵀC vanishes b or more apart
        assert bound == pytest.approx(truth, rel=1e-12)
    if kind in ("bsr", "identity") and b >= 3:
        assert bound_exact


def test_banded_sensitivity_with_separation_at_least_the_bands_is_root_k_column_norms():
    """Columns b ≥ p apart do not overlap: Δ² is the sum of the k first column norms²."""
    n, p, k = 40, 4, 5
    _, c = factorization("bsr", n, bands=p)
    delta, exact = min_sep_sensitivity(c, k, 8, max_patterns=0)
    assert exact
    assert delta == pytest.approx(math.sqrt(k * float(np.sum(sqrt_coefficients(p) ** 2))))


def _stream(
    kind: str, n: int, d: int, *, bands: int = 1, seed: int = 3, estimator: str = "honaker"
) -> torch.Tensor:
    noise = StreamingNoise(kind, seed=seed, bands=bands, estimator=estimator)
    return torch.stack([noise.next(t, d) for t in range(n)]).double()


@pytest.mark.parametrize(("kind", "bands"), [("bsr", 3), ("bsr", 12), ("tree", 1), ("identity", 1)])
def test_streamed_noise_covariance_matches_b_b_transposed(kind, bands):
    """The prefix sums of the streamed w_t are B·z: their covariance over d independent
    coordinates (Monte Carlo) matches B·Bᵀ."""
    n, d = 12, 60_000
    prefix = torch.cumsum(_stream(kind, n, d, bands=bands), dim=0).numpy()
    b, _ = factorization(kind, n, bands=bands)
    expected = b @ b.T
    realised = prefix @ prefix.T / d
    # each entry's Monte Carlo std is about sqrt((Σ_ii Σ_jj + Σ_ij²)/d) ≤ sqrt(2/d)·max Σ
    np.testing.assert_allclose(realised, expected, atol=6 * math.sqrt(2 / d) * expected.max())


def test_tree_prefix_noise_variance_is_popcount_times_sigma_squared():
    """Kairouz et al. 2021, Sec. 3: the prefix sum of t rounds adds one node noise per set bit
    of t (the plain estimator)."""
    n = 16
    b, _ = factorization("tree", n, estimator="plain")
    variance = np.sum(b * b, axis=1)
    assert variance.tolist() == [bin(t).count("1") for t in range(1, n + 1)]
    prefix = torch.cumsum(_stream("tree", n, 60_000, estimator="plain"), dim=0)
    realised = prefix.var(dim=1).numpy()
    np.testing.assert_allclose(realised, variance, rtol=0.05)


def test_identity_is_independent_noise_and_k_gaussian_steps():
    """C = I: independent N(0, σ²) every round (no correlation), and the one event of
    multiplier σ/√k has the ε of k Gaussian steps of multiplier σ (DP-SGD without
    amplification)."""
    n, d = 10, 40_000
    w = _stream("identity", n, d).numpy()
    np.testing.assert_allclose(w @ w.T / d, np.eye(n), atol=6 * math.sqrt(2 / d))
    k, b = 5, 2
    _, c = factorization("identity", n)
    delta_c, exact = min_sep_sensitivity(c, k, b)
    assert exact and delta_c == pytest.approx(math.sqrt(k))
    sigma = 2.0
    for backend in ("rdp", "pld"):
        one = epsilon([SampledGaussian(sigma / delta_c, 1.0)], 1e-5, backend)
        steps = epsilon([SampledGaussian(sigma, 1.0, k)], 1e-5, backend)
        assert one == pytest.approx(steps, rel=2e-2)


@pytest.mark.parametrize(("kind", "bands"), [("bsr", 4), ("tree", 1)])
def test_noise_resumed_from_its_state_mid_run_is_identical(kind, bands):
    d = 50
    straight = _stream(kind, 10, d, bands=bands)
    first = StreamingNoise(kind, seed=3, bands=bands)
    head = [first.next(t, d) for t in range(4)]
    second = StreamingNoise(kind, seed=3, bands=bands)
    second.load_state_dict(first.state_dict())
    tail = [second.next(t, d) for t in range(4, 10)]
    torch.testing.assert_close(torch.stack(head + tail).double(), straight, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="round 3 asked, round 10 expected"):
        second.next(3, d)


def _spec(*, n=20, m=5, rounds=12, mode="cyclic", target=None, accountant="rdp"):
    sampling = CohortSampling(mode, m / n, n)
    privacy = PrivacyTarget(epsilon=target, accountant=accountant, sampling=sampling)
    return FederationSpec(num_clients=n, num_parameters=7, rounds=rounds, seed=1, privacy=privacy)


def _ctx(round_idx: int, d: int = 7) -> RoundContext:
    return round_context(d, range(5), round_idx=round_idx, total_rounds=12, seed=1,
                         sampling=CohortSampling("cyclic", 0.25, 20))  # fmt: skip


@pytest.mark.parametrize("mode", ["fixed", "poisson"])
def test_sampling_that_cannot_guarantee_separation_is_refused(mode):
    with pytest.raises(
        ValueError,
        match=r"^model\.sampling: DPFTRL needs .* use model.sampling: cyclic or cyclic_poisson$",
    ):
        DPFTRL().setup_federation(_spec(mode=mode))


def test_one_gaussian_event_for_the_whole_run_with_its_sentence():
    s = DPFTRL(noise_multiplier=3.0, factorization="bsr")
    s.setup_federation(_spec())
    assert (s.separation, s.participations, s.bands) == (4, 3, 4)
    assert s.sensitivity == pytest.approx(math.sqrt(3 * np.sum(sqrt_coefficients(4) ** 2)))
    events = s.round_privacy(_ctx(0)).client_level
    assert len(events) == 1 and events[0].noise_multiplier == pytest.approx(3.0 / s.sensitivity)
    assert s.round_privacy(_ctx(1)).client_level == []
    acc = PrivacyAccountant("rdp", 1e-5)
    acc.record(s.round_privacy(_ctx(0)))
    report = acc.report()
    assert report["privacy/epsilon"] == pytest.approx(
        epsilon([SampledGaussian(3.0 / s.sensitivity, 1.0)], 1e-5, "rdp")
    )
    assert "3 participations ≥ 4 rounds apart" in report["privacy/guarantee"]
    assert "matrix mechanism (BSR, p = 4" in report["privacy/guarantee"]
    restored = PrivacyAccountant("rdp", 1e-5)
    restored.load_state_dict(acc.state_dict())
    assert restored.report()["privacy/guarantee"] == report["privacy/guarantee"]


@pytest.mark.parametrize("accountant", ["rdp", "pld", "prv"])
def test_sigma_calibrated_to_the_target_on_every_accountant(accountant):
    s = DPFTRL(noise_multiplier=None, factorization="tree")
    s.setup_federation(_spec(target=4.0, accountant=accountant))
    eps = epsilon([SampledGaussian(s.multiplier, 1.0)], 1e-5, accountant)
    assert 3.8 < eps <= 4.0


def test_strategy_noise_resumes_from_its_checkpoint():
    """Rounds 0-2, checkpoint, a fresh strategy restored from it, rounds 3-5: the same releases
    as rounds 0-5 in one go."""

    def release(s: DPFTRL, t: int) -> torch.Tensor:
        return s.finalize(torch.ones(7), _ctx(t), generator=torch.Generator())[0]

    straight = DPFTRL(noise_multiplier=1.0)
    straight.setup_federation(_spec())
    expected = [release(straight, t) for t in range(6)]
    first = DPFTRL(noise_multiplier=1.0)
    first.setup_federation(_spec())
    got = [release(first, t) for t in range(3)]
    resumed = DPFTRL(noise_multiplier=1.0)
    resumed.load_state_dict(first.state_dict())
    resumed.setup_federation(_spec())
    got += [release(resumed, t) for t in range(3, 6)]
    torch.testing.assert_close(torch.stack(got), torch.stack(expected), rtol=0, atol=0)


def test_cyclic_cohorts_take_every_client_every_b_rounds():
    """22 clients, cohorts of 5: 4 blocks taken in turn, 2 clients left over never drawn."""
    from fl_lightning.server.sampling import CohortSampler

    sampler = CohortSampler("cyclic", 5)
    cohorts = [sampler.sample(7, t, 22) for t in range(12)]
    assert all(len(c) == 5 for c in cohorts)
    assert cohorts[:4] == cohorts[4:8] == cohorts[8:]
    assert len(set().union(*cohorts[:4])) == 20  # disjoint blocks
    assert sampler.sampling(22).separation == 4 and sampler.sampling(22).mode == "cyclic"
    assert "each client every 4 rounds" in sampler.sampling(22).describe()
    assert cohorts[0] != CohortSampler("cyclic", 5).sample(8, 0, 22)  # shuffled by the seed
