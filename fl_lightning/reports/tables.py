"""The five papers' result tables as data (``paper_tables/<paper>.json``) and a loader.

Every table is long-format: ``dims`` names the dimensions (method, epsilon, dataset, ...) and
each cell is a mapping of those dimensions plus ``value`` (None where the paper prints NaN).
Captions, the paper's settings and remarks on inconsistencies come with each table.

    >>> from fl_lightning.reports.tables import load_table
    >>> t = load_table("000", "IV")
    >>> t.value(epsilon=0.1, method="DP-FedAvg", dataset="MNIST", model="CNN")
    88.34
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any


def normalize(name: Any) -> str:
    """A name reduced to lower-case letters and digits (``DP-FedAvg`` -> ``dpfedavg``)."""
    return re.sub(r"[^a-z0-9]", "", str(name).lower())


@dataclass(frozen=True)
class PaperTable:
    """One result table of a paper."""

    paper: str
    id: str
    caption: str
    metric: str
    unit: str
    higher_is_better: bool
    dims: tuple[str, ...]
    cells: tuple[dict[str, Any], ...]
    settings: dict[str, Any] = field(default_factory=dict)
    remarks: tuple[str, ...] = ()
    metric_columns: dict[str, str] = field(default_factory=dict)

    def levels(self, dim: str) -> list[Any]:
        """The distinct values of one dimension, in the table's order."""
        seen: list[Any] = []
        for c in self.cells:
            if c.get(dim) not in seen:
                seen.append(c.get(dim))
        return seen

    def select(self, **where: Any) -> list[dict[str, Any]]:
        """The cells matching every ``dim=value`` given (numbers compared as floats)."""
        return [c for c in self.cells if all(_same(c.get(k), v) for k, v in where.items())]

    def value(self, **key: Any) -> float | None:
        """The value of the one cell at ``key``; KeyError if none or several match."""
        hits = self.select(**key)
        if len(hits) != 1:
            raise KeyError(f"table {self.paper}/{self.id}: {len(hits)} cells match {key}")
        return hits[0]["value"]


@dataclass(frozen=True)
class Paper:
    """A paper: its identity, its method names (with aliases) and its tables."""

    id: str
    name: str
    title: str
    citation: str
    notes: str
    methods: dict[str, list[str]]
    tables: dict[str, PaperTable]

    def table(self, table_id: str) -> PaperTable:
        key = str(table_id).strip()
        for tid, t in self.tables.items():
            if tid.lower() == key.lower() or tid.lower() == key.lower().removeprefix("table "):
                return t
        raise KeyError(
            f"paper {self.id} ({self.name}) has no table {table_id!r}; "
            f"tables: {', '.join(self.tables)}"
        )

    def method_for(self, name: Any, among: list[str] | None = None) -> str | None:
        """The paper's method name for a run's label (a name, an alias, a class path or a
        config file path), matched on letters and digits only; where two of the paper's names
        share an alias (DP-SGD / DPSGD), the one among ``among`` (a table's methods) wins."""
        text = str(name)
        candidates = {normalize(text), normalize(text.rsplit(".", 1)[-1])}
        stem = re.sub(r"\.ya?ml$", "", text.rsplit("/", 1)[-1])
        candidates.add(normalize(stem))
        hits = [
            method
            for method, aliases in self.methods.items()
            if candidates & {normalize(method), *map(normalize, aliases)}
        ]
        preferred = [m for m in hits if among and m in among]
        return next(iter(preferred or hits), None)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        try:
            return abs(float(a) - float(b)) < 1e-9
        except (TypeError, ValueError):
            return False
    return a == b or (a is not None and b is not None and normalize(a) == normalize(b))


def list_papers() -> list[str]:
    """The ids of the papers with tables (``000`` ... ``004``)."""
    files = resources.files("fl_lightning.reports") / "paper_tables"
    return sorted(p.name[:-5] for p in files.iterdir() if p.name.endswith(".json"))


@cache
def _raw(paper_id: str) -> dict[str, Any]:
    path = resources.files("fl_lightning.reports") / "paper_tables" / f"{paper_id}.json"
    return json.loads(path.read_text(encoding="utf-8"))


def _resolve(paper: str) -> str:
    key = str(paper).strip()
    ids = list_papers()
    if key.isdigit() and key.zfill(3) in ids:
        return key.zfill(3)
    for pid in ids:
        if normalize(_raw(pid)["name"]) == normalize(key):
            return pid
    raise KeyError(f"unknown paper {paper!r}; papers: {', '.join(ids)}")


def load_paper(paper: str) -> Paper:
    """A paper by id (``000``, ``0``) or method name (``DP-FedASGP``)."""
    pid = _resolve(paper)
    raw = _raw(pid)
    tables = {
        t["id"]: PaperTable(
            paper=pid,
            id=t["id"],
            caption=t["caption"],
            metric=t["metric"],
            unit=t.get("unit", ""),
            higher_is_better=bool(t.get("higher_is_better", True)),
            dims=tuple(t["dims"]),
            cells=tuple(t["cells"]),
            settings=t.get("settings", {}),
            remarks=tuple(t.get("remarks", ())),
            metric_columns=t.get("metric_columns", {}),
        )
        for t in raw["tables"]
    }
    return Paper(
        id=pid,
        name=raw["name"],
        title=raw["title"],
        citation=raw["citation"],
        notes=raw["notes"],
        methods=raw.get("methods", {}),
        tables=tables,
    )


def load_table(paper: str, table: str) -> PaperTable:
    """One table: ``load_table("000", "IV")``."""
    return load_paper(paper).table(table)
