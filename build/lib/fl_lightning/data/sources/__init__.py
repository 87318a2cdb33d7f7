"""Dataset sources beyond ``datasets.py``: every module here registers itself on import."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
