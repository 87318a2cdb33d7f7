"""LEAF Shakespeare parsing on a tiny fixture (tests/fixtures/leaf_shakespeare)."""

from pathlib import Path

import pytest
import torch

from fl_lightning.data.datasets import DATASETS
from fl_lightning.data.sources.shakespeare import ALL_LETTERS, OOV_INDEX, encode

FIXTURE = str(Path(__file__).resolve().parents[2] / "fixtures" / "leaf_shakespeare")


def test_parses_users_and_natural_clients():
    spec = DATASETS["shakespeare"]
    train, test = spec.load(root=FIXTURE, download=False, seed=0)
    assert train.x.shape == (4, 80) and train.x.dtype == torch.int64
    assert test.x.shape == (2, 80)
    assert train.num_classes == 90
    clients = spec.natural_clients(train)
    assert [c.tolist() for c in clients] == [[0, 1], [2], [3]]
    assert train.y[0] == ALL_LETTERS.index("f")
    assert "".join(ALL_LETTERS[i] for i in train.x[0].tolist()).startswith("To be, or not")
    # A short line is left-padded with index 0; a character outside the alphabet is OOV.
    assert train.x[3, 0] == 0 and train.x[3, -1] == OOV_INDEX


def test_options_filter_clients():
    spec = DATASETS["shakespeare"]
    train, _ = spec.load(root=FIXTURE, download=False, seed=0, min_samples=2)
    assert len(spec.natural_clients(train)) == 1
    train, _ = spec.load(root=FIXTURE, download=False, seed=0, max_clients=2)
    assert len(spec.natural_clients(train)) == 2


def test_missing_data_is_one_line_error(tmp_path):
    with pytest.raises(ValueError, match=r"^data.root: no LEAF Shakespeare") as err:
        DATASETS["shakespeare"].check(root=str(tmp_path), download=True)
    assert "\n" not in str(err.value)


def test_encode():
    assert encode("ab", 4) == [0, 0, ALL_LETTERS.index("a"), ALL_LETTERS.index("b")]
