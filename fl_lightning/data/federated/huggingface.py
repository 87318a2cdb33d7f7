"""Any Hugging Face ``datasets`` dataset with a client-id column, read one client at a time.

``hf_clients`` reads a dataset saved with ``save_to_disk`` (``path``, under ``data.root``),
local data files (``path`` a ``.parquet``/``.csv``/``.json``/``.jsonl`` file) or a hub
dataset (``hub``, e.g. ``flwrlabs/femnist``; needs the internet). Arrow tables are memory-mapped,
so a client's rows are read when it is sampled. The clients:

- ``client_column`` (e.g. ``writer_id``): every distinct value is a client (Flower Datasets'
  ``NaturalIdPartitioner`` does the same); the index, client → its rows, is one argsort of the
  column, cached (``index.py``) under the dataset's Arrow files' key;
- or ``partitioner``: a Flower Datasets partitioner a user already has (``{class_path:
  flwr_datasets.partitioner.NaturalIdPartitioner, init_args: {partition_by: writer_id}}``, or
  any object with a ``dataset`` setter, ``num_partitions`` and ``load_partition(i)``): client
  ``i`` is ``load_partition(i)``. flwr-datasets itself is not a dependency.

Features: ``x`` one column or a list of columns (stacked as features), ``y`` the label column
(int64); image columns become float32 C×H×W in [0, 1]; integer columns stay int64 (token ids).
``num_classes``: the option, else the label column's ``ClassLabel``. Evaluation: the
``test_split`` of a ``DatasetDict`` (central), or ``held_out_clients`` (a fraction of the
clients, drawn with the seed, whose examples form the test split and who never train).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fl_lightning.data.datasets import DatasetSpec, TensorDataset, register_dataset
from fl_lightning.data.federated.index import cached_index
from fl_lightning.data.federated.store import ClientStore, FederatedData
from fl_lightning.data.federated.tff import _unused_load

FILE_BUILDERS = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}


def require_datasets() -> Any:
    try:
        import datasets
    except ImportError as err:
        raise ValueError(
            "data.dataset: hf_clients needs the datasets library: "
            "pip install 'fl-lightning[federated]'"
        ) from err
    return datasets


def open_dataset(root: str, path: str | None, hub: str | None, split: str) -> tuple[Any, Any]:
    """``(training split, the whole DatasetDict or None)``."""
    datasets = require_datasets()
    if hub:
        whole = datasets.load_dataset(hub)
    else:
        if not path:
            raise ValueError("data.dataset_options.path: hf_clients needs path (or hub)")
        where = Path(root) / path
        if not where.exists():
            raise ValueError(f"data.root: {path} not found under {root!r}")
        if where.is_file():
            builder = FILE_BUILDERS.get(where.suffix)
            if builder is None:
                raise ValueError(
                    f"data.dataset_options.path: {where.name} is not a saved dataset folder or "
                    f"a {'/'.join(FILE_BUILDERS)} file"
                )
            whole = datasets.load_dataset(builder, data_files={split: str(where)})
        else:
            try:
                whole = datasets.load_from_disk(str(where))
            except (FileNotFoundError, ValueError) as err:
                raise ValueError(
                    f"data.root: {where} is not a dataset saved with save_to_disk ({err})"
                ) from err
    if isinstance(whole, datasets.DatasetDict):
        if split not in whole:
            raise ValueError(f"data.dataset_options.split: no {split!r} split in {sorted(whole)}")
        return whole[split], whole
    return whole, None


def to_tensors(batch: dict[str, Any], x: list[str], y: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of rows (numpy format) as ``(x, y)`` tensors."""
    cols = [np.asarray(batch[c]) for c in x]
    if len(cols) == 1:
        arr = cols[0]
        if arr.dtype == np.uint8 and arr.ndim >= 3:  # images: k×H×W[×C] → k×C×H×W in [0, 1]
            arr = arr.astype(np.float32) / 255.0
            arr = arr[:, None] if arr.ndim == 3 else np.moveaxis(arr, -1, 1)
    else:
        arr = np.stack([c.reshape(len(c), -1) for c in cols], axis=1).reshape(len(cols[0]), -1)
    xt = torch.from_numpy(
        np.ascontiguousarray(arr.astype(np.int64 if arr.dtype.kind in "iu" else np.float32))
    )
    labels = np.asarray(batch[y]).astype(np.int64).reshape(len(arr))
    return xt, torch.from_numpy(labels)


class ColumnClients(ClientStore):
    """The clients of a dataset's ``client_column``: an argsort of the column, cached."""

    def __init__(
        self,
        table: Any,
        column: str,
        x: list[str],
        y: str,
        num_classes: int,
        index_cache: str | None = None,
        cache_clients: int = 16,
    ) -> None:
        def build() -> dict[str, np.ndarray]:
            values = np.asarray(table.select_columns([column]).with_format("numpy")[:][column])
            ids, inverse = np.unique(values.astype(str), return_inverse=True)
            order = np.argsort(inverse, kind="stable").astype(np.int64)
            sizes = np.bincount(inverse, minlength=len(ids)).astype(np.int64)
            return {"ids": np.char.encode(ids, "utf-8"), "sizes": sizes, "order": order}

        files = [Path(f["filename"]) for f in getattr(table, "cache_files", []) or []]
        if files:
            index = cached_index(files, f"hf-column:{column}", build, index_cache)
        else:
            index = build()
            index["ids"] = np.asarray(index["ids"], dtype=np.bytes_)
        super().__init__(index["ids"], index["sizes"], num_classes, cache_clients)
        self.order = index["order"]
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)])
        self.table = table.with_format("numpy")
        self.x, self.y = x, y

    def rows(self, i: int) -> np.ndarray:
        return self.order[self.offsets[i] : self.offsets[i + 1]]

    def _read(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return to_tensors(self.table[self.rows(i)], self.x, self.y)


class PartitionerClients(ClientStore):
    """The partitions of a Flower Datasets partitioner (any object with a ``dataset``
    setter, ``num_partitions`` and ``load_partition``) as clients."""

    def __init__(
        self,
        partitioner: Any,
        table: Any,
        x: list[str],
        y: str,
        num_classes: int,
        cache_clients: int = 16,
    ) -> None:
        partitioner.dataset = table
        n = int(partitioner.num_partitions)
        sizes = np.array([len(partitioner.load_partition(i)) for i in range(n)], dtype=np.int64)
        names = getattr(partitioner, "partition_id_to_natural_id", None) or {}
        ids = np.array([str(names.get(i, i)).encode() for i in range(n)], dtype=np.bytes_)
        super().__init__(ids, sizes, num_classes, cache_clients)
        self.partitioner, self.x, self.y = partitioner, x, y

    def _read(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        part = self.partitioner.load_partition(int(i)).with_format("numpy")
        return to_tensors(part[:], self.x, self.y)


def build_partitioner(spec: Any) -> Any:
    if not isinstance(spec, dict):
        return spec
    path = str(spec.get("class_path", ""))
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(
            f"data.dataset_options.partitioner: cannot import {path!r} ({err})"
        ) from err
    return cls(**(spec.get("init_args") or {}))


def _columns(x: str | list[str] | None) -> list[str]:
    if not x:
        raise ValueError("data.dataset_options.x: hf_clients needs the feature column(s)")
    return [x] if isinstance(x, str) else list(x)


def _check_columns(table: Any, fields: list[tuple[str, str | None]]) -> None:
    for field, col in fields:
        if col is not None and col not in table.column_names:
            raise ValueError(
                f"data.dataset_options.{field}: no column {col!r} in {table.column_names}"
            )


def _num_classes(table: Any, y: str, num_classes: int | None) -> int:
    if num_classes is not None:
        return int(num_classes)
    found = getattr(table.features.get(y), "num_classes", None)
    if found is None:
        raise ValueError(
            f"data.dataset_options.num_classes: column {y!r} is not a ClassLabel; give num_classes"
        )
    return int(found)


def check_hf_clients(
    root: str,
    download: bool,
    path: str | None = None,
    hub: str | None = None,
    split: str = "train",
    client_column: str | None = None,
    x: str | list[str] | None = None,
    y: str = "label",
    num_classes: int | None = None,
    partitioner: Any = None,
    test_split: str | None = "test",
    held_out_clients: float = 0.0,
    **_: Any,
) -> None:
    if (client_column is None) == (partitioner is None):
        raise ValueError(
            "data.dataset_options.client_column: give the client-id column, or a "
            "partitioner (not both)"
        )
    if not 0.0 <= held_out_clients < 1.0:
        raise ValueError(
            f"data.dataset_options.held_out_clients: must be in [0, 1), got {held_out_clients}"
        )
    table, whole = open_dataset(root, path, hub, split)
    _check_columns(
        table, [("client_column", client_column), ("y", y), *(("x", c) for c in _columns(x))]
    )
    _num_classes(table, y, num_classes)
    if held_out_clients == 0.0 and (whole is None or test_split not in whole):
        raise ValueError(
            f"data.dataset_options.test_split: no {test_split!r} split; name one, "
            "or hold out clients (held_out_clients)"
        )


def load_hf_clients(
    root: str,
    seed: int,
    path: str | None = None,
    hub: str | None = None,
    split: str = "train",
    client_column: str | None = None,
    x: str | list[str] | None = None,
    y: str = "label",
    num_classes: int | None = None,
    partitioner: Any = None,
    test_split: str | None = "test",
    held_out_clients: float = 0.0,
    max_test_examples: int | None = None,
    index_cache: str | None = None,
    cache_clients: int = 16,
) -> FederatedData:
    check_hf_clients(
        root,
        False,
        path,
        hub,
        split,
        client_column,
        x,
        y,
        num_classes,
        partitioner,
        test_split,
        held_out_clients,
    )
    table, whole = open_dataset(root, path, hub, split)
    cols, classes = _columns(x), _num_classes(table, y, num_classes)
    store: ClientStore
    if partitioner is not None:
        store = PartitionerClients(
            build_partitioner(partitioner), table, cols, y, classes, cache_clients
        )
    else:
        store = ColumnClients(
            table, str(client_column), cols, y, classes, index_cache, cache_clients
        )
    if held_out_clients > 0:
        n_out = max(1, round(held_out_clients * len(store)))
        if n_out >= len(store):
            raise ValueError("data.dataset_options.held_out_clients: leaves no training client")
        held = np.sort(np.random.default_rng(seed).permutation(len(store))[:n_out])
        test = _gather_rows(store, held, max_test_examples)
        store = HeldOutView(store, np.setdiff1d(np.arange(len(store)), held))
    else:
        t = whole[test_split].with_format("numpy")
        _check_columns(t, [("y", y), *(("x", c) for c in cols)])
        rows = t[:max_test_examples] if max_test_examples is not None else t[:]
        xt, yt = to_tensors(rows, cols, y)
        test = TensorDataset(xt, yt, classes)
    return FederatedData(store, test)


def _gather_rows(store: ClientStore, clients: np.ndarray, cap: int | None) -> TensorDataset:
    from fl_lightning.data.federated.store import gather

    return gather(store, clients.tolist(), cap)


class HeldOutView(ClientStore):
    """The training clients of a store some of whose clients are held out for evaluation."""

    def __init__(self, base: ClientStore, keep: np.ndarray) -> None:
        super().__init__(base.ids[keep], base.sizes[keep], base.num_classes, 0)
        self.base, self.keep = base, keep

    def _read(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.base.read(int(self.keep[i]))


register_dataset(
    "hf_clients", DatasetSpec(load=_unused_load, check=check_hf_clients, federated=load_hf_clients)
)
