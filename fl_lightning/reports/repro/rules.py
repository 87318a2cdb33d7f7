"""The rules in force: an id of the code that turns a claim's tests into its label.

A verdict follows from its registered plan *and* from the logic that reads the plan's test
(the untestable reasons, the minimum activity, the label from the interval). That logic lives in
:data:`RULES_FILES`; its id is the sha256 (first 16 hex digits) of their text, at the checkout
now (:func:`rules_id`) or at a commit (the rules in force when a plan was registered, read with
``git show``). A confirmatory verdict whose plan was registered under other rules shows the label
the registered rules gave beside the one shown (``plan_deviations``)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from fl_lightning.reports.repro.provenance import REPO, _git

RULES_FILES = ("fl_lightning/reports/repro/claims.py", "fl_lightning/reports/repro/stats.py")


def _digest(texts: list[str]) -> str:
    return hashlib.sha256("".join(texts).encode()).hexdigest()[:16]


def rules_id(root: Path = REPO) -> str:
    """The id of the claim logic of the checkout at ``root`` (its files as they are now)."""
    return _digest([(root / f).read_text() for f in RULES_FILES])


@functools.lru_cache(maxsize=32)
def rules_at(commit: str, root: Path = REPO) -> str | None:
    """The id of the claim logic at ``commit`` (None where git cannot show it, e.g. outside a
    clone with that history)."""
    texts = []
    for f in RULES_FILES:
        text = _git(["show", f"{commit}:{f}"], root)
        if text is None:
            return None
        texts.append(text)
    return _digest(texts)
