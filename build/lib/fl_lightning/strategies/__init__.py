"""Aggregation strategies, one algorithm a file. Every module here is imported so that the CLI
can resolve strategies by class name (``--strategy DPFedAvg``)."""

import importlib
import pkgutil

from fl_lightning.strategies.base import Strategy

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["Strategy"]
