"""Regenerates the paper tables (``<paper>.json`` beside this file) from the papers' notes.

``python -m fl_lightning.reports.paper_tables.build ../shared/papers`` parses the verbatim
Markdown tables of ``shared/papers/<paper>.notes.md`` (the reproduction targets) into long-format
cells and adds the captions and settings written in that paper's module (``p<NNN>_<name>.py``;
reading the Markdown: ``notes_markdown.py``). The JSON files are committed; a test re-runs this
parser on the notes, when they are present, and compares.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fl_lightning.reports.paper_tables.p000_dp_fedasgp import p000
from fl_lightning.reports.paper_tables.p001_gcfl import p001
from fl_lightning.reports.paper_tables.p002_dpfl_agn import p002
from fl_lightning.reports.paper_tables.p003_spm_fl import p003
from fl_lightning.reports.paper_tables.p004_adp_fl import p004

HERE = Path(__file__).resolve().parent

BUILDERS = {
    "000-dp-fedasgp": p000,
    "001-gcfl": p001,
    "002-dpfl-agn": p002,
    "003-spm-fl": p003,
    "004-adp-fl-async": p004,
}


def build(notes_dir: Path) -> dict[str, dict[str, Any]]:
    """Every paper's tables, parsed from ``<notes_dir>/<paper>.notes.md``."""
    return {
        stem[:3]: fn((notes_dir / f"{stem}.notes.md").read_text()) for stem, fn in BUILDERS.items()
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    notes_dir = Path(args[0] if args else "../shared/papers")
    for paper, data in build(notes_dir).items():
        path = HERE / f"{paper}.json"
        path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        n = sum(len(t["cells"]) for t in data["tables"])
        print(f"{path.name}: {len(data['tables'])} tables, {n} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
