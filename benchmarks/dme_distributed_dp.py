"""Distributed mean estimation (Kairouz, Liu & Steinke 2021, §6.1; the reference's
``distributed_dp/dme_run.py``): the MSE of the mean of n clients' vectors released by the
distributed discrete Gaussian or Skellam behind SecAgg, against the central continuous
Gaussian at the same (ε, δ), over the bits b of the modular field.

Setting (as dme_run.py): n vectors drawn uniformly on the sphere of radius C = 1 in d
dimensions, one release (no sampling, one round), δ = 1e-5, β = e^(−1/2), k = 2 standard
deviations of the encoded sum within 2^b (dme_run's flag default), the sum's norm bounded by
nC. Central Gaussian: the analytic Gaussian (Balle & Wang 2018) of sensitivity C on the sum, and
the same Gaussian priced by RDP at the distributed mechanisms' orders and conversion (the
distributed rows' accounting, so the gap between the two central rows is the accounting's and
the rest is the discretisation's).
Distributed: each client's vector through this package's own client path (rotation, scaling,
conditional rounding, its noise share, wrap mod 2^b: ``SecAggDistributedDP.encode``'s
functions), summed mod 2^b (what the SecAgg server unmasks to, exactly:
tests/privacy/test_secagg.py) and decoded; s and the share's σ calibrated to the same ε by
``distributed.accounting.local_std_for_epsilon``. Masks are not drawn here: they cancel to the
integer, so the MSE is the same with or without them.

    PYTHONPATH=. python benchmarks/dme_distributed_dp.py [--n 100] [--d 16384] [--repeat 3]

prints docs/distributed_dp.md's table (mean MSE over repeats ± its standard deviation) and
writes the plot with ``--plot PATH``.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch

from fl_lightning.privacy.accounting.analysis import gaussian_epsilon, geometric_bisection
from fl_lightning.privacy.distributed.accounting import (
    ORDERS,
    local_std_for_epsilon,
    rdp_to_epsilon,
)
from fl_lightning.privacy.distributed.registry import distributed_noise
from fl_lightning.privacy.distributed.secagg.encoding import (
    center,
    conditional_round,
    padded_dimension,
    rotate,
    rotation_signs,
    rounded_l2_bound,
    unrotate,
    wrap,
)

DELTA = 1e-5
BETA = math.exp(-0.5)


def analytic_gaussian_multiplier(epsilon: float) -> float:
    """σ/C of the Gaussian with ε(σ) = ``epsilon`` at δ (bisection on the exact ε)."""
    return geometric_bisection(lambda s: gaussian_epsilon(s, DELTA) > epsilon, 1e-3, 1e3, 80)


def rdp_gaussian_multiplier(epsilon: float) -> float:
    """σ/C of the Gaussian priced by RDP (α/(2σ²)) with the same integer orders and conversion
    as the distributed mechanisms: separates the accounting's loss from the discretisation's."""
    orders = np.asarray(ORDERS, dtype=float)
    return geometric_bisection(
        lambda s: rdp_to_epsilon(orders / (2 * s**2), DELTA) > epsilon, 1e-3, 1e3, 80
    )


def central_mse(x: torch.Tensor, epsilon: float, g: torch.Generator, *, rdp: bool) -> float:
    n, d = x.shape
    sigma = rdp_gaussian_multiplier(epsilon) if rdp else analytic_gaussian_multiplier(epsilon)
    noisy = x.sum(0) + sigma * torch.randn(d, generator=g, dtype=torch.float64)
    return float(((noisy / n - x.mean(0)) ** 2).mean())


def distributed_mse(
    x: torch.Tensor, mechanism: str, bits: int, epsilon: float, k: float, g: torch.Generator
) -> float:
    n, d = x.shape
    padded = padded_dimension(d)
    scale, std = local_std_for_epsilon(
        mechanism=mechanism, epsilon=epsilon, delta=DELTA, clip_norm=1.0, bits=bits,
        clients=n, dim=padded, beta=BETA, k_stddevs=k,
    )  # fmt: skip
    signs = rotation_signs(padded, generator=g)
    noise = distributed_noise(mechanism)
    bound = rounded_l2_bound(scale, BETA, padded)
    total = torch.zeros(padded, dtype=torch.int64)
    for row in x:
        encoded = conditional_round(rotate(row, signs) * scale, bound, generator=g)
        encoded = encoded + noise.sample(padded, (std * scale) ** 2, generator=g)
        total = wrap(total + wrap(encoded, bits), bits)
    decoded = unrotate(center(total, bits).double() / scale, signs, d)
    return float(((decoded / n - x.mean(0)) ** 2).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--d", type=int, default=1 << 14)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 3.0, 10.0])
    parser.add_argument("--bits", type=int, nargs="+", default=[12, 14, 16, 18, 20])
    parser.add_argument("--k", type=float, default=2.0)
    parser.add_argument("--plot", default="")
    args = parser.parse_args()
    start = time.perf_counter()
    results: dict[tuple[str, int, float], list[float]] = {}
    for rep in range(args.repeat):
        g = torch.Generator().manual_seed(rep)
        x = torch.randn(args.n, args.d, generator=g, dtype=torch.float64)
        x /= torch.linalg.vector_norm(x, dim=1, keepdim=True)
        for eps in args.epsilons:
            results.setdefault(("gaussian", 0, eps), []).append(central_mse(x, eps, g, rdp=False))
            results.setdefault(("gaussian_rdp", 0, eps), []).append(
                central_mse(x, eps, g, rdp=True)
            )
            for mech in ("ddg", "skellam"):
                for b in args.bits:
                    mse = distributed_mse(x, mech, b, eps, args.k, g)
                    results.setdefault((mech, b, eps), []).append(mse)
                    print(f"# repeat {rep} ε = {eps:g} {mech} b = {b}: {mse:.4g}", flush=True)
    seconds = time.perf_counter() - start
    print(f"n = {args.n}, d = {args.d}, δ = {DELTA:g}, k = {args.k:g}, {args.repeat} repeats "
          f"({seconds:.0f} s); MSE of the mean, mean ± std over repeats\n")  # fmt: skip
    head = " | ".join(f"ε = {e:g}" for e in args.epsilons)
    print(f"| mechanism | bits | {head} |")
    print("|---|---|" + "---|" * len(args.epsilons))

    def cell(key: tuple[str, int, float]) -> str:
        v = np.asarray(results[key])
        return f"{v.mean():.3g} ± {v.std(ddof=1) if len(v) > 1 else 0.0:.2g}"

    for name, key in (("central Gaussian (exact ε)", "gaussian"),
                      ("central Gaussian (RDP, same orders)", "gaussian_rdp")):  # fmt: skip
        cells = " | ".join(cell((key, 0, e)) for e in args.epsilons)
        print(f"| {name} | — | {cells} |")
    for mech in ("ddg", "skellam"):
        for b in args.bits:
            cells = " | ".join(cell((mech, b, e)) for e in args.epsilons)
            print(f"| {mech} | {b} | {cells} |")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(args.epsilons), figsize=(4 * len(args.epsilons), 3.2))
        for ax, e in zip(np.atleast_1d(axes), args.epsilons, strict=True):
            ax.axhline(
                np.mean(results[("gaussian", 0, e)]),
                color="k",
                ls="--",
                label="central Gaussian (exact ε)",
            )
            ax.axhline(np.mean(results[("gaussian_rdp", 0, e)]), color="grey", ls=":",
                       label="central Gaussian (RDP)")  # fmt: skip
            for mech in ("ddg", "skellam"):
                ax.plot(args.bits, [np.mean(results[(mech, b, e)]) for b in args.bits],
                        marker="o", label=mech)  # fmt: skip
            ax.set_yscale("log")
            ax.set_xlabel("bits b")
            ax.set_title(f"ε = {e:g}")
        np.atleast_1d(axes)[0].set_ylabel("MSE of the mean")
        np.atleast_1d(axes)[0].legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()
