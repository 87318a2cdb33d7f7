"""Noise at equal ε, no training: the std of the released prefix sums' noise (units of the clip
norm C, on the sum of clipped updates) for DP-FTRL's factorisations and DP-FedAvg, in the
offline-MNIST comparison's setting (T = 40 rounds, N = 100 clients, cohorts of m = 20: cyclic
every b = 5 rounds, k = 8 participations; DP-FedAvg on fixed-size or Poisson cohorts), σ
calibrated on the RDP accountant at δ = 1e-5. Deterministic: prints docs/privacy.md's table.

    PYTHONPATH=. python benchmarks/dp_ftrl_noise.py
"""

from __future__ import annotations

import math

import numpy as np

from fl_lightning.privacy.accounting.analysis import (
    calibrate_noise_multiplier,
    calibrate_repeated_gaussian,
)
from fl_lightning.privacy.accounting.events import CohortSampling, SampledGaussian
from fl_lightning.privacy.correlated.matrix_mechanism import factorization, min_sep_sensitivity

T, N, M = 40, 100, 20


def row(eps: float, arm: str, detail: str, sigma: float, stds: np.ndarray) -> str:
    rms = float(np.sqrt(np.mean(stds**2)))
    return f"| {eps:g} | {arm} | {detail} | {sigma:.3g} | {stds[-1]:.3g} | {rms:.3g} |"


def main() -> None:
    b = N // M
    k = math.ceil(T / b)
    print(f"T = {T}, N = {N}, m = {M}: b = {b}, k = {k}\n")
    print("| ε | arm | Δ / event | σ | noise std of the last prefix sum | rms over rounds |")
    print("|---|---|---|---|---|---|")
    for eps in (2.0, 8.0):
        mult = calibrate_repeated_gaussian(1, target_epsilon=eps, delta=1e-5, accountant="rdp")
        for kind, bands in (("identity", 1), ("tree", 1), ("bsr", b)):
            prefix, c = factorization(kind, T, bands=bands, estimator="plain")  # as measured
            delta_c, exact = min_sep_sensitivity(c, k, b)
            sigma = mult * delta_c
            stds = np.sqrt(np.sum(prefix * prefix, axis=1)) * sigma
            detail = f"Δ = {delta_c:.3g}{'' if exact else ' (upper bound)'}"
            print(row(eps, f"DP-FTRL {kind}", detail, sigma, stds))
        for mode in ("fixed", "poisson"):
            rounds = SampledGaussian.for_cohort(1.0, CohortSampling(mode, M / N, N), T)
            sigma = calibrate_noise_multiplier(
                [[rounds]], target_epsilon=eps, delta=1e-5, accountant="rdp"
            )
            stds = sigma * np.sqrt(np.arange(1, T + 1))
            print(row(eps, f"DP-FedAvg {mode}", f"{T} sampled Gaussians", sigma, stds))


if __name__ == "__main__":
    main()
