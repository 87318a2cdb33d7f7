"""The registered strategies: every ``Strategy`` class defined in ``fl_lightning.strategies``
(the package imports each of its modules, so that the CLI resolves ``--strategy <ClassName>``).
The contract tests run over this list, so a new strategy file is tested the day it lands."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import fl_lightning.strategies as strategies_package
from fl_lightning.strategies.base import Strategy


def registered_strategies() -> list[type[Strategy]]:
    """Every concrete ``Strategy`` class of ``fl_lightning.strategies`` (the base included: it
    is FedAvg), sorted by name."""
    found: dict[str, type[Strategy]] = {}
    for info in pkgutil.walk_packages(strategies_package.__path__, "fl_lightning.strategies."):
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if not issubclass(obj, Strategy) or obj.__module__ != module.__name__:
                continue
            if not inspect.isabstract(obj):
                found[obj.__name__] = obj
    return [found[name] for name in sorted(found)]


__all__ = ["registered_strategies"]
