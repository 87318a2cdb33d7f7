"""docs/audit.md's "accountant ε vs one-run estimate vs lower bound" table from the audit.json
files ``benchmarks/dp_ftrl_audit_runs.sh`` stored.

    python benchmarks/dp_ftrl_audit_table.py benchmarks/results/dp_ftrl_audit
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(folder: str) -> int:
    print("| run | guarantee (accountant) | accountant ε | one-run estimate (95 % interval) "
          "| lower bound (95 %) | canaries inserted / guesses right |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for path in sorted(Path(folder).glob("*.audit.json")):
        res = json.loads(path.read_text())
        c = res["attacks"]["canaries"]
        print(
            f"| `{path.name.removesuffix('.audit.json')}` | {res['guarantee']} | "
            f"{res['accountant_epsilon']:.3g} | {c['epsilon_estimate']:.3g} "
            f"({c['epsilon_estimate_low']:.3g}–{c['epsilon_estimate_high']:.3g}) | "
            f"{c['epsilon_lower_bound']:.3g} | {c['inserted']} of {c['num_canaries']}, "
            f"{c['mean_participations']:.3g} participations each / {c['correct_guesses']} of "
            f"{c['guesses']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
