"""Partitioner invariants: disjoint, covering, skew follows alpha, shards keep their promise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fl_lightning.data.partitioners import PARTITIONERS, label_histogram

LABELS = np.repeat(np.arange(10), 120)  # 1,200 examples, 10 balanced classes


def _assert_disjoint_cover(parts: Sequence[torch.Tensor], n: int) -> None:
    allidx = torch.cat(list(parts))
    assert len(allidx) == n, "partition must cover every example exactly once"
    assert len(torch.unique(allidx)) == n, "partition must be disjoint"


@pytest.mark.parametrize("name", ["iid", "dirichlet", "shards", "label_k"])
@settings(max_examples=15, deadline=None)
@given(num_clients=st.integers(2, 20), seed=st.integers(0, 10_000))
def test_partitions_are_disjoint_and_cover(name, num_clients, seed):
    parts = PARTITIONERS[name](LABELS, num_clients, seed, alpha=1.0, shards_per_client=2)
    assert len(parts) == num_clients
    if name == "label_k" and num_clients * 2 < 10:
        # Fewer label slots than labels: the unheld labels' examples are left out.
        allidx = torch.cat(list(parts))
        assert len(torch.unique(allidx)) == len(allidx)
        return
    _assert_disjoint_cover(parts, len(LABELS))


def test_label_groups_split_the_labels_as_asked():
    parts = PARTITIONERS["label_groups"](LABELS, 2, 0, groups=[[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]])
    _assert_disjoint_cover(parts, len(LABELS))
    assert set(LABELS[parts[0].numpy()]) == {0, 1, 2, 3, 4}
    assert set(LABELS[parts[1].numpy()]) == {5, 6, 7, 8, 9}


def _mean_label_entropy(alpha: float) -> float:
    parts = PARTITIONERS["dirichlet"](LABELS, 10, 3, alpha=alpha)
    hist = label_histogram(torch.as_tensor(LABELS), parts, 10).double()
    p = hist / hist.sum(dim=1, keepdim=True)
    ent = -(p * torch.log(p.clamp_min(1e-12))).sum(dim=1)
    return float(ent.mean())


def test_dirichlet_skew_grows_as_alpha_shrinks():
    entropies = [_mean_label_entropy(a) for a in (100.0, 1.0, 0.1)]
    assert entropies[0] > entropies[1] > entropies[2]
    assert entropies[0] > 0.95 * np.log(10)  # near-uniform labels for large alpha


def test_dirichlet_equal_size_gives_equal_clients():
    parts = PARTITIONERS["dirichlet"](LABELS, 12, 1, alpha=0.3, equal_size=True)
    assert {len(p) for p in parts} == {len(LABELS) // 12}
    assert len(torch.unique(torch.cat(list(parts)))) == sum(len(p) for p in parts)


def test_shards_give_at_most_shards_per_client_labels():
    # 100 clients x 2 shards of 6 examples over label-sorted data (McMahan et al. 2017).
    parts = PARTITIONERS["shards"](LABELS, 100, 0, num_shards=200, shards_per_client=2)
    _assert_disjoint_cover(parts, len(LABELS))
    for p in parts:
        assert len(p) == 12
        assert len(set(LABELS[p.numpy()])) <= 2


def test_label_k_gives_exactly_k_labels():
    parts = PARTITIONERS["label_k"](LABELS, 10, 0, labels_per_client=3)
    for p in parts:
        assert len(set(LABELS[p.numpy()])) == 3
    _assert_disjoint_cover(parts, len(LABELS))


def test_bad_alpha_is_refused():
    with pytest.raises(ValueError, match="data.alpha"):
        PARTITIONERS["dirichlet"](LABELS, 10, 0, alpha=0.0)
