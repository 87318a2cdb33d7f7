"""The PRV accountant with its discretisation domain from cached per-step RDP, against Opacus'.

Opacus' ``PRVAccountant`` sizes its domain (Gopi et al. 2021, Remark 5.6) from RDP ε at its
151 default orders, recomputing every row's RDP on each call; the 99 fractional orders' series
are summed term by term, 10–120 ms per row. ``analysis._prv_domain`` computes the same domain
from the per-step RDP cached per (σ, q), scaled by the row's steps, so a client's growing
history pays for its (σ, q) once.

Two arms, interleaved and repeated, caches emptied before each: the accountant alone as
``training_step`` drives it (``would_exceed``, ``record``, ``report`` a round;
``accountant_share.accounting_only``) on the PRV accountant, over ``--rounds`` rounds of 10 of
100 clients, each one DP-SGD step at q = 4/nᵢ with the sizes of a Dirichlet(1.0) split of the
digits training set, with the domain from

* ``Opacus' domain``: the reference, Opacus' own ``PRVAccountant``;
* ``cached domain``: ``analysis._prv_accountant_class()``, as shipped.

Reported: the median seconds of each arm, their ratio, and each arm's ε (they must be equal to
the last digit). Appended to ``DIR/accountant_prv_domain.{json,md}`` (``--out DIR``) with the
machine and its load.

    python benchmarks/accountant_prv_domain.py [--rounds 30] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from _record import out_dir  # noqa: E402
from accountant_screen import client_sizes  # noqa: E402
from accountant_share import compare_arms  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="directory to append the run to")
    parser.add_argument("--note", default=None)
    args = parser.parse_args()
    out = out_dir(parser, args.out, "accountant_prv_domain")

    from opacus.accountants import PRVAccountant

    import fl_lightning.privacy.accounting.analysis as analysis

    compare_arms(
        out,
        "accountant_prv_domain",
        target=(analysis, "_prv_accountant_class"),
        arms={
            "Opacus' domain": lambda: PRVAccountant,
            "cached domain": analysis._prv_accountant_class,
        },
        rounds=args.rounds,
        accountant="prv",
        sizes=client_sizes(),
        repeats=args.repeats,
        title=f"PRV accountant, {args.rounds} rounds, {args.repeats} repeats",
        intro="# The PRV accountant's domain (benchmarks/accountant_prv_domain.py)\n",
        column="domain",
        ratio="Opacus' / cached domain",
        differ="the cached domain changed the headline",
        note=args.note,
    )


if __name__ == "__main__":
    main()
