"""NbAFL (Wei et al. 2020): noise scales of Theorems 1-2, parameter clipping, the noise actually
added, and the guarantee each variant reports."""

from __future__ import annotations

import math

import pytest
import torch

from fl_lightning.privacy.accounting.analysis import epsilon
from fl_lightning.privacy.accounting.events import SampledGaussian
from fl_lightning.privacy.mechanisms.clipping import clip_by_l2_norm_ as clip_parameters_
from fl_lightning.records import ClientUpdate
from fl_lightning.strategies.nbafl import (
    NbAFL,
    downlink_sigma,
    nbafl_c,
    uplink_sigma,
)
from fl_lightning.testing import round_context
from tests.strategies.dpfl_agn_helpers import tiny_run


def test_noise_scales_match_theorems_1_and_2():
    delta, C, m, eps, N = 1e-5, 10.0, 720, 2.0, 10
    c = math.sqrt(2 * math.log(1.25 / delta))
    assert nbafl_c(delta) == pytest.approx(c)
    # Theorem 1: σ_U = c·L·(2C/m)/ε.
    assert uplink_sigma(c=c, exposures=50, clip_norm=C, min_size=m, eps=eps) == pytest.approx(
        c * 50 * 2 * C / m / eps
    )
    # Theorem 2: zero unless T > L√N, then 2cC√(T² − L²N)/(mNε).
    assert (
        downlink_sigma(
            c=c, rounds=50, exposures=50, num_clients=N, clip_norm=C, min_size=m, eps=eps
        )
        == 0.0
    )
    assert (
        downlink_sigma(
            c=c, rounds=31, exposures=10, num_clients=N, clip_norm=C, min_size=m, eps=eps
        )
        == 0.0
    )  # 31 < 10·√10 = 31.6
    assert downlink_sigma(
        c=c, rounds=100, exposures=10, num_clients=N, clip_norm=C, min_size=m, eps=eps
    ) == pytest.approx(2 * c * C * math.sqrt(100**2 - 10**2 * N) / (m * N * eps))


def test_configure_reads_L_as_the_planned_rounds_by_default():
    s = NbAFL(clip_norm=5.0, epsilon=2.0)
    s.configure(num_clients=10, min_size=600, rounds=40)
    assert s.L == 40 and s.sigma_d == 0.0
    assert s.sigma_u == pytest.approx(nbafl_c(1e-5) * 40 * 2 * 5.0 / 600 / 2.0)
    k = NbAFL(clip_norm=5.0, epsilon=2.0, exposures=4)  # the FederatedScope reading L = K
    k.configure(num_clients=10, min_size=600, rounds=40)
    assert k.sigma_d == pytest.approx(
        2 * nbafl_c(1e-5) * 5.0 * math.sqrt(40**2 - 16 * 10) / (600 * 10 * 2.0)
    )


def test_corrected_variant_calibrates_sensitivity_2C_by_rdp():
    s = NbAFL(clip_norm=3.0, epsilon=2.0, variant="corrected")
    s.configure(num_clients=10, min_size=600, rounds=20)
    z = s.sigma_u / 6.0
    assert epsilon([SampledGaussian(z, 1.0, 20)], 1e-5, "rdp") <= 2.0
    assert epsilon([SampledGaussian(z - 0.02, 1.0, 20)], 1e-5, "rdp") > 2.0


def test_parameter_clipping():
    w = torch.tensor([3.0, 4.0])
    assert clip_parameters_(w, 1.0) == pytest.approx(5.0)
    torch.testing.assert_close(w, torch.tensor([0.6, 0.8]))
    v = torch.tensor([0.3, 0.4])
    clip_parameters_(v, 1.0)
    torch.testing.assert_close(v, torch.tensor([0.3, 0.4]))  # inside the ball: unchanged


def test_uploaded_parameters_are_clipped_then_noised_with_sigma_u():
    s = NbAFL(clip_norm=2.0, epsilon=1.0)
    s.configure(num_clients=10, min_size=1000, rounds=10)
    d = 200_000
    glob = torch.zeros(d)
    glob[0] = 1.0
    delta = torch.zeros(d)
    delta[1] = 100.0  # ‖w‖ ≈ 100 → clipped to 2
    ctx = round_context(
        glob, [0], num_clients=10, total_rounds=10, sample_rate=1.0, sampling=None
    )  # m = q·N = 10
    up = s.process_update(
        ClientUpdate(0, delta, 1000, 0.0), ctx, generator=torch.Generator().manual_seed(1)
    )
    w = glob + up.delta
    noise = w.clone()
    noise[:2] = 0
    assert float(noise[2:].std()) == pytest.approx(s.sigma_u, rel=0.01)  # 200k draws
    clean = torch.tensor([1.0, 100.0]) * 2.0 / math.hypot(1.0, 100.0)
    assert torch.allclose(w[:2], clean, atol=6 * s.sigma_u)
    assert up.metrics["clipped"] == 1.0


def test_published_run_reports_no_guarantee_and_the_sound_epsilon():
    s = NbAFL(clip_norm=20.0, epsilon=2.0)
    module, _ = tiny_run(s, rounds=4, optimizer="sgd", lr=0.1, dp=False, batch_size=16)
    rep = module.accountant.report()
    # The paper's (2, 1e-5) is not what the algorithm enforces: ∞ with the reason.
    assert rep["privacy/epsilon"] == math.inf
    assert rep["privacy/guarantee"].startswith("none: NbAFL as published")
    metrics = module.strategy_metrics  # the last round's
    assert metrics["epsilon_paper"] == 2.0
    z = s.sigma_u / (2 * 20.0)
    assert metrics["epsilon_sound"] == pytest.approx(
        epsilon([SampledGaussian(z, 1.0, 4)], 1e-5, "rdp")
    )
    assert metrics["epsilon_sound"] > 2.0


def test_corrected_run_reports_client_level_epsilon():
    s = NbAFL(clip_norm=20.0, epsilon=2.0, variant="corrected")
    module, _ = tiny_run(s, rounds=3, optimizer="sgd", lr=0.1, dp=False, batch_size=16)
    rep = module.accountant.report()
    assert rep["privacy/guarantee"].startswith("client-level")
    assert rep["privacy/epsilon"] <= 2.0


def test_nbafl_rejects_dp_sgd():
    with pytest.raises(ValueError, match="client.dp_sgd"):
        tiny_run(NbAFL(clip_norm=1.0, epsilon=2.0), rounds=1, optimizer="sgd")
