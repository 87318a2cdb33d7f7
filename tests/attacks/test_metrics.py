"""Membership-inference metrics and the empirical ε lower bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fl_lightning.attacks.metrics import (
    balanced_accuracy,
    clopper_pearson,
    empirical_epsilon,
    evaluate_scores,
    tpr_at_fpr,
)


def test_clopper_pearson_known_values() -> None:
    lo, hi = clopper_pearson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 10), rel=1e-6)
    lo, hi = clopper_pearson(5, 10)
    assert lo == pytest.approx(0.187086, abs=1e-5) and hi == pytest.approx(0.812914, abs=1e-5)
    assert clopper_pearson(10, 10)[1] == 1.0


def test_no_leakage_gives_no_epsilon() -> None:
    rng = np.random.default_rng(0)
    m, n = rng.normal(size=2000), rng.normal(size=2000)
    assert empirical_epsilon(m, n, delta=1e-5)["epsilon_lower_bound"] < 0.2
    res = evaluate_scores("x", m, n, delta=1e-5)
    assert abs(res.auc - 0.5) < 0.05 and res.tpr_at_1pct_fpr < 0.05


def test_perfect_separation_gives_large_epsilon() -> None:
    m, n = np.ones(500), np.zeros(500)
    eps = empirical_epsilon(m, n, delta=1e-5)["epsilon_lower_bound"]
    # 250 of 250 members flagged, 0 of 250 non-members: ln(0.985 / 0.0146) ≈ 4.2
    assert 3.5 < eps < 5.0
    res = evaluate_scores("x", m, n, threshold=0.5)
    assert res.auc == 1.0 and res.balanced_accuracy == 1.0 and res.tpr_at_0_1pct_fpr == 1.0


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_bound_holds_for_a_known_mechanism(eps: float) -> None:
    """Randomised response is exactly ε-DP: the bound stays below ε and detects most of it."""
    rng = np.random.default_rng(int(eps * 10))
    p = math.exp(eps) / (1 + math.exp(eps))
    m = (rng.random(20000) < p).astype(float)
    n = (rng.random(20000) < 1 - p).astype(float)
    lb = empirical_epsilon(m, n, delta=0.0)["epsilon_lower_bound"]
    assert lb <= eps, f"empirical bound {lb:.3f} exceeds the true ε {eps}"
    assert lb > 0.8 * eps


def test_rates_and_thresholds() -> None:
    m, n = np.array([3.0, 4.0, 5.0, 0.5]), np.array([0.0, 1.0, 2.0, 0.7])
    assert tpr_at_fpr(m, n, 0.0) == 0.75
    acc, t = balanced_accuracy(m, n, None)
    assert acc == 0.875 and t == 3.0
    assert balanced_accuracy(m, n, 10.0)[0] == 0.5
    with pytest.raises(ValueError, match="equal size"):
        evaluate_scores("x", m, n[:3])
