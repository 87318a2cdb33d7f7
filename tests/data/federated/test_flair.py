"""FLAIR's HDF5 (/<partition>/<user_id>/images, labels_row/labels_col, /metadata/label_mapping):
users of each partition, images and multi-hot labels as the format specifies."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from fl_lightning.data.datasets import DATASETS
from fl_lightning.testing.federated_files import FLAIR_LABELS, write_flair


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FL_LIGHTNING_CACHE", str(tmp_path / "index"))
    return tmp_path / "index"


def test_users_images_and_multi_hot_labels(tmp_path, cache):
    root = write_flair(tmp_path / "flair")
    data = DATASETS["flair"].federated(root=str(root), seed=0)
    store = data.clients
    assert store.num_classes == len(FLAIR_LABELS) == 17
    with h5py.File(root / "flair_federated.hdf5") as f:
        users = sorted(f["train"])
        assert [store.client_id(i) for i in range(len(store))] == users
        for i, user in enumerate(users):
            x, y = store.read(i)
            images = f["train"][user]["images"][()]
            assert x.shape == (len(images), 3, 8, 8) and x.dtype == torch.float32
            assert torch.allclose(x[0].permute(1, 2, 0) * 255, torch.from_numpy(images[0]).float())
            expected = np.zeros((len(images), 17), np.float32)
            expected[f["train"][user]["labels_row"][()], f["train"][user]["labels_col"][()]] = 1
            assert np.array_equal(y.numpy(), expected)
        test_images = sum(len(f["test"][u]["images"]) for u in f["test"])
    assert len(data.test) == test_images and data.val is not None
    fine = DATASETS["flair"].federated(root=str(root), seed=0, fine_grained=True, max_user_images=1)
    assert fine.clients.num_classes == 40 and set(fine.clients.sizes.tolist()) == {1}


def test_missing_file_and_mapping_are_one_line(tmp_path, cache):
    with pytest.raises(
        ValueError, match=r"^data.root: flair_federated.hdf5 not found .*pfl-research"
    ):
        DATASETS["flair"].check(root=str(tmp_path), download=False)
    root = write_flair(tmp_path)
    with h5py.File(root / "flair_federated.hdf5", "a") as f:
        del f["metadata/label_mapping"]
    with pytest.raises(ValueError, match=r"^data.root: .* has no /metadata/label_mapping") as e:
        DATASETS["flair"].federated(root=str(root), seed=0)
    assert "\n" not in str(e.value) and not cache.exists()
