"""Recording a benchmark run: the Markdown section and the JSON list under ``--out``.

Shared by the benchmarks that keep ``<name>.json`` (every run appended) and ``<name>.md`` (a
title once, then one section per run) in ``benchmarks/results/``. The machine is measured
(``machine``, ``os.getloadavg`` around the run), never typed in.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
from pathlib import Path


def machine(threads: int | None = None, note: str | None = None) -> dict:
    """The machine as measured now: platform, processor, core count (``os.cpu_count``), torch
    threads (``torch.get_num_threads()`` unless given) and torch version; ``note`` (free text
    from the command line) is recorded beside these, only when given."""
    import torch

    found = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads() if threads is None else threads,
        "torch": torch.__version__,
    }
    return found if note is None else {**found, "note": note}


def out_dir(parser: argparse.ArgumentParser, out: str | None, name: str) -> Path | None:
    """``--out`` checked: a directory, where ``name``.md/.json are appended to. A path
    ``DIR/<name>.md`` (the older file form of ``--out``) means ``DIR``; anything else is a
    one-line ``parser.error`` naming ``--out``."""
    if out is None:
        return None
    path = Path(out)
    if path.is_dir():
        return path
    if path.name in (f"{name}.md", f"{name}.json") and path.parent.is_dir():
        return path.parent
    parser.error(f"--out: {out} is not a directory (the run is appended to <dir>/{name}.md)")
    return None  # unreachable: parser.error exits


def commit() -> str:
    """The code measured: ``git rev-parse --short HEAD`` of this checkout, ``+dirty`` when a
    tracked file has uncommitted changes."""
    repo = Path(__file__).resolve().parents[1]
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return head + ("+dirty" if dirty else "")


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
    if not isinstance(previous, list):  # an older single-run record: kept as the first entry
        previous = [previous]
    path_json.write_text(json.dumps([*previous, result], indent=1) + "\n")
    path_md = out / f"{name}.md"
    if not path_md.exists():
        path_md.write_text(intro)
    with open(path_md, "a") as fh:
        fh.write("\n" + text)


def record_run(
    out: str | Path | None,
    name: str,
    *,
    title: str,
    intro: str,
    lines: list[str],
    load_before: tuple,
    command: str,
    threads: int | None = None,
    note: str | None = None,
    machine_extra: dict | None = None,
    **fields: object,
) -> str:
    """Records a run that has just ended; returns its Markdown section (also printed).

    Measures the load average after the run (``os.getloadavg``), the UTC date-time and the
    machine (``machine(threads, note)``, with ``machine_extra``'s keys added), then builds the
    JSON record ``{"date_utc", "command", "machine", "load_average_before",
    "load_average_after", **fields}`` and the section: ``run_header`` titled
    ``"<date> UTC: <title>"``, then ``lines`` (the Markdown after the header, one string a line;
    start with ``""`` for a blank line). Both are appended to ``out/<name>.{json,md}``
    (``append_run``, ``intro`` starting a new ``.md``) unless ``out`` is None."""
    load_after = os.getloadavg()
    now = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M}"
    found = machine(threads, note)
    if machine_extra:
        found = {**found, **machine_extra}
    result = {
        "date_utc": now,
        "command": command,
        "machine": found,
        "load_average_before": load_before,
        "load_average_after": load_after,
        **fields,
    }
    text = run_header(f"{now} UTC: {title}", found, load_before, load_after)
    text += "\n".join(lines) + "\n"
    print(text, flush=True)
    if out is not None:
        append_run(out, name, result, text, intro)
    return text
