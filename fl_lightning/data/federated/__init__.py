"""Federated sources with natural clients, read one client at a time (issue 61).

A :class:`~fl_lightning.data.federated.store.ClientStore` holds an index of its clients (ids and
sizes, built once and cached by :mod:`~fl_lightning.data.federated.index`) and reads a client's
examples only when the client is sampled, so memory grows with the cohort, not the population.
The formats: TFF's federated HDF5 (``tff.py``: EMNIST-62, Shakespeare, StackOverflow; any file of
that layout), LEAF JSON (``leaf.py``: FEMNIST, Shakespeare, Sent140), FLAIR's HDF5 (``flair.py``)
and Hugging Face ``datasets`` with a client-id column (``huggingface.py``). Each registers its
dataset names with a ``federated`` loader (:class:`~fl_lightning.data.datasets.DatasetSpec`);
the DataModule hands ``client_data(i)`` to the executors from the store.
"""

import importlib
import pkgutil

# Every module registers its datasets on import (as data/sources/ does): data/datasets.py
# imports this package last.
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
