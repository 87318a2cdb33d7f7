"""FederatedDataModule: loads a dataset into memory and splits it among clients.

Clients hold index views (``client_indices[i]``) into one training tensor, never copies; the
views are cut on demand from one :class:`~fl_lightning.data.partitioners.ClientIndex` (two
arrays for the whole population, no per-client object). The
training "dataloader" yields round tokens: the FederatedModule runs one round per step.

A dataset with a ``federated`` loader (``data/federated/``: TFF HDF5, LEAF JSON, FLAIR,
Hugging Face) is not loaded: its natural clients stay in their files behind a
:class:`~fl_lightning.data.federated.store.ClientStore` (an index of ids and sizes), and
``client_data(i)``, what the executors read, reads client ``i`` when it is sampled; only the
evaluation splits are in memory. ``train`` is then None and ``client_indices`` empty.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data import TensorDataset as TorchTensorDataset

from fl_lightning.data.datasets import DATASETS, TensorDataset, stratified_split
from fl_lightning.data.federated.store import ClientStore
from fl_lightning.data.partitioners import (
    PARTITIONERS,
    ClientIndex,
    as_client_index,
    label_histogram,
)


class RoundTokens(IterableDataset):
    """An endless stream of round indices; the Trainer's ``max_steps`` ends training."""

    def __iter__(self) -> Iterator[int]:
        return itertools.count()


class FederatedDataModule(pl.LightningDataModule):
    """A dataset split among ``num_clients`` clients.

    Args:
        dataset: registered dataset name (``digits``, ``mnist_offline``, ``synthetic``,
            ``mnist``, ``fashion_mnist``, ``emnist``, ``cifar10``, ``cifar100``, ...).
        root: directory of the data files.
        download: let torchvision download missing files.
        num_clients: population size N.
        partitioner: ``iid``, ``dirichlet``, ``shards``, ``label_k``, ``label_groups`` or
            ``natural`` (the dataset's own clients, e.g. LEAF Shakespeare speakers).
        alpha: Dirichlet concentration (``dirichlet``).
        equal_size: equal client sizes (``dirichlet``).
        num_shards: number of label-sorted shards (``shards``).
        shards_per_client: shards dealt to each client (``shards``).
        labels_per_client: distinct labels per client (``label_k``).
        label_groups: explicit label sets per client (``label_groups``).
        val_fraction: share of the training set held out (stratified) as a server-side
            validation set, never given to clients (used by e.g. DPFL-AGN's noise decay).
        test_fraction: share held out as the test set by offline datasets without one.
        split: dataset variant (EMNIST ``byclass`` / ``balanced``).
        seed: seed of the split and partition.
        eval_batch_size: batch size of evaluation.
        dataset_options: extra keyword arguments of the dataset's loader (e.g. ``shape`` and
            ``num_classes`` of ``synthetic``).
    """

    def __init__(
        self,
        dataset: str = "digits",
        root: str = "data",
        download: bool = False,
        num_clients: int = 10,
        partitioner: str = "iid",
        alpha: float = 0.5,
        equal_size: bool = False,
        num_shards: int | None = None,
        shards_per_client: int = 2,
        labels_per_client: int = 2,
        label_groups: list[list[int]] | None = None,
        val_fraction: float = 0.0,
        test_fraction: float = 0.2,
        split: str | None = None,
        seed: int = 0,
        eval_batch_size: int = 1024,
        dataset_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if dataset not in DATASETS:
            raise ValueError(
                f"data.dataset: unknown dataset {dataset!r}; choose from {sorted(DATASETS)}"
            )
        if partitioner not in PARTITIONERS and partitioner != "natural":
            raise ValueError(
                f"data.partitioner: unknown partitioner {partitioner!r}; "
                f"choose from {sorted([*PARTITIONERS, 'natural'])}"
            )
        lazy = DATASETS[dataset].federated is not None
        if partitioner == "natural" and DATASETS[dataset].natural_clients is None and not lazy:
            raise ValueError(f"data.partitioner: dataset {dataset!r} has no natural client split")
        if lazy and partitioner != "natural":
            raise ValueError(
                f"data.partitioner: {dataset!r} is read client by client from its files, with "
                f"its own clients; set data.partitioner natural (got {partitioner!r})"
            )
        if lazy and val_fraction > 0:
            raise ValueError(
                f"data.val_fraction: {dataset!r} brings its own evaluation splits; set it to 0"
            )
        if num_clients < 1:
            raise ValueError(f"data.num_clients: must be >= 1, got {num_clients}")
        if partitioner == "dirichlet" and alpha <= 0:
            raise ValueError(f"data.alpha: Dirichlet concentration must be > 0, got {alpha}")
        for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
            if not 0.0 <= value < 1.0:
                raise ValueError(f"data.{name}: must be in [0, 1), got {value}")
        if eval_batch_size < 1:
            raise ValueError(f"data.eval_batch_size: must be >= 1, got {eval_batch_size}")
        check = DATASETS[dataset].check
        if check is not None:
            check(root=root, download=download, split=split, **(dataset_options or {}))
        self.save_hyperparameters()
        self.dataset_name = dataset
        self.num_clients = num_clients
        self.train: TensorDataset | None = None
        self.val: TensorDataset | None = None
        self.test: TensorDataset | None = None
        self.clients: ClientStore | None = None  # the lazy population (federated sources)
        self._device: torch.device | None = None
        self._client_indices = ClientIndex(torch.zeros(0, dtype=torch.int64), np.zeros(1))

    @property
    def client_indices(self) -> ClientIndex:
        """Every client's example indices; ``client_indices[i]`` is a view (see ClientIndex).
        Assigning a list of per-client index tensors packs it into a ClientIndex."""
        return self._client_indices

    @client_indices.setter
    def client_indices(self, parts: Sequence[torch.Tensor]) -> None:
        self._client_indices = as_client_index(parts)

    # -- loading -----------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        if self.train is not None:
            return
        if self.clients is not None:
            return
        hp: Any = self.hparams  # an AttributeDict: attribute access is untyped
        spec = DATASETS[hp.dataset]
        if spec.federated is not None:
            fed = spec.federated(root=hp.root, seed=hp.seed, **(hp.dataset_options or {}))
            self.clients, self.val, self.test = fed.clients, fed.val, fed.test
            self.num_clients = len(fed.clients)
            return
        train, test = spec.load(
            root=hp.root,
            download=hp.download,
            seed=hp.seed,
            split=hp.split,
            test_fraction=hp.test_fraction,
            **(hp.dataset_options or {}),
        )
        if hp.val_fraction > 0:
            tr, va = stratified_split(train.y.numpy(), hp.val_fraction, hp.seed + 1)
            self.val = TensorDataset(train.x[va], train.y[va], train.num_classes)
            train = TensorDataset(train.x[tr], train.y[tr], train.num_classes)
        self.train, self.test = train, test
        if hp.partitioner == "natural":
            self.client_indices = spec.natural_clients(train)  # type: ignore[misc]
            self.num_clients = len(self.client_indices)
        else:
            self.client_indices = self.partition(train.y, hp.num_clients, hp.partitioner)
        if len(self.client_indices) != self.num_clients:
            raise ValueError(
                f"data.num_clients: partition produced {len(self.client_indices)} clients"
            )

    def partition(self, labels: torch.Tensor, num_clients: int, partitioner: str) -> ClientIndex:
        """Splits ``labels``' indices among ``num_clients`` with this module's partition options."""
        hp: Any = self.hparams  # an AttributeDict: attribute access is untyped
        return as_client_index(
            PARTITIONERS[partitioner](
                labels.cpu().numpy(),
                num_clients,
                hp.seed,
                alpha=hp.alpha,
                equal_size=hp.equal_size,
                num_shards=hp.num_shards,
                shards_per_client=hp.shards_per_client,
                labels_per_client=hp.labels_per_client,
                groups=hp.label_groups,
            )
        )

    @property
    def num_classes(self) -> int:
        if self.clients is not None:
            return self.clients.num_classes
        assert self.train is not None, "call setup() first"
        return self.train.num_classes

    def client_sizes(self) -> np.ndarray:
        if self.clients is not None:
            return self.clients.sizes
        return self.client_indices.sizes()

    def label_histogram(self) -> torch.Tensor | None:
        """Client × label counts; None for a lazy source (counting would read every client)."""
        if self.clients is not None:
            return None
        assert self.train is not None
        return label_histogram(self.train.y, self.client_indices, self.train.num_classes)

    def client_data(self, client_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The client's examples (gathered from its index view, or read from the lazy source's
        files and moved to the run's device)."""
        if self.clients is not None:
            x, y = self.clients.read(client_id)
            if self._device is not None:
                x, y = x.to(self._device), y.to(self._device)
            return x, y
        assert self.train is not None
        idx = self.client_indices[client_id]
        return self.train.x[idx], self.train.y[idx]

    def to(self, device: torch.device) -> None:
        """Moves the in-memory splits to ``device`` (the GPU when there is one); a lazy
        source's clients move there as they are read."""
        self._device = torch.device(device)
        for split in (self.train, self.val, self.test):
            if split is not None:
                split.x, split.y = split.x.to(device), split.y.to(device)
        self.client_indices = self.client_indices.to(device)

    # -- Lightning hooks ---------------------------------------------------------------------
    def train_dataloader(self) -> DataLoader:
        return DataLoader(RoundTokens(), batch_size=None)

    def _eval_loader(self, split: TensorDataset | None) -> DataLoader:
        assert split is not None
        return DataLoader(
            TorchTensorDataset(split.x.cpu(), split.y.cpu()),
            batch_size=self.hparams["eval_batch_size"],
        )

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self.val if self.val is not None else self.test)

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self.test)
