"""Sweeps: W&B sweep specs expanded and run locally (``fl-lightning sweep``).

``spec`` reads a W&B sweep YAML and expands it into points (grid, random); ``store`` is the
crash-safe JSON-lines result store; ``runner`` runs the points as subprocesses, resumably.
"""

from fl_lightning.sweeps.spec import SweepSpec, expand, load_spec
from fl_lightning.sweeps.store import ResultStore

__all__ = ["ResultStore", "SweepSpec", "expand", "load_spec"]
