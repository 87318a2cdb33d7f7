"""Empirical privacy from one training run: canary scores turned into ε.

Two estimators read the same scores (the cosine between the final model change and each
canary's direction; ``attacks/canaries.py`` inserts the canaries):

* :func:`gaussian_fit_epsilon` — Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar (ICLR 2024,
  "One-shot empirical privacy estimation for federated learning", Sec. 3, Alg. 2): fit a
  Gaussian to the scores of the inserted canaries and one to those of the canaries never
  inserted, and report the ε at δ of the pair of Gaussians, i.e. of the mechanism that outputs
  a draw of one or the other (both orders). An estimate, not a bound; its interval here is a
  percentile bootstrap over canaries. By default both Gaussians share one pooled variance (the
  Gaussian mechanism's own model, under which the pair is μ-GDP with μ = Δmean/std): with a few
  hundred canaries the sampling error of two separately fitted variances alone makes the
  likelihood ratio's tails diverge and inflates ε at small δ (ε ≈ 0.9 for a mechanism whose ε
  is 0.06, in our tests); ``equal_variance=False`` fits each its own, as Andrew et al. do.
* :func:`steinke_lower_bound` — Steinke, Nasr, Jagielski (NeurIPS 2023, "Privacy auditing with
  one (1) training run", Thm. 3.1 with Alg. 1's guesses): every canary is inserted by an
  independent fair coin; the auditor guesses "in" for the k₊ highest scores and "out" for the
  k₋ lowest and abstains on the rest. If the run is (ε, δ)-DP, the number W of correct guesses
  among r = k₊ + k₋ satisfies P[W ≥ v] ≤ P[Binomial(r, e^ε/(1+e^ε)) ≥ v] + 2mδ·α, α =
  max_{i ≥ 1} P[v > Binomial ≥ v − i]/i (Steinke et al.'s Thm. 3.1 bound, as in their
  reference code); the ε lower bound at confidence 1 − β is the largest ε whose p-value of the
  observed v is below β. It is a statistically valid lower bound: it must never exceed the
  accountant's ε.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


# -- Andrew et al.: the ε of two fitted Gaussians ---------------------------------------------
def _phi(x: float) -> float:
    """The standard normal CDF."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def gaussian_pair_delta(epsilon: float, p: tuple[float, float], q: tuple[float, float]) -> float:
    """δ(ε) = sup_S P(S) − e^ε Q(S) for P = N(p), Q = N(q) given as (mean, std): the set
    S = {log p/q > ε} is where a quadratic is positive, so the sup is exact by normal CDFs."""
    (m1, s1), (m0, s0) = p, q
    if s1 == s0:  # μ-GDP with μ = |m1 − m0|/s (Dong, Roth, Su 2022, Cor. 2.13), in closed form
        mu = abs(m1 - m0) / s1
        if mu == 0:
            return 0.0
        return max(
            0.0, _phi(-epsilon / mu + mu / 2) - math.exp(epsilon) * _phi(-epsilon / mu - mu / 2)
        )
    a = 1.0 / (2 * s0 * s0) - 1.0 / (2 * s1 * s1)
    b = m1 / (s1 * s1) - m0 / (s0 * s0)
    c = m0 * m0 / (2 * s0 * s0) - m1 * m1 / (2 * s1 * s1) + math.log(s0 / s1) - epsilon
    # S = {a x² + b x + c > 0}, as a union of intervals
    intervals: list[tuple[float, float]]
    if abs(a) < 1e-12 * max(abs(b), 1e-300):
        if b == 0:
            intervals = [(-math.inf, math.inf)] if c > 0 else []
        else:
            root = -c / b
            intervals = [(root, math.inf)] if b > 0 else [(-math.inf, root)]
    else:
        disc = b * b - 4 * a * c
        if disc <= 0:
            intervals = [(-math.inf, math.inf)] if a > 0 else []
        else:
            r1, r2 = sorted(((-b - math.sqrt(disc)) / (2 * a), (-b + math.sqrt(disc)) / (2 * a)))
            intervals = [(-math.inf, r1), (r2, math.inf)] if a > 0 else [(r1, r2)]

    def mass(mean: float, std: float) -> float:
        return sum(
            float(stats.norm.cdf(hi, mean, std) - stats.norm.cdf(lo, mean, std))
            for lo, hi in intervals
        )

    return max(0.0, mass(m1, s1) - math.exp(epsilon) * mass(m0, s0))


def gaussian_pair_epsilon(
    p: tuple[float, float], q: tuple[float, float], delta: float, *, max_epsilon: float = 100.0
) -> float:
    """The smallest ε with δ(ε) ≤ ``delta`` in both orders (P vs Q and Q vs P), by bisection;
    ``max_epsilon`` when even that does not reach δ."""

    def d(eps: float) -> float:
        return max(gaussian_pair_delta(eps, p, q), gaussian_pair_delta(eps, q, p))

    if d(0.0) <= delta:
        return 0.0
    if d(max_epsilon) > delta:
        return max_epsilon
    lo, hi = 0.0, max_epsilon
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if d(mid) > delta else (lo, mid)
    return hi


@dataclass(frozen=True)
class GaussianFitEstimate:
    """Andrew et al.'s ε estimate and its bootstrap interval."""

    epsilon: float
    low: float
    high: float
    level: float
    observed_mean: float
    observed_std: float
    unobserved_mean: float
    unobserved_std: float


def gaussian_fit_epsilon(
    observed: np.ndarray,
    unobserved: np.ndarray,
    delta: float,
    *,
    level: float = 0.95,
    bootstrap: int = 200,
    seed: int = 0,
    equal_variance: bool = True,
) -> GaussianFitEstimate:
    """ε estimate from the scores of inserted (``observed``) and never-inserted canaries."""
    observed, unobserved = np.asarray(observed, float), np.asarray(unobserved, float)
    if len(observed) < 2 or len(unobserved) < 2:
        raise ValueError("canaries: need at least 2 inserted and 2 never-inserted canaries")

    def fit(obs: np.ndarray, un: np.ndarray) -> float:
        s_obs, s_un = float(obs.std(ddof=1)), float(un.std(ddof=1))
        if equal_variance:
            pooled = ((len(obs) - 1) * s_obs**2 + (len(un) - 1) * s_un**2) / (
                len(obs) + len(un) - 2
            )
            s_obs = s_un = math.sqrt(pooled)
        p = (float(obs.mean()), max(s_obs, 1e-12))
        q = (float(un.mean()), max(s_un, 1e-12))
        return gaussian_pair_epsilon(p, q, delta)

    point = fit(observed, unobserved)
    rng = np.random.default_rng(seed)
    draws = [
        fit(rng.choice(observed, len(observed)), rng.choice(unobserved, len(unobserved)))
        for _ in range(bootstrap)
    ]
    tail = (1 - level) / 2
    low, high = np.quantile(draws, [tail, 1 - tail]) if draws else (point, point)
    return GaussianFitEstimate(
        epsilon=point,
        low=float(low),
        high=float(high),
        level=level,
        observed_mean=float(observed.mean()),
        observed_std=float(observed.std(ddof=1)),
        unobserved_mean=float(unobserved.mean()),
        unobserved_std=float(unobserved.std(ddof=1)),
    )


# -- Steinke, Nasr, Jagielski: a lower bound from one run -----------------------------------
def steinke_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """P[W ≥ v] under the null hypothesis that the run is (ε, δ)-DP (Thm. 3.1): m canaries
    each inserted with probability 1/2, r guesses, v of them correct."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"steinke_p_value: need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    q = 1.0 / (1.0 + math.exp(-epsilon))  # accuracy of ε-DP randomised response
    beta = float(stats.binom.sf(v - 1, r, q))  # P[Binomial(r, q) >= v]
    # α = max_{i ≥ 1} P[v > Binomial(r, q) ≥ v − i] / i, every i at once
    pmf = stats.binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[Bin = v − i], i = 1 … v
    alpha = float(np.max(np.cumsum(pmf) / np.arange(1, v + 1))) if v > 0 else 0.0
    return min(1.0, beta + alpha * delta * 2 * m)


def steinke_epsilon(m: int, r: int, v: int, delta: float, *, beta: float = 0.05) -> float:
    """The largest ε (bisection, to 1e-6 of the bracket) such that observing v correct guesses
    of r would have p-value < ``beta`` were the run (ε, δ)-DP; 0 when even ε = 0 is not
    rejected. With confidence 1 − β the run is not (ε', δ)-DP for any ε' below it."""
    if steinke_p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while steinke_p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, hi * 2
        if hi > 1e3:
            return lo
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if steinke_p_value(m, r, v, mid, delta) < beta else (lo, mid)
    return lo


@dataclass(frozen=True)
class OneRunBound:
    """Steinke et al.'s bound: the guesses behind it and the ε lower bound."""

    epsilon: float
    confidence: float
    canaries: int
    guesses: int
    correct: int


def steinke_lower_bound(
    scores: np.ndarray,
    inserted: np.ndarray,
    delta: float,
    *,
    confidence: float = 0.95,
    guess_fraction: float = 0.2,
) -> OneRunBound:
    """Guess "in" for the k₊ highest scores and "out" for the k₋ lowest (k₊ = k₋ = half of
    ``guess_fraction``·m, fixed before the scores are seen, so that one test is made), then
    :func:`steinke_epsilon` at β = 1 − ``confidence``."""
    scores, inserted = np.asarray(scores, float), np.asarray(inserted, bool)
    m = len(scores)
    k = max(1, int(round(guess_fraction * m / 2)))
    if 2 * k > m:
        raise ValueError(f"canaries: {m} canaries cannot take {2 * k} guesses")
    order = np.argsort(scores, kind="stable")
    correct = int(inserted[order[-k:]].sum() + (~inserted[order[:k]]).sum())
    eps = steinke_epsilon(m, 2 * k, correct, delta, beta=1 - confidence)
    return OneRunBound(eps, confidence, m, 2 * k, correct)


# -- the auditor's plan: how many guesses, fixed before the scores are seen -----------------
def gdp_mu(epsilon: float, delta: float) -> float:
    """μ of the μ-GDP mechanism (Dong, Roth, Su 2022, Cor. 2.13) whose ε at ``delta`` is
    ``epsilon`` (bisection; ∞ for ε = ∞): the separation, in noise standard deviations, of
    the inserted and the left-out canaries' scores that a tight audit of a Gaussian mechanism
    with that guarantee would see."""
    if math.isinf(epsilon):
        return math.inf
    if epsilon <= 0:
        return 0.0

    def eps_of(mu: float) -> float:
        return gaussian_pair_epsilon((mu, 1.0), (0.0, 1.0), delta, max_epsilon=500.0)

    lo, hi = 0.0, 1.0
    while eps_of(hi) < epsilon:
        lo, hi = hi, hi * 2
        if hi > 1e4:
            return math.inf
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if eps_of(mid) < epsilon else (lo, mid)
    return hi


def expected_correct(m: int, k: int, mu: float) -> float:
    """E[correct guesses] when the auditor guesses "in" for the k highest and "out" for the k
    lowest of m scores, each N(μ, 1) for an inserted canary and N(0, 1) for a left-out one
    (fair coins), at the threshold where k scores are expected above it (symmetric below)."""
    if math.isinf(mu):
        return 2.0 * k
    target = k / m

    def above(t: float) -> float:
        return 0.5 * (_phi(mu - t) + _phi(-t))

    lo, hi = -50.0, 50.0 + mu
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if above(mid) > target else (lo, mid)
    t = (lo + hi) / 2
    true_in, false_in = 0.5 * _phi(mu - t), 0.5 * _phi(-t)
    precision = true_in / (true_in + false_in) if true_in + false_in > 0 else 0.5
    return 2.0 * k * precision


GUESS_FRACTIONS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.5, 0.7, 1.0)
"""The guess fractions :func:`planned_guess_fraction` chooses among."""


def planned_guess_fraction(
    m: int, epsilon: float, delta: float, *, confidence: float = 0.95
) -> tuple[float, float]:
    """(guess fraction, the lower bound it is expected to give) maximising Steinke et al.'s
    bound for m canaries when the scores are those of a tight audit of a Gaussian mechanism
    with the claimed ``epsilon`` (:func:`gdp_mu`, :func:`expected_correct`). It reads only the
    claim, never the scores, so the one test of :func:`steinke_lower_bound` stays one test
    (Steinke et al. choose k₊, k₋ the same way, before the run)."""
    mu = gdp_mu(epsilon, delta)
    best = (GUESS_FRACTIONS[0], -1.0)
    for fraction in GUESS_FRACTIONS:
        k = max(1, int(round(fraction * m / 2)))
        if 2 * k > m:
            continue
        v = int(math.floor(expected_correct(m, k, mu)))
        bound = steinke_epsilon(m, 2 * k, v, delta, beta=1 - confidence)
        if bound > best[1]:
            best = (fraction, bound)
    return best


def lower_bound_ceiling(m: int, guesses: int, delta: float, *, confidence: float = 0.95) -> float:
    """Steinke et al.'s bound when every one of ``guesses`` guesses among m canaries is right:
    the most this audit can show, whatever the run (where the bound saturates)."""
    return steinke_epsilon(m, guesses, guesses, delta, beta=1 - confidence)


# -- the same guesses, read through the Gaussian trade-off curve --------------------------
def gdp_p_value(m: int, r: int, v: int, mu: float, *, grid: int = 121) -> float:
    """A p-value of v correct guesses of r (m canaries) under the null hypothesis that the run
    is μ-GDP (Dong, Roth & Su 2022): such a run is (ε, δ_μ(ε))-DP for every ε at once, so
    Steinke et al.'s Thm. 3.1 bounds P[W ≥ v] at every point of the curve and the smallest of
    those bounds (over an ε grid up to the curve's ε at δ = 1e-12) is a valid p-value."""
    top = gaussian_pair_epsilon((mu, 1.0), (0.0, 1.0), 1e-12, max_epsilon=500.0)
    best = 1.0
    for eps in np.linspace(0.0, max(top, 1e-6), grid):
        point = min(1.0, gaussian_pair_delta(float(eps), (mu, 1.0), (0.0, 1.0)))
        best = min(best, steinke_p_value(m, r, v, float(eps), point))
    return best


@dataclass(frozen=True)
class GaussianCurveBound:
    """The largest μ rejected at the confidence and the ε that μ-GDP has at δ."""

    mu: float
    epsilon: float
    confidence: float


def gdp_lower_bound(
    m: int, r: int, v: int, delta: float, *, confidence: float = 0.95
) -> GaussianCurveBound:
    """The f-DP reading of Steinke et al.'s guesses, for the Gaussian trade-off family
    (Mahloujifar, Melis & Chaudhuri, ICML 2025, audit f-DP in one run; this uses Steinke et
    al.'s (ε, δ) bound at every point of the curve, not their tighter recursion): with
    confidence ``confidence`` the run is not μ-GDP for any μ below ``mu`` (bisection of
    :func:`gdp_p_value`), and ``epsilon`` is μ-GDP's ε at ``delta``. The ε is a lower bound
    for a run whose privacy curve is Gaussian (the full-participation Gaussian mechanism);
    for another curve, the statement is about μ only."""
    beta = 1 - confidence
    if gdp_p_value(m, r, v, 1e-6) >= beta:
        return GaussianCurveBound(0.0, 0.0, confidence)
    lo, hi = 0.0, 1.0
    while gdp_p_value(m, r, v, hi) < beta:
        lo, hi = hi, hi * 2
        if hi > 64:
            break
    for _ in range(25):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gdp_p_value(m, r, v, mid) < beta else (lo, mid)
    eps = gaussian_pair_epsilon((lo, 1.0), (0.0, 1.0), delta, max_epsilon=500.0)
    return GaussianCurveBound(lo, eps, confidence)


__all__ = [
    "GUESS_FRACTIONS",
    "GaussianCurveBound",
    "GaussianFitEstimate",
    "OneRunBound",
    "gaussian_fit_epsilon",
    "gaussian_pair_delta",
    "gaussian_pair_epsilon",
    "gdp_lower_bound",
    "gdp_mu",
    "gdp_p_value",
    "expected_correct",
    "lower_bound_ceiling",
    "planned_guess_fraction",
    "steinke_epsilon",
    "steinke_lower_bound",
    "steinke_p_value",
]
