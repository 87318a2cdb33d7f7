"""CHANGELOG.md keeps its shape: one title, one Unreleased section, no entry written twice.

A scripted edit once replaced the empty string in it (``str.replace("", entry)``), writing an
entry between every two characters: 384,657 lines, and no test noticed.
"""

from __future__ import annotations

from collections import Counter

from tests.conftest import REPO


def test_changelog_has_its_shape_and_no_entry_twice() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    lines = text.splitlines()
    assert lines[0] == "# Changelog"
    assert lines.count("## Unreleased") == 1
    entries = [e.strip() for e in ("\n" + text).split("\n- ")[1:]]
    twice = [e[:80] for e, n in Counter(entries).items() if n > 1]
    assert not twice, f"entries written twice: {twice}"
