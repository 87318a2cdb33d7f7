"""Nested config dicts as flat dotted keys (``{"a": {"b": 1}}`` → ``{"a.b": 1}``)."""

from __future__ import annotations

from typing import Any


def flatten_tree(tree: Any, prefix: str = "", *, keep_empty: bool = False) -> dict[str, Any]:
    """Dotted keys of a nested dict; an empty dict is dropped, or kept as a leaf value
    with ``keep_empty`` (so a run that sets ``{}`` differs from one that sets nothing)."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and (v or not keep_empty):
            out.update(flatten_tree(v, key, keep_empty=keep_empty))
        else:
            out[key] = v
    return out
