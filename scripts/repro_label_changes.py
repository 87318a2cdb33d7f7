"""The verdicts whose label changed between a committed report and the working tree's, for the
CHANGELOG (issue 57: "the CHANGELOG lists every verdict whose label changed, old -> new, and why").

Verdicts are matched by their claim text in ``docs/reproductions/<paper>.json``; a verdict that
is new or gone is listed as such. For each change it says what else changed with it: the runs it
uses (re-run rows replace rows that recorded no threads or a +dirty commit), its estimate and
interval, or only the rules.

    python scripts/repro_label_changes.py --ref e42180e 000 001 002 003 004
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def verdicts_at(ref: str | None, paper: str) -> dict[str, dict[str, Any]]:
    """The verdicts of ``paper``'s report at git ``ref`` (None: the working tree), by claim."""
    path = f"docs/reproductions/{paper}.json"
    if ref is None:
        text = (REPO / path).read_text()
    else:
        text = subprocess.run(
            ["git", "show", f"{ref}:{path}"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout
    return {str(v.get("claim")): v for v in json.loads(text).get("verdicts", [])}


def _test(v: dict[str, Any]) -> str:
    test = v.get("test") or {}
    if "estimate" not in test:
        return "no test"
    lo, hi = test.get("ci95", [None, None])
    return f"{test['estimate']:+.2f} [{lo:+.2f}, {hi:+.2f}], n = {test.get('n')}"


def changes(ref: str, paper: str) -> list[str]:
    old, new = verdicts_at(ref, paper), verdicts_at(None, paper)
    lines = []
    for claim in sorted(old.keys() | new.keys()):
        a, b = old.get(claim), new.get(claim)
        if a is None or b is None:
            state = "new" if a is None else "gone"
            label = (b or a or {}).get("verdict")
            lines.append(f"- {paper}: {claim}: {state} ({label})")
            continue
        if a.get("verdict") == b.get("verdict"):
            continue
        why = []
        if sorted(a.get("runs") or []) != sorted(b.get("runs") or []):
            why.append("its runs changed")
        if _test(a) != _test(b):
            why.append(f"test {_test(a)} -> {_test(b)}")
        if not why:
            why.append("the same runs and test: the rules or the reason changed")
        reason = f" ({b.get('reason')})" if b.get("verdict") == "untestable" else ""
        lines.append(
            f"- {paper}: {claim}: {a.get('verdict')} -> {b.get('verdict')}{reason}; "
            + "; ".join(why)
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("papers", nargs="+")
    parser.add_argument("--ref", required=True, help="the git commit of the earlier reports")
    args = parser.parse_args()
    for paper in args.papers:
        for line in changes(args.ref, paper):
            print(line)


if __name__ == "__main__":
    main()
