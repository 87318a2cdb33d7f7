"""The record-level budget stop with its screening bound at integer RDP orders, against all orders.

``PrivacyAccountant`` takes the max over clients of each client's ε; a client whose quick RDP
bound is already below the running max cannot be the worst and is not composed under PLD/PRV
(``_screened_epsilon``). The bound was Opacus' RDP at all 151 default orders, whose 90
fractional orders are summed term by term (10–120 ms for each new (σ, q)); it is now the RDP at
the 61 integer orders only (``analysis.rdp_screen_epsilon``, a finite sum).

Two arms, interleaved and repeated, caches emptied before each: the accountant alone as
``training_step`` drives it (``would_exceed``, ``record``, ``report`` a round;
``accountant_share.accounting_only``) over ``--rounds`` rounds of 10 of 100 clients, each one
DP-SGD step at q = 4/nᵢ with the sizes of a Dirichlet(1.0) split of the digits training set
(so nearly every client has its own rate), with the screen at

* ``all orders``: the reference (the bound as it was, ``epsilon(history, δ, "rdp")``);
* ``integer orders``: ``rdp_screen_epsilon``, as shipped.

Reported: the median seconds of each arm, their ratio, and each arm's ε (they must be equal:
the screen only decides which clients are composed). Appended to
``DIR/accountant_screen.{json,md}`` (``--out DIR``) with the machine and its load.

    python benchmarks/accountant_screen.py [--rounds 100] [--repeats 5] [--accountant pld]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _record import out_dir  # noqa: E402
from accountant_share import compare_arms  # noqa: E402


def client_sizes() -> list[int]:
    from fl_lightning.data.datamodule import FederatedDataModule

    data = FederatedDataModule(dataset="digits", num_clients=100, partitioner="dirichlet",
                               alpha=1.0, seed=0)  # fmt: skip
    data.setup("fit")
    return [int(n) for n in data.client_sizes().tolist()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--accountant", default="pld", choices=["pld", "prv"])
    parser.add_argument("--out", default=None, help="directory to append the run to")
    parser.add_argument("--note", default=None)
    args = parser.parse_args()
    out = out_dir(parser, args.out, "accountant_screen")

    import fl_lightning.privacy.guarantee.accountant as accountant_module
    from fl_lightning.privacy.accounting.analysis import History, epsilon, rdp_screen_epsilon

    def all_orders(history: History, delta: float) -> float:  # the screen as it was
        return epsilon(history, delta, "rdp")

    compare_arms(
        out,
        "accountant_screen",
        target=(accountant_module, "rdp_screen_epsilon"),
        arms={"all orders": all_orders, "integer orders": rdp_screen_epsilon},
        rounds=args.rounds,
        accountant=args.accountant,
        sizes=client_sizes(),
        repeats=args.repeats,
        title=f"accountant {args.accountant}, {args.rounds} rounds, {args.repeats} repeats",
        intro="# The budget stop's screening bound (benchmarks/accountant_screen.py)\n",
        column="screen",
        ratio="all / integer orders",
        differ="the screen changed the headline",
        note=args.note,
        epsilon_format="{:.6f}",
    )


if __name__ == "__main__":
    main()
