"""Matrix-factorisation mechanisms for DP-FTRL: factorisations A = B·C of the prefix-sum
workload, their sensitivity under b-min-separated participation, and streaming noise.

The server releases C·x + z (x: the T×d matrix of clipped cohort sums, z ~ N(0, σ²Δ̂²) row by
row) and post-processes it into the prefix sums B·(C·x + z) = A·x + B·z (Denisov, McMahan,
Rush, Smith, Thakurta 2022, eq. (1)). The privacy cost is one Gaussian mechanism whose L2
sensitivity is the largest ‖C·u‖ over the participation patterns u a client may have
(Choquette-Choo et al. 2023, "Multi-epoch matrix factorization", Sec. 2: with at most k
participations at least b rounds apart, ‖Σ_{i∈π} C[:, i]‖ maximised over such π when CᵀC ≥ 0).

The noise the training loop adds to round t's sum is the increment w_t of the prefix noise,
(A⁻¹·B·z)_t; for square C it is (C⁻¹·z)_t. Implemented factorisations:

* ``bsr``: the banded square root (Kalinin & Lampert 2024, "Banded square root matrix
  factorization for differentially private model training", Def. 1/Thm. 1): C is the lower
  triangular Toeplitz matrix of the first p coefficients of √A, c_j = binom(2j, j)/4ʲ (the
  Taylor coefficients of (1 − x)^(−1/2)), and B = A·C⁻¹. w_t = z_t − Σ_{j=1}^{p−1} c_j w_{t−j}
  (forward substitution), so the noise keeps p − 1 vectors: memory O(p·d).
* ``tree``: binary-tree aggregation (Dwork, Naor, Pitassi, Rothblum 2010; Chan, Shi, Song 2011;
  the DP-FTRL of Kairouz, McMahan, Song, Thakkar, Thakurta, Xu 2021, Alg. 1 with its
  ``GetSum``): C has one row per complete dyadic node, B sums the nodes of the dyadic
  decomposition of [0, t), so the prefix noise at t has variance popcount(t)·σ² (Kairouz et
  al. 2021, Sec. 3) with the plain estimator (``tree_estimator: plain``). Node noises are drawn
  from generators keyed by (seed, level, index), so w_t needs O(log T) vectors and no state.
  The default estimator is Honaker's (Honaker 2015, "Efficient use of differentially private
  binary trees", the bottom-up pass; its online use in Kairouz et al. 2021's DP-FTRL):
  the prefix [0, t) is estimated from every node completed by t, not only its dyadic
  decomposition. Those nodes are the perfect subtrees under the decomposition's nodes, so the
  least-squares estimate is, per decomposition node of height h, ẑ_h = v_h·z + (1 − v_h)·(ẑ_left
  + ẑ_right) with v_0 = 1, v_h = 1/(1 + 1/(2·v_{h−1})) its variance (inverse-variance weighting
  of the node's own value and its children's estimates): variance Σ v_h ≤ popcount(t), tending to
  half of it. C (and so Δ) is unchanged, B = the least-squares estimator (tested against a
  brute-force least squares); the stream keeps the estimates of the current decomposition,
  O(log T·d), checkpointed.
* ``banded`` / ``blt``: Toeplitz factorisations optimised for the run
  (:mod:`~fl_lightning.privacy.correlated.banded_mf`, :mod:`~fl_lightning.privacy.correlated.blt`),
  streamed from their coefficients.
* ``identity``: C = I, B = A: independent noise every round, DP-SGD/DP-FedAvg without
  amplification (the baseline the factorisations improve on).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np
import torch

from fl_lightning.privacy.accounting.events import SampledGaussian
from fl_lightning.utils.rng import generator_for

Factorization = Literal["bsr", "tree", "identity", "banded", "blt"]
FACTORIZATIONS: tuple[str, ...] = ("bsr", "tree", "identity", "banded", "blt")
TREE_ESTIMATORS: tuple[str, ...] = ("honaker", "plain")
TOEPLITZ: tuple[str, ...] = ("bsr", "banded", "blt")


def check_tree_estimator(estimator: str) -> None:
    if estimator not in TREE_ESTIMATORS:
        raise ValueError(
            f"strategy.tree_estimator: unknown {estimator!r}; choose from {TREE_ESTIMATORS}"
        )


def honaker_variances(levels: int) -> list[float]:
    """v_0 … v_{levels−1}: the variance (units of σ²) of Honaker's estimate of a node of height h
    from its perfect subtree, v_0 = 1, v_h = 1/(1 + 1/(2·v_{h−1})) (Honaker 2015, the bottom-up
    pass)."""
    v = [1.0]
    for _ in range(1, levels):
        v.append(1.0 / (1.0 + 1.0 / (2.0 * v[-1])))
    return v[:levels]


# -- matrices -------------------------------------------------------------------------------
def prefix_sum_matrix(n: int) -> np.ndarray:
    """A, the n×n lower-triangular matrix of ones (the prefix-sum workload)."""
    return np.tril(np.ones((n, n)))


def sqrt_coefficients(n: int) -> np.ndarray:
    """c_0..c_{n−1} of √A: c_j = binom(2j, j)/4ʲ = c_{j−1}·(2j − 1)/(2j) (Kalinin & Lampert
    2024, Thm. 1), computed by the ratio so that no binomial overflows."""
    c = np.ones(n)
    for j in range(1, n):
        c[j] = c[j - 1] * (2 * j - 1) / (2 * j)
    return c


def toeplitz_lower(coefficients: np.ndarray, n: int) -> np.ndarray:
    """The n×n lower-triangular Toeplitz matrix with first column ``coefficients`` (zero past
    their length)."""
    m = np.zeros((n, n))
    for j, c in enumerate(coefficients[:n]):
        m += c * np.eye(n, k=-j)
    return m


def tree_nodes(n: int) -> list[tuple[int, int]]:
    """The complete dyadic nodes (level ℓ, index i) covering [i·2^ℓ, (i+1)·2^ℓ) within
    [0, n): the only nodes a prefix [0, t ≤ n) is built from."""
    return [
        (level, i)
        for level in range(n.bit_length())
        for i in range(n >> level)  # (i + 1)·2^ℓ ≤ n
    ]


def dyadic_decomposition(t: int) -> list[tuple[int, int]]:
    """The nodes whose union is [0, t): one per set bit ℓ of t, index (t >> ℓ) − 1."""
    return [(level, (t >> level) - 1) for level in range(t.bit_length()) if t >> level & 1]


def factorization(
    kind: str,
    n: int,
    *,
    bands: int | None = None,
    estimator: str = "honaker",
    coefficients: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(B, C) with B·C = A for ``n`` rounds (dense; for tests, sensitivities and docs).

    ``bsr`` needs ``bands`` (p ≥ 1; p ≥ n is the full square root of Kalinin & Lampert);
    ``tree`` takes ``estimator`` (``honaker`` or ``plain``); ``banded`` and ``blt`` need their
    Toeplitz ``coefficients`` (c_0 … from
    :func:`~fl_lightning.privacy.correlated.banded_mf.optimise_banded` or
    :func:`~fl_lightning.privacy.correlated.blt.blt_coefficients`).
    """
    a = prefix_sum_matrix(n)
    if kind in ("banded", "blt"):
        if coefficients is None:
            raise ValueError(f"strategy.factorization: {kind!r} needs its coefficients")
        c = toeplitz_lower(np.asarray(coefficients, dtype=float), n)
        return a @ np.linalg.inv(c), c
    if kind == "identity":
        return a, np.eye(n)
    if kind == "bsr":
        if bands is None or bands < 1:
            raise ValueError(
                f"strategy.bands: must be >= 1 for the banded square root, got {bands}"
            )
        c = toeplitz_lower(sqrt_coefficients(min(bands, n)), n)
        return a @ np.linalg.inv(c), c
    if kind == "tree":
        nodes = tree_nodes(n)
        row = {node: r for r, node in enumerate(nodes)}
        c = np.zeros((len(nodes), n))
        for r, (level, i) in enumerate(nodes):
            c[r, i << level : (i + 1) << level] = 1.0
        check_tree_estimator(estimator)
        b = np.zeros((n, len(nodes)))
        if estimator == "plain":
            for t in range(n):
                for node in dyadic_decomposition(t + 1):
                    b[t, row[node]] = 1.0
            return b, c
        v = honaker_variances(n.bit_length())
        estimate: dict[tuple[int, int], np.ndarray] = {}  # node → its weights on the node values
        for level, i in nodes:  # children before parents
            own = np.zeros(len(nodes))
            own[row[(level, i)]] = 1.0
            if level == 0:
                estimate[(level, i)] = own
            else:
                children = estimate[(level - 1, 2 * i)] + estimate[(level - 1, 2 * i + 1)]
                estimate[(level, i)] = v[level] * own + (1.0 - v[level]) * children
        for t in range(n):
            for node in dyadic_decomposition(t + 1):
                b[t] += estimate[node]
        return b, c
    raise ValueError(f"strategy.factorization: unknown {kind!r}; choose from {FACTORIZATIONS}")


# -- sensitivity ----------------------------------------------------------------------------
def count_patterns(n: int, k: int, b: int) -> int:
    """How many non-empty sets of at most k of n rounds, any two at least b apart."""
    # ways[c][j]: sets of exactly c rounds among [0, j)
    ways = [[1] * (n + 1)] + [[0] * (n + 1) for _ in range(k)]
    for c in range(1, k + 1):
        for j in range(1, n + 1):
            ways[c][j] = ways[c][j - 1] + ways[c - 1][max(0, j - b)]
    return sum(ways[c][n] for c in range(1, k + 1))


def participation_patterns(n: int, k: int, b: int) -> Iterator[tuple[int, ...]]:
    """Every non-empty set of at most k of n rounds with any two at least b apart."""

    def extend(prefix: tuple[int, ...], start: int) -> Iterator[tuple[int, ...]]:
        for i in range(start, n):
            pattern = (*prefix, i)
            yield pattern
            if len(pattern) < k:
                yield from extend(pattern, i + b)

    yield from extend((), 0)


def _best_separated_sum(values: np.ndarray, k: int, b: int) -> np.ndarray:
    """Row-wise max of Σ values[r, j] over at most k positions j, any two ≥ b apart
    (a dynamic programme over positions; −inf entries are never picked)."""
    rows, n = values.shape
    # best[c][:, j]: best sum with c picks among positions < j
    best = np.zeros((k + 1, rows, n + 1))  # at most c picks: none is allowed
    for j in range(n):
        take_from = max(0, j - b + 1)  # previous pick ≤ j − b, i.e. among positions < j − b + 1
        for c in range(1, k + 1):
            take = best[c - 1][:, take_from] + values[:, j]
            best[c][:, j + 1] = np.maximum(best[c][:, j], take)
    return np.max(best[:, :, n], axis=0)


def min_sep_sensitivity(
    c: np.ndarray, k: int, b: int, *, max_patterns: int = 200_000
) -> tuple[float, bool]:
    """(Δ, exact): the largest ‖C·u‖ over participation patterns u ∈ {0,1}ⁿ with at most k
    ones, any two at least b apart, for one unit-norm contribution per participation (scale
    by the clip norm). Needs CᵀC ≥ 0 entrywise (then parallel contributions are worst,
    Choquette-Choo et al. 2023, Thm. 2), which all factorisations here satisfy.

    Exact by enumeration when there are at most ``max_patterns`` patterns; else the upper bound
    max_u Σ_{i∈u} r_i with r_i = X_ii + the best k − 1 b-separated X_ij with |j − i| ≥ b
    (X = CᵀC), since uᵀXu = Σ_{i∈u} Σ_{j∈u} X_ij ≤ Σ_{i∈u} r_i. The bound is exact when C's
    bandwidth is at most b (X_ij = 0 for |i − j| ≥ b, so r_i = X_ii).
    """
    n = c.shape[1]
    k = max(1, min(k, n))
    x = c.T @ c
    if np.any(x < -1e-12):
        raise ValueError("min_sep_sensitivity: CᵀC has negative entries; the bound needs ≥ 0")
    if count_patterns(n, k, b) <= max_patterns:
        best = max(_pattern_value(x, p) for p in participation_patterns(n, k, b))
        return math.sqrt(best), True
    idx = np.arange(n)
    outside = np.abs(idx[:, None] - idx[None, :]) >= b
    r = np.diag(x).copy()
    if k > 1:
        r += _best_separated_sum(np.where(outside, x, -np.inf), k - 1, b)
    bound = float(_best_separated_sum(r[None, :], k, b)[0])
    banded = not np.any(x[outside] > 0)
    return math.sqrt(bound), banded


def _pattern_value(x: np.ndarray, pattern: tuple[int, ...]) -> float:
    p = list(pattern)
    return float(x[np.ix_(p, p)].sum())


def brute_force_sensitivity(c: np.ndarray, k: int, b: int) -> float:
    """max ‖Σ_{i∈π} C[:, i]‖ by trying every subset π of the columns (tests only)."""
    n = c.shape[1]
    best = 0.0
    for size in range(1, min(k, n) + 1):
        for pattern in itertools.combinations(range(n), size):
            if all(q - p >= b for p, q in itertools.pairwise(pattern)):
                best = max(best, float(np.linalg.norm(c[:, list(pattern)].sum(axis=1))))
    return best


# -- streaming noise ------------------------------------------------------------------------
class StreamingNoise:
    """The per-round noise w_t of a factorisation, drawn from generators keyed by the run's
    noise seed, in units of the noise std (multiply by σ·clip). ``state_dict`` restores it
    exactly mid-run; the seed is not part of it: a strategy binds it from the round
    (``RoundContext.seed``: in ``privacy.secure_mode`` the run's secret, never the configured
    seed) with :meth:`bind` before the first draw, a resumed run from its checkpoint's secret.

    ``bsr`` takes ``bands``; ``banded`` its Toeplitz ``coefficients`` (c_0 = 1); ``blt`` its
    ``theta`` and ``omega``; ``tree`` its ``estimator``.
    """

    def __init__(
        self,
        kind: str,
        *,
        seed: int | None = None,
        bands: int = 1,
        estimator: str = "honaker",
        coefficients: np.ndarray | None = None,
        theta: np.ndarray | None = None,
        omega: np.ndarray | None = None,
    ) -> None:
        if kind not in FACTORIZATIONS:
            raise ValueError(
                f"strategy.factorization: unknown {kind!r}; choose from {FACTORIZATIONS}"
            )
        check_tree_estimator(estimator)
        self.kind = kind
        self.seed = seed
        self.estimator = estimator
        if kind == "banded":
            if coefficients is None:
                raise ValueError("strategy.factorization: 'banded' needs its coefficients")
            self.coefficients = torch.tensor(np.asarray(coefficients, dtype=float))
        else:
            self.coefficients = torch.tensor(sqrt_coefficients(bands), dtype=torch.float64)
        if kind == "blt" and (theta is None or omega is None):
            raise ValueError("strategy.factorization: 'blt' needs its theta and omega")
        self.theta = torch.tensor(np.asarray(theta if theta is not None else [], dtype=float))
        self.omega = torch.tensor(np.asarray(omega if omega is not None else [], dtype=float))
        self.history: list[torch.Tensor] = []
        """bsr/banded: w_{t−1}, w_{t−2}, … (at most p − 1, newest first); blt: the buffers
        S_{i,t}; tree (Honaker): the estimates ẑ of the decomposition of [0, t), oldest first."""
        self.levels: list[int] = []
        """tree (Honaker): the heights of the nodes in ``history``."""
        self.next_round = 0

    def bind(self, seed: int) -> None:
        """Keys the draws by ``seed`` (the round's noise seed); refuses a second, other seed
        (the stream's noise would mix two keys)."""
        if self.seed is not None and self.seed != seed:
            raise RuntimeError("matrix mechanism: the noise stream is bound to another seed")
        self.seed = seed

    def _z(self, d: int, *keys: int | str, device: torch.device) -> torch.Tensor:
        if self.seed is None:
            raise RuntimeError("matrix mechanism: no noise seed bound before the first draw")
        g = generator_for(self.seed, *keys, "matrix_mechanism", device=device)
        return torch.randn(d, generator=g, device=device, dtype=torch.float32)

    def _prefix(self, t: int, d: int, device: torch.device) -> torch.Tensor:
        """Tree: the noise of the released prefix sum of rounds [0, t), (B·z)_{t−1}."""
        out = torch.zeros(d, device=device)
        for level, i in dyadic_decomposition(t):
            out += self._z(d, "tree", level, i, device=device)
        return out

    def _honaker(self, round_idx: int, d: int, device: torch.device) -> torch.Tensor:
        """Leaf ``round_idx`` completes, then every ancestor it completes (a binary counter):
        each new node's estimate combines its own noise with its children's (module
        docstring); w_t is the change of the summed estimates."""
        before = sum(
            (h.to(device) for h in self.history), torch.zeros(d, device=device, dtype=torch.float64)
        )
        node = self._z(d, "tree", 0, round_idx, device=device).double()
        level, index = 0, round_idx
        v = honaker_variances(round_idx.bit_length() + 2)
        while self.levels and self.levels[-1] == level:  # the left sibling is complete
            left = self.history.pop().to(device)
            self.levels.pop()
            level, index = level + 1, index >> 1
            own = self._z(d, "tree", level, index, device=device).double()
            node = v[level] * own + (1.0 - v[level]) * (left + node)
        self.history.append(node)
        self.levels.append(level)
        after = sum(
            (h.to(device) for h in self.history), torch.zeros(d, device=device, dtype=torch.float64)
        )
        return (after - before).float()

    def next(self, round_idx: int, d: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """w_t for round ``round_idx`` (called once per round, in order)."""
        device = torch.device(device)
        if round_idx != self.next_round:
            raise RuntimeError(
                f"matrix mechanism: noise for round {round_idx} asked, round {self.next_round} "
                "expected (rounds must run in order; a resumed run restores the state)"
            )
        self.next_round += 1
        if self.kind == "identity":
            return self._z(d, "z", round_idx, device=device)
        if self.kind == "tree":
            if self.estimator == "honaker":
                return self._honaker(round_idx, d, device)
            return self._prefix(round_idx + 1, d, device) - self._prefix(round_idx, d, device)
        w = self._z(d, "z", round_idx, device=device).double()
        if self.kind == "blt":  # w_t = z_t − Σ ω_i S_i; S_i ← θ_i S_i + w_t
            buffers = [h.to(device) for h in self.history] or [
                torch.zeros(d, device=device, dtype=torch.float64) for _ in self.theta
            ]
            for omega, s in zip(self.omega.tolist(), buffers, strict=True):
                w -= omega * s
            self.history = [
                theta * s + w for theta, s in zip(self.theta.tolist(), buffers, strict=True)
            ]
            return w.float()
        c0 = float(self.coefficients[0])
        for c, past in zip(self.coefficients[1:].tolist(), self.history, strict=False):
            w -= c * past.to(device)
        w /= c0
        keep = len(self.coefficients) - 1
        self.history = [w, *self.history][:keep]
        return w.float()

    def state_dict(self) -> dict[str, Any]:
        return {
            "next_round": self.next_round,
            "history": [h.cpu() for h in self.history],
            "levels": list(self.levels),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.next_round = int(state["next_round"])
        self.history = [torch.as_tensor(h, dtype=torch.float64) for h in state["history"]]
        self.levels = [int(level) for level in state.get("levels", [])]


def noise_std_per_round(
    kind: str, n: int, *, bands: int | None = None, estimator: str = "honaker"
) -> np.ndarray:
    """Std of the prefix-sum noise at each round, in units of σ (√diag(B·Bᵀ))."""
    b, _ = factorization(kind, n, bands=bands, estimator=estimator)
    return np.sqrt(np.sum(b * b, axis=1))


__all__ = [
    "FACTORIZATIONS",
    "amplified_run_event",
    "TREE_ESTIMATORS",
    "check_tree_estimator",
    "honaker_variances",
    "StreamingNoise",
    "brute_force_sensitivity",
    "count_patterns",
    "dyadic_decomposition",
    "factorization",
    "min_sep_sensitivity",
    "noise_std_per_round",
    "participation_patterns",
    "prefix_sum_matrix",
    "sqrt_coefficients",
    "tree_nodes",
]


def whole_run_event(multiplier: float, scheme: str) -> SampledGaussian:
    """The DP event of a whole matrix-mechanism run: one Gaussian mechanism of noise multiplier
    σ/Δ (Δ: :func:`min_sep_sensitivity` of the participation schedule), with no sampling
    (q = 1, one step) — Choquette-Choo et al. 2023, Thm. 2.1. ``scheme`` names the factorisation
    and schedule in the guarantee sentence."""
    return SampledGaussian(multiplier, 1.0, 1, 0, scheme=scheme)


def amplified_run_event(
    multiplier: float, sample_rate: float, participations: int, scheme: str
) -> SampledGaussian:
    """The DP event of an amplified banded matrix-mechanism run (Choquette-Choo et al. 2023,
    arXiv:2306.08153, amplification of b-banded C under cyclic Poisson sampling): k =
    ``participations`` compositions of a Poisson-subsampled Gaussian of rate q =
    ``sample_rate`` and multiplier σ/ζ (ζ: the largest column norm of C), add/remove one
    client. ``scheme`` names the factorisation and sampling in the guarantee sentence."""
    return SampledGaussian(multiplier, sample_rate, participations, 0, scheme=scheme)
