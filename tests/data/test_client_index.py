"""Registered clients cost no per-client object (issue 22, item 4): the partition is one
ClientIndex (two arrays), client data are views cut on demand."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from fl_lightning.data.datamodule import FederatedDataModule
from fl_lightning.data.partitioners import ClientIndex, label_histogram


def _tensors_alive() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if issubclass(type(o), torch.Tensor))


def _datamodule(num_clients: int) -> FederatedDataModule:
    # The same data (200,000 examples) for every population; only the split changes.
    dm = FederatedDataModule(
        dataset="synthetic",
        num_clients=num_clients,
        partitioner="iid",
        test_fraction=0.01,
        dataset_options={"num_examples": 202_021, "num_features": 4},
    )
    dm.setup()
    return dm


def test_registering_100000_clients_creates_no_per_client_tensor():
    growth = {}
    for n in (100, 100_000):
        before = _tensors_alive()
        dm = _datamodule(n)
        growth[n] = _tensors_alive() - before
        assert len(dm.client_indices) == n
        assert dm.client_sizes().sum() == len(dm.train)
        del dm
    # A list of index tensors (one per client) would add ~99,900 tensors here.
    assert growth[100_000] - growth[100] < 20, growth


def test_client_data_are_views_of_one_index_tensor():
    dm = _datamodule(1000)
    a, b = dm.client_indices[3], dm.client_indices[-1]
    order = dm.client_indices.order
    assert a.untyped_storage().data_ptr() == order.untyped_storage().data_ptr()
    assert b.untyped_storage().data_ptr() == order.untyped_storage().data_ptr()
    assert torch.equal(b, dm.client_indices[999])
    x, y = dm.client_data(3)
    assert torch.equal(x, dm.train.x[a]) and torch.equal(y, dm.train.y[a])
    with pytest.raises(IndexError):
        dm.client_indices[1000]


def test_client_index_round_trips_and_packs_lists():
    parts = [torch.tensor([5, 1]), torch.tensor([], dtype=torch.int64), torch.tensor([3, 0, 4])]
    packed = ClientIndex.from_parts(parts, sort=False)
    assert [p.tolist() for p in packed] == [[5, 1], [], [3, 0, 4]]
    assert packed.sizes().tolist() == [2, 0, 3]
    assert [p.tolist() for p in ClientIndex.from_parts(parts)] == [[1, 5], [], [0, 3, 4]]
    assert [p.tolist() for p in packed[1:]] == [[], [3, 0, 4]]
    dm = _datamodule(10)
    dm.client_indices = parts  # e.g. a user's partitioner's list: packed, order kept
    assert isinstance(dm.client_indices, ClientIndex)
    assert dm.client_indices[2].tolist() == [3, 0, 4]
    with pytest.raises(ValueError, match="data.client_indices"):
        ClientIndex(torch.arange(3), np.array([0, 2, 1, 3]))


def test_label_histogram_of_a_client_index_matches_the_per_client_count():
    labels = torch.randint(0, 7, (500,), generator=torch.Generator().manual_seed(0))
    perm = torch.randperm(500, generator=torch.Generator().manual_seed(1))
    sizes = np.array([0, 13, 200, 1, 286])
    index = ClientIndex.from_flat(perm, sizes)
    fast = label_histogram(labels, index, 7)
    slow = label_histogram(labels, list(index), 7)
    assert torch.equal(fast, slow)
    assert fast.sum(1).tolist() == sizes.tolist()
