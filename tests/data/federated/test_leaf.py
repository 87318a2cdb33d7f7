"""LEAF JSON (users, num_samples, user_data {x, y}) read lazily through a cached HDF5
conversion: users, examples and labels as written; malformed files are one line naming the
field, and nothing is written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fl_lightning.data.datasets import DATASETS
from fl_lightning.data.federated.leaf import sent140_ids
from fl_lightning.data.sources.shakespeare import ALL_LETTERS
from fl_lightning.testing.federated_files import write_leaf_femnist, write_leaf_sent140

SHAKESPEARE = str(Path(__file__).resolve().parents[2] / "fixtures" / "leaf_shakespeare")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "index"
    monkeypatch.setenv("FL_LIGHTNING_CACHE", str(folder))
    return folder


def _users(folder: Path) -> dict:
    out = {}
    for path in sorted(folder.glob("*.json")):
        blob = json.loads(path.read_text())
        out.update({u: blob["user_data"][u] for u in blob["users"]})
    return out


def test_femnist_users_examples_labels(tmp_path, cache):
    root = write_leaf_femnist(tmp_path / "leaf")
    data = DATASETS["leaf_femnist"].federated(root=str(root), seed=0)
    store = data.clients
    users = _users(root / "femnist" / "data" / "train")
    assert sorted(store.client_id(i) for i in range(len(store))) == sorted(users)
    for i in range(len(store)):
        x, y = store.read(i)
        user = users[store.client_id(i)]
        assert x.shape == (len(user["y"]), 1, 28, 28) and x.dtype == torch.float32
        assert y.tolist() == user["y"]
        assert np.allclose(x.reshape(len(y), -1).numpy(), np.asarray(user["x"], np.float32))
    test_users = _users(root / "femnist" / "data" / "test")
    assert len(data.test) == sum(len(u["y"]) for u in test_users.values())
    assert store.num_classes == 62
    converted = sorted(p.name for p in cache.glob("leaf-*.h5"))
    assert len(converted) == 2  # once per split; the next load reuses them
    DATASETS["leaf_femnist"].federated(root=str(root), seed=0)
    assert sorted(p.name for p in cache.glob("leaf-*.h5")) == converted


def test_shakespeare_matches_the_in_memory_reader(tmp_path, cache):
    lazy = DATASETS["leaf_shakespeare"].federated(root=SHAKESPEARE, seed=0).clients
    train, _ = DATASETS["shakespeare"].load(root=SHAKESPEARE, download=False, seed=0)
    clients = DATASETS["shakespeare"].natural_clients(train)
    order = {lazy.client_id(i): i for i in range(len(lazy))}
    assert len(order) == len(clients) and lazy.num_classes == 90
    first = lazy.read(order[sorted(order)[0]])
    assert first[0].shape[1] == 80
    rows = torch.cat([lazy.read(i)[1] for i in range(len(lazy))])
    assert sorted(rows.tolist()) == sorted(train.y.tolist())
    assert ALL_LETTERS[int(rows[0])] in ALL_LETTERS


def test_sent140_tokens_and_labels(tmp_path, cache):
    root = write_leaf_sent140(tmp_path)
    data = DATASETS["leaf_sent140"].federated(root=str(root), seed=0)
    store = data.clients
    vocab = json.loads((root / "sent140" / "embs.json").read_text())["vocab"]
    users = _users(root / "sent140" / "data" / "train")
    i = [store.client_id(k) for k in range(len(store))].index("user2")
    x, y = store.read(i)
    texts = [row[4] for row in users["user2"]["x"]]
    assert x.shape == (len(texts), 25) and y.tolist() == users["user2"]["y"]
    assert x[0].tolist() == sent140_ids(texts[0], {w: k for k, w in enumerate(vocab)}, 25)
    assert sent140_ids("i love pizza!", {w: k for k, w in enumerate(vocab)}, 5) == [
        0, 1, len(vocab), 10, len(vocab)]  # fmt: skip
    assert store.num_classes == 2


def test_missing_split_is_one_line(tmp_path, cache):
    with pytest.raises(ValueError, match=r"^data.root: no LEAF femnist train/\*.json") as e:
        DATASETS["leaf_femnist"].check(root=str(tmp_path), download=False)
    assert "\n" not in str(e.value) and "preprocess.sh" in str(e.value)


def test_sent140_without_vocabulary_is_one_line(tmp_path, cache):
    root = write_leaf_sent140(tmp_path)
    (root / "sent140" / "embs.json").unlink()
    with pytest.raises(ValueError, match=r"^data.dataset_options.vocab: no vocabulary"):
        DATASETS["leaf_sent140"].check(root=str(root), download=False)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda b: b.pop("user_data"), r"no 'user_data'"),
        (lambda b: b["user_data"][b["users"][0]].pop("y"), r"needs 'x' and 'y'"),
        (lambda b: b["num_samples"].__setitem__(0, 99), r"num_samples of .* is 99"),
        (lambda b: b["user_data"][b["users"][0]]["x"][0].pop(), r"x must be lists of 784"),
        (lambda b: b["user_data"][b["users"][0]]["y"].__setitem__(0, 62), r"y outside 0..61"),
    ],
)
def test_malformed_json_is_one_line_and_writes_nothing(tmp_path, cache, edit, message):
    root = write_leaf_femnist(tmp_path / "leaf")
    path = sorted((root / "femnist" / "data" / "train").glob("*.json"))[-1]
    blob = json.loads(path.read_text())
    edit(blob)
    path.write_text(json.dumps(blob))
    with pytest.raises(ValueError, match=rf"^data.root: .*{message}") as e:
        DATASETS["leaf_femnist"].federated(root=str(root), seed=0)
    assert "\n" not in str(e.value)
    assert not list(cache.rglob("*.h5")) and not list(cache.rglob("*.part"))
