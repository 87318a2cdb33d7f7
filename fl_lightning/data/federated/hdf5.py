"""TFF's federated HDF5 layout, read lazily: ``examples/<client_id>/<feature>``.

The files ``tff.simulation.datasets`` downloads (``fed_emnist_train.h5``,
``shakespeare_train.h5``, ``stackoverflow_train.h5``, ...) hold one group per client under
``examples``, and in it one dataset per feature, its first axis the client's examples (EMNIST:
``pixels`` float32 k×28×28 and ``label`` int32 k; Shakespeare: ``snippets`` variable-length
bytes; StackOverflow: ``tokens``, ``title``, ``tags`` bytes, ``score`` int64, ``type`` bytes,
``creation_date`` bytes). :class:`Hdf5ClientStore` lists the group's members once (H5Literate,
name order) and asks each client its size; the index is cached (``index.py``); a client is read
from the file when sampled.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fl_lightning.data.federated.index import cached_index
from fl_lightning.data.federated.store import ClientStore, ProcessLocalFile

# (group of one client) -> (x, y)
Decode = Callable[[Any], tuple[torch.Tensor, torch.Tensor]]
# (group of one client) -> number of examples decode returns
SizeOf = Callable[[Any], int]


def require_h5py(field: str = "data.dataset") -> Any:
    try:
        import h5py
    except ImportError as err:
        raise ValueError(
            f"{field}: reading HDF5 needs h5py: pip install 'fl-lightning[federated]'"
        ) from err
    return h5py


def feature(group: Any, key: str, path: str) -> np.ndarray:
    """``group[key]`` as an array, or a one-line error naming the missing feature."""
    if key not in group:
        raise ValueError(
            f"data.root: {path}: client {group.name.rsplit('/', 1)[-1]!r} has no {key!r} "
            f"dataset (expected examples/<client_id>/{key})"
        )
    return group[key][()]


class FirstAxis:
    """The size of a client: the length of its ``key`` dataset (no data read). ``fast`` asks
    HDF5 directly (one ``H5Dopen`` a client, about a third of the high-level lookups' time, which
    counts at 10⁶ clients); anything unexpected falls back to the checked path, which names the
    problem."""

    def __init__(self, key: str, path: str) -> None:
        self.key, self.path = key, path
        self._suffix = b"/" + key.encode()

    def __call__(self, group: Any) -> int:
        if self.key not in group:
            feature(group, self.key, self.path)  # raises, naming the field
        shape = group[self.key].shape
        if not shape:
            raise ValueError(
                f"data.root: {self.path}: examples/{group.name.rsplit('/', 1)[-1]}/{self.key} "
                "is a scalar; expected one entry per example"
            )
        return int(shape[0])

    def fast(self, group_id: Any, name: bytes) -> int | None:
        import h5py

        try:
            shape = h5py.h5d.open(group_id, name + self._suffix).get_space().shape
        except (KeyError, ValueError, TypeError, RuntimeError):
            return None
        return int(shape[0]) if shape else None


def first_axis(key: str, path: str) -> FirstAxis:
    """The size of a client: the length of its ``key`` dataset (:class:`FirstAxis`)."""
    return FirstAxis(key, path)


def bound_metadata_cache(f: Any, max_bytes: int = 4 << 20) -> None:
    """Caps HDF5's metadata cache of ``f`` (by default it grows with the objects touched: about
    90 MiB walking 10⁵ client groups), so that indexing a population costs memory independent of
    its size."""
    config = f.id.get_mdc_config()
    config.set_initial_size = True
    config.initial_size = config.min_size = max_bytes // 2
    config.max_size = max_bytes
    config.incr_mode = config.flash_incr_mode = config.decr_mode = 0  # fixed size
    f.id.set_mdc_config(config)


def member_names(group: Any, block: int = 1 << 16) -> np.ndarray:
    """The names of ``group``'s members (H5Literate), sorted, as one bytes array, gathered in
    blocks so that 10⁶ names never sit in a Python list."""
    blocks: list[np.ndarray] = []
    pending: list[bytes] = []

    def visit(name: bytes) -> None:
        pending.append(name)
        if len(pending) == block:
            blocks.append(np.array(pending, dtype=np.bytes_))
            pending.clear()

    import h5py

    # Native order walks the link index as stored; name order would first build a table of
    # every link in HDF5 (about 100 MiB and 90 s at 10⁶ clients). Sorted here instead.
    group.id.links.iterate(visit, order=h5py.h5.ITER_NATIVE)
    if pending or not blocks:
        blocks.append(np.array(pending, dtype=np.bytes_))
    width = max(b.dtype.itemsize for b in blocks)
    names = np.concatenate([b.astype(f"S{width}") for b in blocks])
    names.sort()
    return names


class Hdf5ClientStore(ClientStore):
    """The clients of one TFF-layout HDF5 file.

    Args:
        path: the ``.h5`` file.
        decode: a client's group → ``(x, y)`` tensors.
        size_of: a client's group → the number of examples ``decode`` returns.
        kind: what ``size_of`` measures (part of the index cache key).
        num_classes: classes (vocabulary) of ``y``.
        group: the top-level group of the clients (``examples``).
        index_cache: the index cache folder (``index.py``).
        cache_clients: clients kept after a read.
    """

    def __init__(
        self,
        path: str | Path,
        decode: Decode,
        size_of: SizeOf,
        kind: str,
        num_classes: int,
        group: str = "examples",
        index_cache: str | None = None,
        cache_clients: int = 16,
    ) -> None:
        h5py = require_h5py()
        self.path = Path(path)
        self.group = group
        self._decode = decode

        def build() -> dict[str, np.ndarray]:
            try:
                f = h5py.File(self.path, "r")
            except OSError as err:
                raise ValueError(f"data.root: {self.path} is not an HDF5 file ({err})") from err
            with f:
                if group not in f or not isinstance(f[group], h5py.Group):
                    raise ValueError(
                        f"data.root: {self.path} has no {group!r} group (TFF federated HDF5: "
                        f"{group}/<client_id>/<feature>)"
                    )
                bound_metadata_cache(f)
                clients = f[group]
                ids = member_names(clients)
                sizes = np.empty(len(ids), dtype=np.int64)
                fast = getattr(size_of, "fast", None)
                for k, name in enumerate(ids):
                    n = fast(clients.id, bytes(name)) if fast is not None else None
                    if n is not None:
                        sizes[k] = n
                        continue
                    member = clients.get(bytes(name).decode())
                    if not isinstance(member, h5py.Group):
                        raise ValueError(
                            f"data.root: {self.path}: {group}/{bytes(name).decode()} is not a "
                            "client group"
                        )
                    sizes[k] = size_of(member)
            if len(ids) == 0:
                raise ValueError(f"data.root: {self.path}: {group!r} holds no clients")
            return {"ids": ids, "sizes": sizes}

        index = cached_index([self.path], f"hdf5:{group}:{kind}", build, index_cache)
        super().__init__(index["ids"], index["sizes"], num_classes, cache_clients)
        self._file = ProcessLocalFile(self.path)

    def _read(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        member = self._file.get()[self.group][self.client_id(i)]
        return self._decode(member)


def array_decoder(x_key: str, y_key: str, path: str) -> Decode:
    """``x`` from ``x_key`` (float32, or int64 for integer features such as token ids) and
    ``y`` from ``y_key`` (int64): the generic TFF-layout file."""

    def decode(group: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x = np.asarray(feature(group, x_key, path))
        y = np.asarray(feature(group, y_key, path))
        if len(x) != len(y):
            raise ValueError(
                f"data.root: {path}: client {group.name.rsplit('/', 1)[-1]!r} has {len(x)} "
                f"{x_key!r} but {len(y)} {y_key!r}"
            )
        xt = torch.from_numpy(x.astype(np.int64 if x.dtype.kind in "iu" else np.float32))
        return xt, torch.from_numpy(y.astype(np.int64).reshape(len(y)))

    return decode
