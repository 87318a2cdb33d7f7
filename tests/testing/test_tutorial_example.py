"""The tutorial's ``simulate`` example (docs/tutorials/custom_strategy.md, "Test it without
Lightning") runs as written, as a pytest file beside ``examples/custom/my_fl.py``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "tutorials" / "custom_strategy.md"


def tutorial_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    (example,) = [b for b in blocks if "simulate(" in b and "def test_" in b]
    return example


def test_the_tutorial_simulate_example_runs(monkeypatch):
    code = tutorial_example()
    assert len([line for line in code.splitlines() if line.strip()]) <= 12  # pasteable
    monkeypatch.syspath_prepend(str(REPO / "examples" / "custom"))
    monkeypatch.delitem(sys.modules, "my_fl", raising=False)
    namespace: dict = {}
    exec(compile(code, str(PAGE), "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) == 1
    tests[0]()
