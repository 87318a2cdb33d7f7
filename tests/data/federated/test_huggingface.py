"""Hugging Face datasets with a client-id column (the layout of the hub's flwrlabs/femnist),
read one client at a time; a Flower-Datasets-style partitioner is used as it is."""

from __future__ import annotations

import datasets
import numpy as np
import pytest
import torch

from fl_lightning.data.datasets import DATASETS
from fl_lightning.testing.federated_files import write_hf_femnist

OPTIONS = {"path": "femnist_hf", "client_column": "writer_id", "x": "image", "y": "character"}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return write_hf_femnist(tmp_path_factory.mktemp("hf"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FL_LIGHTNING_CACHE", str(tmp_path / "index"))
    return tmp_path / "index"


def test_client_column_gives_each_writer_its_rows(root, cache):
    data = DATASETS["hf_clients"].federated(root=str(root), seed=0, **OPTIONS)
    store = data.clients
    train = datasets.load_from_disk(str(root / "femnist_hf"))["train"]
    writers = list(train["writer_id"])
    assert [store.client_id(i) for i in range(len(store))] == sorted(set(writers))
    assert store.num_classes == 62  # from the ClassLabel
    for i in range(len(store)):
        x, y = store.read(i)
        rows = [k for k, w in enumerate(writers) if w == store.client_id(i)]
        assert x.shape == (len(rows), 1, 28, 28) and x.dtype == torch.float32
        assert y.tolist() == [train[k]["character"] for k in rows]
        assert torch.allclose(x[0, 0], torch.from_numpy(np.asarray(train[rows[0]]["image"],
                                                                   np.float32) / 255))  # fmt: skip
    assert len(data.test) == len(datasets.load_from_disk(str(root / "femnist_hf"))["test"])
    assert len(list(cache.glob("index-*.npz"))) == 1


def test_held_out_clients_never_train(root, cache):
    data = DATASETS["hf_clients"].federated(root=str(root), seed=0, held_out_clients=0.4, **OPTIONS)
    assert len(data.clients) == 3  # 2 of 5 writers held out
    assert len(data.test) + int(data.clients.sizes.sum()) == int(
        datasets.load_from_disk(str(root / "femnist_hf"))["train"].num_rows
    )


class NaturalIds:
    """The API of flwr_datasets.partitioner.NaturalIdPartitioner (dataset setter,
    num_partitions, load_partition, partition_id_to_natural_id), without flwr-datasets."""

    def __init__(self, partition_by: str) -> None:
        self.partition_by = partition_by
        self._dataset = None

    @property
    def dataset(self):
        return self._dataset

    @dataset.setter
    def dataset(self, value) -> None:
        self._dataset = value
        ids = sorted(set(value[self.partition_by]))
        self.partition_id_to_natural_id = dict(enumerate(ids))

    @property
    def num_partitions(self) -> int:
        return len(self.partition_id_to_natural_id)

    def load_partition(self, partition_id: int):
        want = self.partition_id_to_natural_id[partition_id]
        keep = [k for k, w in enumerate(self._dataset[self.partition_by]) if w == want]
        return self._dataset.select(keep)


def test_a_flower_partitioner_is_used_as_it_is(root, cache):
    options = {k: v for k, v in OPTIONS.items() if k != "client_column"}
    partitioner = {"class_path": f"{__name__}.NaturalIds",
                   "init_args": {"partition_by": "writer_id"}}  # fmt: skip
    by_partitioner = (
        DATASETS["hf_clients"]
        .federated(root=str(root), seed=0, partitioner=partitioner, **options)
        .clients
    )
    by_column = DATASETS["hf_clients"].federated(root=str(root), seed=0, **OPTIONS).clients
    assert len(by_partitioner) == len(by_column)
    for i in range(len(by_column)):
        assert by_partitioner.client_id(i) == by_column.client_id(i)
        assert torch.equal(by_partitioner.read(i)[1], by_column.read(i)[1])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"client_column": "user"}, r"^data.dataset_options.client_column: no column 'user'"),
        ({"path": "nowhere"}, r"^data.root: nowhere not found under"),
        ({"y": "hsf_id"}, r"^data.dataset_options.num_classes: column 'hsf_id' is not a Class"),
        ({"test_split": "valid"}, r"^data.dataset_options.test_split: no 'valid' split"),
        ({"x": None}, r"^data.dataset_options.x: hf_clients needs"),
    ],
)
def test_bad_options_are_one_line(root, cache, change, message):
    with pytest.raises(ValueError, match=message) as e:
        DATASETS["hf_clients"].check(root=str(root), download=False, **{**OPTIONS, **change})
    assert "\n" not in str(e.value) and not cache.exists()
