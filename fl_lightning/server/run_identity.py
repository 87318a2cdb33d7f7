"""What every process of a run must agree on, as a rank-independent description.

Under DDP each rank builds the run from the same config; :func:`resolved_config` describes the
round settings, the local loop, the strategy's public settings, the data and the rounds, and
``server/distributed.py: check_ranks_agree`` compares its fingerprint across ranks before the
first collective, so that two ranks never train different federations silently.
"""

from __future__ import annotations

from typing import Any

import torch

_SKIP = object()


def describe_setting(value: Any, depth: int = 0) -> Any:
    """A rank-independent description of a strategy attribute for the config hash (plain
    values as they are, objects by their public attributes); ``_SKIP`` for what describes no
    setting (callables, tensors, process-local handles whose repr carries a memory address)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if depth > 4 or callable(value) or isinstance(value, torch.Tensor):
        return _SKIP
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [describe_setting(v, depth + 1) for v in value]
        items = [v for v in items if v is not _SKIP]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, dict):
        out = {repr(k): describe_setting(v, depth + 1) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not _SKIP}
    if hasattr(value, "__dict__"):
        public = {k: v for k, v in vars(value).items() if not k.startswith("_")}
        return [type(value).__qualname__, describe_setting(public, depth + 1)]
    text = repr(value)
    return _SKIP if " at 0x" in text else text


def resolved_config(
    *,
    hparams: dict[str, Any],
    training_config: Any,
    net: torch.nn.Module,
    strategy: Any,
    data_hparams: dict[str, Any],
    rounds: int,
) -> dict[str, Any]:
    """What every rank must agree on: round settings, local loop, strategy, data, rounds."""
    public = {k: v for k, v in vars(strategy).items() if not k.startswith("_")}
    return {
        "model": dict(hparams),
        "client": repr(training_config),
        "net": repr(net),
        "strategy": [type(strategy).__qualname__, describe_setting(public)],
        "data": dict(data_hparams),
        "rounds": int(rounds),
    }


__all__ = ["describe_setting", "resolved_config"]
