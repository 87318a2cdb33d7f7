"""The lazy population: a client index in memory, each client's examples read when sampled.

A :class:`ClientStore` keeps two arrays for the whole population (client ids as UTF-8 bytes and
example counts, :mod:`~fl_lightning.data.federated.index`) and reads client ``i`` from the file
only in :meth:`ClientStore.read`; a small LRU (``cache_clients``) serves the repeated reads of one
round (the vectorized executor reads a client's data more than once). Evaluation splits are
materialised as in-memory tensors by :func:`gather` (the held-out clients or the central test
split each benchmark defines, optionally capped at ``max_examples``).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fl_lightning.data.datasets import TensorDataset


class ClientStore(ABC):
    """A population of natural clients read one client at a time.

    Args:
        ids: client ids, UTF-8 bytes (``numpy`` ``S`` array), in population order.
        sizes: int64 number of examples of each client (what ``read(i)`` returns).
        num_classes: classes of the labels (the vocabulary for next-token tasks).
        cache_clients: clients kept after a read (LRU), for the repeated reads of one round.
    """

    def __init__(
        self, ids: np.ndarray, sizes: np.ndarray, num_classes: int, cache_clients: int = 16
    ) -> None:
        self.ids = ids
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.num_classes = int(num_classes)
        self._cache: OrderedDict[int, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
        self._cache_clients = int(cache_clients)

    def __len__(self) -> int:
        return int(self.sizes.shape[0])

    def client_id(self, i: int) -> str:
        return bytes(self.ids[i]).decode()

    def read(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Client ``i``'s examples ``(x, y)`` (read from the file unless recently read)."""
        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"client {i} out of range for {len(self)} clients")
        hit = self._cache.get(i)
        if hit is not None:
            self._cache.move_to_end(i)
            return hit
        x, y = self._read(i)
        if self._cache_clients > 0:
            self._cache[i] = (x, y)
            while len(self._cache) > self._cache_clients:
                self._cache.popitem(last=False)
        return x, y

    @abstractmethod
    def _read(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Reads client ``i`` from the source (no cache)."""


class ProcessLocalFile:
    """An HDF5 file opened on first use in each process (a handle does not survive a fork)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = str(path)
        self._pid: int | None = None
        self._file: Any = None

    def get(self) -> Any:
        if self._file is None or self._pid != os.getpid():
            import h5py

            self._file = h5py.File(self.path, "r")
            self._pid = os.getpid()
        return self._file

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "_pid": None, "_file": None}


def gather(
    store: ClientStore, clients: Iterable[int] | None = None, max_examples: int | None = None
) -> TensorDataset:
    """The examples of ``clients`` (all, in order, by default) as one in-memory split, stopping
    after ``max_examples`` (the capped evaluation set of e.g. Reddi et al. 2021's StackOverflow,
    10,000 examples)."""
    xs: list[torch.Tensor] = []
    ys: list[torch.Tensor] = []
    total = 0
    for i in range(len(store)) if clients is None else clients:
        if max_examples is not None and total >= max_examples:
            break
        x, y = store._read(int(i))
        if max_examples is not None:
            x, y = x[: max_examples - total], y[: max_examples - total]
        xs.append(x)
        ys.append(y)
        total += len(y)
    if not xs:
        raise ValueError("data.dataset_options: the evaluation split has no examples")
    return TensorDataset(torch.cat(xs), torch.cat(ys), store.num_classes)


@dataclass
class FederatedData:
    """What a ``federated`` loader returns: the training clients (read lazily) and the
    evaluation splits in memory (``val`` may be None)."""

    clients: ClientStore
    test: TensorDataset
    val: TensorDataset | None = None
