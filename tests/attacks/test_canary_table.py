"""docs/audit.md's canary table (``benchmarks/canary_audit_table.py``): the page shows the
table the command renders from its stored JSON (``tests/test_docs_figures.py`` checks the
lines), and a row run again gives the figures stored for it."""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def table_module():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        return importlib.import_module("canary_audit_table")
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


def test_every_row_is_stored_and_shown_as_rendered():
    table = table_module()
    store = json.loads(table.STORE.read_text())
    assert {row.name for row in table.ROWS} == set(store)
    doc = (REPO / "docs" / "audit.md").read_text()
    assert table.render(store) in doc
    for name, row in store.items():
        assert row["observer"] in ("final", "all_models", "server"), name
        assert row["epsilon_lower_bound"] <= row["lower_bound_ceiling"] + 1e-9, name
        if math.isfinite(row["compared_epsilon"]) and "amplified" not in row["compared_with"]:
            assert row["epsilon_lower_bound"] <= row["compared_epsilon"], name  # valid bound


@pytest.mark.slow
def test_a_row_run_again_gives_its_stored_figures():
    table = table_module()
    store = json.loads(table.STORE.read_text())
    row = next(r for r in table.ROWS if r.name == "ddg_third_party")
    again = table.run_row(row)
    for key, value in store[row.name].items():
        if key not in ("seconds",):
            assert again[key] == pytest.approx(value), key
