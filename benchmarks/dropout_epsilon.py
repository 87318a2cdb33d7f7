"""ε against the dropout rate, in the setting of the reference's
``distributed_dp/plot_client_dropout.py`` (Kairouz, Liu & Steinke 2021, the client-dropout
figure): the distributed discrete Gaussian calibrated to an initial ε for n = 100 clients every
round (q = 1), T = 1500 rounds, b = 32 bits, d = 2^20, k = 4, C = 1, β = e^(−1/2),
δ = 1e-5; then every round priced with the survivors' noise, n' = round(n·(1 − rate)), as this
package prices a round with dropouts (``privacy/distributed/accounting.py``).

    PYTHONPATH=. python benchmarks/dropout_epsilon.py [--plot PATH]
"""

from __future__ import annotations

import argparse
import math

from fl_lightning.privacy.accounting.events import DistributedNoiseEvent
from fl_lightning.privacy.distributed.accounting import distributed_epsilon, local_std_for_epsilon

N, T, BITS, DIM, K, DELTA, BETA = 100, 1500, 32, 1 << 20, 4.0, 1e-5, math.exp(-0.5)
RATES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", default="")
    args = parser.parse_args()
    curves = {}
    for eps0 in (1.0, 2.0, 4.0, 6.0, 8.0):
        scale, std = local_std_for_epsilon(
            mechanism="ddg", epsilon=eps0, delta=DELTA, clip_norm=1.0, bits=BITS, clients=N,
            dim=DIM, beta=BETA, k_stddevs=K, rounds=T,
        )  # fmt: skip
        row = []
        for rate in RATES:
            n = round(N * (1 - rate))
            event = DistributedNoiseEvent("ddg", 1.0, scale, (std * scale) ** 2, n, DIM, BETA,
                                          BITS, 1.0)  # fmt: skip
            row.append(distributed_epsilon([event] * T, DELTA))
        curves[eps0] = row
    print("| initial ε | " + " | ".join(f"{r:.0%} dropped" for r in RATES) + " |")
    print("|---|" + "---|" * len(RATES))
    for eps0, row in curves.items():
        print(f"| {eps0:g} | " + " | ".join(f"{e:.3g}" for e in row) + " |")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(4.3, 2.6), constrained_layout=True)
        for eps0, row in curves.items():
            ax.plot(RATES, row, marker="o", label=f"initial ε = {eps0:g}")
        ax.set_xlabel("dropout rate")
        ax.set_ylabel("ε with the survivors' noise")
        ax.legend(fontsize=7)
        fig.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()
