"""The README's ``simulate`` example ("Your own model, data and strategy") runs as written, as a
pytest file beside ``examples/custom/my_fl.py``."""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def readme_example() -> str:
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    (example,) = [b for b in blocks if "simulate(" in b]
    return example


def test_the_readme_simulate_example_runs(monkeypatch):
    code = readme_example()
    assert len([line for line in code.splitlines() if line.strip()]) <= 12  # pasteable
    monkeypatch.syspath_prepend(str(REPO / "examples" / "custom"))
    monkeypatch.delitem(sys.modules, "my_fl", raising=False)
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) == 1
    tests[0]()
