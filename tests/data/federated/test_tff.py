"""TFF's federated HDF5 files (examples/<client_id>/<feature>) read lazily: clients, examples,
labels and StackOverflow's vocabulary come out as the format specifies; a missing or
malformed file is one line naming the field, and nothing is written."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from fl_lightning.data import FederatedDataModule
from fl_lightning.data.federated.tff import (
    CHAR_VOCAB,
    load_federated_hdf5,
    load_tff_emnist,
    load_tff_shakespeare,
    load_tff_stackoverflow,
    shakespeare_chunks,
)
from fl_lightning.testing.federated_files import (
    WORDS,
    write_tff_emnist,
    write_tff_shakespeare,
    write_tff_stackoverflow,
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "index"
    monkeypatch.setenv("FL_LIGHTNING_CACHE", str(folder))
    return folder


def test_emnist_clients_examples_labels(tmp_path, cache):
    root = write_tff_emnist(tmp_path / "tff")
    data = load_tff_emnist(str(root), seed=0)
    store = data.clients
    with h5py.File(root / "fed_emnist_train.h5") as f:
        names = sorted(f["examples"])
        assert [store.client_id(i) for i in range(len(store))] == names
        for i, name in enumerate(names):
            x, y = store.read(i)
            assert x.shape == (len(f["examples"][name]["label"]), 1, 28, 28)
            assert x.dtype == torch.float32 and y.dtype == torch.int64
            assert y.tolist() == f["examples"][name]["label"][()].tolist()
            assert torch.equal(x[:, 0], torch.from_numpy(f["examples"][name]["pixels"][()]))
            assert store.sizes[i] == len(y)
    with h5py.File(root / "fed_emnist_test.h5") as f:
        assert len(data.test) == sum(len(f["examples"][n]["label"]) for n in f["examples"])
    assert store.num_classes == 62 and data.test.num_classes == 62
    assert len(list(cache.glob("index-*.npz"))) == 2  # built once per file, then read back
    again = load_tff_emnist(str(root), seed=0).clients
    assert np.array_equal(again.sizes, store.sizes) and len(list(cache.glob("*.npz"))) == 2


def test_emnist_digits_only_has_ten_classes(tmp_path, cache):
    root = write_tff_emnist(tmp_path, only_digits=True)
    data = load_tff_emnist(str(root), seed=0, only_digits=True, max_test_examples=3)
    assert data.clients.num_classes == 10 and len(data.test) == 3


def test_shakespeare_chunks_follow_tff_encoding(tmp_path, cache):
    ids = shakespeare_chunks(b"To be", seq_len=80)
    assert ids.shape == (1, 81)
    assert ids[0, 0] == 88 and ids[0, 6] == 89 and ids[0, 7:].tolist() == [0] * 74
    assert ids[0, 1] == CHAR_VOCAB.index("T") + 1 and ids[0, 3] == CHAR_VOCAB.index(" ") + 1
    assert shakespeare_chunks("é", 80)[0, 1] == 87  # outside the 86 characters
    assert shakespeare_chunks("x" * 80, 80).shape == (2, 81)  # 82 ids: two chunks
    root = write_tff_shakespeare(tmp_path)
    data = load_tff_shakespeare(str(root), seed=0)
    store = data.clients
    assert len(store) == 4 and store.num_classes == 90
    x, y = store.read(2)  # three snippets, one chunk each
    assert x.shape == y.shape == (3, 80) and torch.equal(x[:, 1:], y[:, :-1])
    assert store.client_id(0) == "THE_TRAGEDY_OF_HAMLET_ROLE0"


def test_stackoverflow_vocabulary_and_next_word(tmp_path, cache):
    root = write_tff_stackoverflow(tmp_path, vocab_words=10_000)
    data = load_tff_stackoverflow(str(root), seed=0, max_val_examples=4, max_test_examples=None)
    store = data.clients
    assert store.num_classes == 10_004
    assert len(data.val) == 4 and data.val.x.shape == (4, 20)
    with h5py.File(root / "stackoverflow_train.h5") as f:
        first = sorted(f["examples"])[0]
        sentences = [s.decode() for s in f["examples"][first]["tokens"][()]]
        with h5py.File(root / "stackoverflow_test.h5") as t:
            assert len(data.test) == sum(len(t["examples"][n]["tokens"]) for n in t["examples"])
    x, y = store.read(0)
    assert x.shape == (len(sentences), 20) and torch.equal(x[:, 1:], y[:, :-1])
    for row_x, row_y, sentence in zip(x.tolist(), y.tolist(), sentences):
        words = sentence.split(" ")[:20]
        expected = [WORDS.index(w) + 1 if w in WORDS else 10_001 for w in words]
        assert row_x[0] == 10_002  # BOS
        assert row_x[1 : 1 + len(words)] == expected[:19]
        if len(words) < 20:
            assert row_y[len(words)] == 10_003  # EOS, then padding 0
            assert set(row_y[len(words) + 1 :]) <= {0}


def test_vocabulary_shorter_than_asked_is_one_line(tmp_path, cache):
    root = write_tff_stackoverflow(tmp_path, vocab_words=50)
    with pytest.raises(ValueError, match=r"^data.dataset_options.vocab_size: .* 50 words") as e:
        load_tff_stackoverflow(str(root), seed=0)
    assert "\n" not in str(e.value) and not cache.exists()


@pytest.mark.parametrize(
    ("loader", "file"),
    [
        (load_tff_emnist, "fed_emnist_train.h5"),
        (load_tff_shakespeare, "shakespeare_train.h5"),
        (load_tff_stackoverflow, "stackoverflow_train.h5"),
    ],  # fmt: skip
)
def test_missing_file_names_root_and_source(tmp_path, cache, loader, file):
    with pytest.raises(
        ValueError, match=rf"^data.root: {file} not found under .*tff-datasets"
    ) as e:
        loader(str(tmp_path), seed=0)
    assert "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


def _write(path, build):
    with h5py.File(path, "w") as f:
        build(f)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda f: f.create_group("clients"), r"has no 'examples' group"),
        (
            lambda f: f.create_dataset("examples/w0/pixels", data=np.zeros((2, 28, 28))),
            r"client 'w0' has no 'label' dataset",
        ),
        (lambda f: f.create_dataset("examples/w0", data=np.zeros(3)), r"is not a client group"),
    ],  # fmt: skip
)
def test_malformed_file_is_one_line_and_writes_nothing(tmp_path, cache, build, message):
    root = write_tff_emnist(tmp_path)
    _write(root / "fed_emnist_train.h5", build)
    with pytest.raises(ValueError, match=rf"^data.root: .*{message}") as e:
        load_tff_emnist(str(root), seed=0)
    assert "\n" not in str(e.value) and not cache.exists()


def test_not_hdf5_is_one_line(tmp_path, cache):
    root = write_tff_emnist(tmp_path)
    (root / "fed_emnist_train.h5").write_text("not hdf5")
    with pytest.raises(ValueError, match=r"^data.root: .* is not an HDF5 file"):
        load_tff_emnist(str(root), seed=0)


def test_generic_file_and_datamodule(tmp_path, cache):
    root = write_tff_emnist(tmp_path)
    options = {"train": "fed_emnist_train.h5", "test": "fed_emnist_test.h5", "x": "pixels",
               "y": "label", "num_classes": 62}  # fmt: skip
    direct = load_federated_hdf5(str(root), seed=0, **options)
    dm = FederatedDataModule("federated_hdf5", root=str(root), partitioner="natural",
                             dataset_options=options)  # fmt: skip
    dm.setup("fit")
    assert dm.num_clients == len(direct.clients) == 6 and dm.num_classes == 62
    assert dm.train is None and dm.label_histogram() is None
    assert dm.client_sizes().tolist() == direct.clients.sizes.tolist()
    x, y = dm.client_data(3)
    assert torch.equal(y, direct.clients.read(3)[1]) and x.shape[1:] == (28, 28)


def test_datamodule_refuses_other_partitioners(tmp_path):
    with pytest.raises(ValueError, match=r"^data.partitioner: 'tff_emnist' is read client by"):
        FederatedDataModule("tff_emnist", root=str(tmp_path), partitioner="iid")
    with pytest.raises(ValueError, match=r"^data.root: fed_emnist_train.h5 not found"):
        FederatedDataModule("tff_emnist", root=str(tmp_path), partitioner="natural")
