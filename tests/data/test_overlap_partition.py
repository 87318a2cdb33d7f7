"""ADP-FL's overlapping 2-labels / 10 % split (fl_lightning/data/sources/overlap_partition.py)."""

import numpy as np
import pytest

from fl_lightning.data.partitioners import PARTITIONERS


def test_each_client_has_two_labels_and_ten_percent_with_overlap():
    labels = np.repeat(np.arange(10), 1000)
    parts = PARTITIONERS["overlap_label_k"](labels, 50, 0, labels_per_client=2)
    assert len(parts) == 50
    for p in parts:
        assert len(p) == 1000 and len(set(p.tolist())) == 1000  # 10 %, no repeats within
        assert len(np.unique(labels[p.numpy()])) == 2
    total = sum(len(p) for p in parts)
    union = len(set(np.concatenate([p.numpy() for p in parts]).tolist()))
    assert total == 5 * len(labels) and union < total  # shards overlap across clients
    again = PARTITIONERS["overlap_label_k"](labels, 50, 0, labels_per_client=2)
    assert all((a == b).all() for a, b in zip(parts, again))


def test_small_labels_give_what_they_have_and_bad_options_name_the_field():
    labels = np.array([0] * 5 + [1] * 95)
    parts = PARTITIONERS["overlap_label_k"](labels, 3, 1, labels_per_client=2, fraction=0.5)
    assert all(len(p) == 30 for p in parts)  # 5 of label 0 + 25 of label 1
    with pytest.raises(ValueError, match="data.labels_per_client"):
        PARTITIONERS["overlap_label_k"](labels, 3, 1, labels_per_client=3)
    with pytest.raises(ValueError, match="data.fraction"):
        PARTITIONERS["overlap_label_k"](labels, 3, 1, fraction=0.0)
