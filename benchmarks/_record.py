"""Recording a benchmark run: the Markdown section and the JSON list under ``--out``.

Shared by the benchmarks that keep ``<name>.json`` (every run appended) and ``<name>.md`` (a
title once, then one section per run) in ``benchmarks/results/``.
"""

from __future__ import annotations

import json
from pathlib import Path


def run_header(title: str, machine: object, load_before: tuple, load_after: tuple) -> str:
    """A run's section header: its title, the machine and the load average around it."""
    return (
        f"### {title}\n\n"
        f"- machine: {machine}\n"
        f"- load average (1/5/15 min) before: "
        f"{', '.join(f'{v:.1f}' for v in load_before)}; after: "
        f"{', '.join(f'{v:.1f}' for v in load_after)}\n"
    )


def append_run(out: str | Path, name: str, result: dict, text: str, intro: str) -> None:
    """Appends ``result`` to ``out/<name>.json`` and ``text`` to ``out/<name>.md`` (which starts
    with ``intro`` when new); nothing recorded earlier is rewritten."""
    out = Path(out)
    path_json = out / f"{name}.json"
    previous = json.loads(path_json.read_text()) if path_json.exists() else []
    path_json.write_text(json.dumps([*previous, result], indent=1) + "\n")
    path_md = out / f"{name}.md"
    if not path_md.exists():
        path_md.write_text(intro)
    with open(path_md, "a") as fh:
        fh.write("\n" + text)
