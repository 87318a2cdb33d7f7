"""Subcommands beyond Lightning's fit/validate/test (``sweep``, ``report``, ``audit``).

A module that provides one calls ``register_subcommand(name, handler)``; the handler receives
the remaining argv and returns an exit code. Listed here so ``cli.py`` stays one file.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

SUBCOMMANDS: dict[str, Callable[[list[str]], int]] = {}

_PROVIDERS = {
    "sweep": "fl_lightning.sweeps.runner",
    "report": "fl_lightning.reports.cli",
    "audit": "fl_lightning.attacks.cli",
    "repro": "fl_lightning.reports.repro.cli",
}


def register_subcommand(name: str, handler: Callable[[list[str]], int]) -> None:
    SUBCOMMANDS[name] = handler


def _lazy(name: str, module: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name and module.startswith(err.name):
                print(f"error: the '{name}' command is not available in this version")
                return 2
            raise
        return int(mod.main(argv) or 0)

    return run


for _name, _module in _PROVIDERS.items():
    register_subcommand(_name, _lazy(_name, _module))
