"""Reading the papers' notes: the rows of a verbatim Markdown table after a heading, a printed
number as a float (None for NaN), a method name without its citation mark."""

from __future__ import annotations

import re


def md_table_after(text: str, heading: str) -> list[list[str]]:
    """The rows (header first, separator dropped) of the first Markdown table after a line
    starting with ``heading``."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(heading))
    rows: list[list[str]] = []
    for ln in lines[start + 1 :]:
        if ln.startswith("|"):
            cells = [c.strip() for c in ln.strip().strip("|").split("|")]
            if all(re.fullmatch(r":?-+:?", c) for c in cells):
                continue
            rows.append(cells)
        elif rows:
            break
    return rows


def num(cell: str) -> float | None:
    """A printed number (``88.34%``, ``**94.31%**``, ``8,109``); None for NaN / Nan."""
    c = cell.replace("*", "").replace("%", "").replace(",", "").strip()
    if c.lower() == "nan":
        return None
    m = re.match(r"^-?\d+(\.\d+)?", c)
    if m is None:
        raise ValueError(f"not a number: {cell!r}")
    return float(m.group(0))


def strip_ref(name: str) -> str:
    return re.sub(r"\s*\[\d+\]", "", name).replace("*", "").strip()
