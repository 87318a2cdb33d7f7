"""The loss of every DP-FTRL factorisation (issue 50, item 4(a)): RMSE of the prefix sums at
noise multiplier 1, Δ·√((1/n)·‖B‖_F²) (units of σ/Δ = 1, i.e. the noise std per unit of
sensitivity, averaged over rounds), for n ∈ {64, 256, 1024} rounds and k ∈ {1, 4, 16}
participations at separation b = n/k, beside the same quantity recomputed independently:

* production: ``fl_lightning.privacy`` (the Toeplitz factorisations' torch loss
  ``toeplitz_loss`` with its closed-form sensitivity; ``matrix_mechanism.factorization`` and
  ``min_sep_sensitivity`` for the tree and identity);
* independent: dense numpy written here — B = A·C⁻¹ by ``numpy.linalg.inv`` (Toeplitz), the
  tree's plain B from the dyadic decomposition and Honaker's from least squares
  (``numpy.linalg.lstsq``) on each perfect subtree of the decomposition, Δ = ‖C·u‖ on the dense C
  for the earliest pattern u = Σ_{j<k} e_{jb} (for the tree: the same pattern, a lower bound,
  flagged when the production Δ is an upper bound), or √k for C = I.

``banded`` (p = b), ``banded (p = min(5, b))`` (the BLT's memory: 4 past noise vectors) and ``blt``
(4 buffers) are optimised for each (n, k, b) by the production code (mean error); the
independent column evaluates the coefficients it returns. "state" is the number of d-vectors the
noise stream keeps between rounds (``StreamingNoise``).

    PYTHONPATH=. python benchmarks/mf_loss_table.py [--ns 64 256 1024] [--ks 1 4 16]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from fl_lightning.privacy.correlated.banded_mf import optimise_banded
from fl_lightning.privacy.correlated.blt import blt_coefficients, optimise_blt
from fl_lightning.privacy.correlated.matrix_mechanism import (
    factorization,
    min_sep_sensitivity,
    sqrt_coefficients,
)
from fl_lightning.privacy.correlated.toeplitz_mf import toeplitz_loss

ARMS = (
    "identity",
    "tree (plain)",
    "tree (Honaker)",
    "bsr",
    "banded",
    "banded (p = min(5, b))",
    "blt",
)
BLT_BUFFERS = 4


# -- independent -----------------------------------------------------------------------------
def _toeplitz(c: np.ndarray, n: int) -> np.ndarray:
    m = np.zeros((n, n))
    for i in range(n):
        for j in range(max(0, i - len(c) + 1), i + 1):
            m[i, j] = c[i - j]
    return m


def _pattern(n: int, k: int, b: int) -> np.ndarray:
    u = np.zeros(n)
    for j in range(k):
        if j * b < n:
            u[j * b] = 1.0
    return u


def independent_toeplitz(c: np.ndarray, n: int, k: int, b: int) -> float:
    cm = _toeplitz(np.asarray(c, dtype=float)[:n], n)
    bm = np.tril(np.ones((n, n))) @ np.linalg.inv(cm)
    delta = np.linalg.norm(cm @ _pattern(n, k, b))
    return float(delta * math.sqrt(np.sum(bm**2) / n))


def _tree_c(n: int) -> tuple[np.ndarray, list[tuple[int, int]]]:
    nodes = [(lv, i) for lv in range(20) for i in range(n) if (i + 1) << lv <= n]
    c = np.zeros((len(nodes), n))
    for r, (lv, i) in enumerate(nodes):
        c[r, i * 2**lv : (i + 1) * 2**lv] = 1.0
    return c, nodes


def _perfect_tree_root_variance(height: int) -> float:
    """Var of the least-squares estimate of the sum of 2^h leaves from every node of a perfect
    tree of height h (unit noise per node): 1ᵀ(CᵀC)⁻¹1."""
    c, _ = _tree_c(2**height)
    ones = np.ones(2**height)
    # the least-squares estimate of x is (CᵀC)⁻¹Cᵀy; solve for the weights on y
    weights, *_ = np.linalg.lstsq(c.T @ c, ones, rcond=None)
    return float(ones @ weights)


def independent_tree(n: int, k: int, b: int, honaker: bool) -> float:
    c, _ = _tree_c(n)
    delta = np.linalg.norm(c @ _pattern(n, k, b))
    var = {h: (_perfect_tree_root_variance(h) if honaker else 1.0) for h in range(20) if 2**h <= n}
    total = 0.0
    for t in range(1, n + 1):
        total += sum(var[h] for h in range(t.bit_length()) if t >> h & 1)
    return float(delta * math.sqrt(total / n))


# -- production --------------------------------------------------------------------------------
def production(arm: str, n: int, k: int, b: int) -> tuple[float, float, bool, float]:
    """(RMSE, independent RMSE, Δ exact, seconds to optimise)."""
    start = time.perf_counter()
    if arm.startswith(("bsr", "banded", "blt")):
        if arm == "bsr":
            c = sqrt_coefficients(b)
        elif arm == "banded":
            c = optimise_banded(n, k, b, b)
        elif arm == "banded (p = min(5, b))":
            c = optimise_banded(n, k, b, min(5, b))
        else:
            c = blt_coefficients(*optimise_blt(n, k, b, BLT_BUFFERS), n)
        spent = time.perf_counter() - start
        rmse = math.sqrt(float(toeplitz_loss(torch.as_tensor(c), n, k, b, "mean")))
        return rmse, independent_toeplitz(c, n, k, b), True, spent
    if arm == "identity":
        bm, cm = factorization("identity", n)
        indep = math.sqrt(k) * math.sqrt(sum(range(1, n + 1)) / n)
    else:
        est = "honaker" if "Honaker" in arm else "plain"
        bm, cm = factorization("tree", n, estimator=est)
        indep = independent_tree(n, k, b, est == "honaker")
    delta, exact = min_sep_sensitivity(cm, k, b)
    rmse = delta * math.sqrt(float(np.sum(bm**2)) / n)
    return rmse, indep, exact, time.perf_counter() - start


def state(arm: str, n: int, b: int) -> int:
    """d-vectors the stream keeps between rounds: p − 1 past noises (banded), the buffers (BLT),
    the Honaker estimates of the decomposition of [0, t) (at most ⌊log₂ n⌋ + 1), none else."""
    if arm in ("bsr", "banded"):
        return b - 1
    if arm == "banded (p = min(5, b))":
        return min(5, b) - 1
    if arm == "blt":
        return BLT_BUFFERS
    if arm == "tree (Honaker)":
        return n.bit_length()
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ns", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 4, 16])
    args = parser.parse_args()
    print(
        "| n | k | b | factorisation | state | RMSE | independent | relative difference "
        "| seconds to optimise |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n in args.ns:
        for k in args.ks:
            b = n // k
            for arm in ARMS:
                rmse, indep, exact, spent = production(arm, n, k, b)
                rel = abs(rmse - indep) / indep
                note = ""
                if not exact:  # the bound, exact when the earliest pattern attains it
                    note = " (Δ bound, attained)" if rel < 1e-9 else " (Δ upper bound)"
                print(
                    f"| {n} | {k} | {b} | {arm} | {state(arm, n, b)} | {rmse:.6g}{note} "
                    f"| {indep:.6g} | {rel:.1e} "
                    f"| {spent:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
