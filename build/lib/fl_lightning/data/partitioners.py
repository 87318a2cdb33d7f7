"""Partitioners: split example indices among clients. Each returns a list of index tensors.

Every partitioner is a pure function of the labels, the number of clients, its options and a
seed. All of them are disjoint and cover the training set (``label_k`` and ``label_groups``
assign every example of a label to the clients that hold that label).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

Partitioner = Callable[..., list[torch.Tensor]]
PARTITIONERS: dict[str, Partitioner] = {}


def register_partitioner(name: str) -> Callable[[Partitioner], Partitioner]:
    def wrap(fn: Partitioner) -> Partitioner:
        PARTITIONERS[name] = fn
        return fn

    return wrap


def _to_tensors(parts: Sequence[np.ndarray]) -> list[torch.Tensor]:
    return [torch.as_tensor(np.sort(p), dtype=torch.int64) for p in parts]


@register_partitioner("iid")
def iid(labels: np.ndarray, num_clients: int, seed: int, **_: object) -> list[torch.Tensor]:
    """Shuffles and deals the examples into ``num_clients`` near-equal parts."""
    perm = np.random.default_rng(seed).permutation(len(labels))
    return _to_tensors(np.array_split(perm, num_clients))


@register_partitioner("dirichlet")
def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    seed: int,
    alpha: float = 0.5,
    equal_size: bool = False,
    min_size: int = 2,
    **_: object,
) -> list[torch.Tensor]:
    """Label skew: each class is split among clients by proportions ~ Dir(alpha).

    Smaller ``alpha`` gives more skew (Hsu et al. 2019). With ``equal_size`` each client gets
    the same number of examples: client j draws label proportions p_j ~ Dir(alpha·1) and fills
    its quota from the classes in those proportions, as far as the classes last. Draws are
    repeated (up to 100 times) until every client holds at least ``min_size`` examples.
    """
    if alpha <= 0:
        raise ValueError(f"data.alpha: Dirichlet concentration must be > 0, got {alpha}")
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    if equal_size:
        return _dirichlet_equal(labels, classes, num_clients, alpha, rng)
    for _attempt in range(100):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            props = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(props)[:-1] * len(idx)).astype(int)
            for j, chunk in enumerate(np.split(idx, cuts)):
                parts[j].append(chunk)
        merged = [np.concatenate(p) for p in parts]
        if min(len(p) for p in merged) >= min_size:
            return _to_tensors(merged)
    raise ValueError(
        f"data.alpha: could not give each of {num_clients} clients >= {min_size} examples "
        f"with alpha={alpha}; use fewer clients or a larger alpha"
    )


def _dirichlet_equal(
    labels: np.ndarray,
    classes: np.ndarray,
    num_clients: int,
    alpha: float,
    rng: np.random.Generator,
) -> list[torch.Tensor]:
    pools = {c: list(rng.permutation(np.flatnonzero(labels == c))) for c in classes}
    quota = len(labels) // num_clients
    parts = []
    for _ in range(num_clients):
        props = rng.dirichlet(np.full(len(classes), alpha))
        take: list[int] = []
        while len(take) < quota:
            available = np.array([len(pools[c]) > 0 for c in classes], dtype=float)
            p = props * available
            if p.sum() == 0:
                p = available
            c = classes[rng.choice(len(classes), p=p / p.sum())]
            take.append(pools[c].pop())
        parts.append(np.array(take))
    return _to_tensors(parts)


@register_partitioner("shards")
def shards(
    labels: np.ndarray,
    num_clients: int,
    seed: int,
    num_shards: int | None = None,
    shards_per_client: int = 2,
    **_: object,
) -> list[torch.Tensor]:
    """McMahan et al. 2017: sort by label, cut into equal shards, deal shards to clients.

    Each client gets ``shards_per_client`` shards, so at most that many labels (a shard can
    straddle a label boundary). ``num_shards`` defaults to clients × shards_per_client.
    """
    num_shards = num_shards or num_clients * shards_per_client
    if num_shards < num_clients * shards_per_client:
        raise ValueError(
            f"data.num_shards: {num_shards} shards cannot give {num_clients} clients "
            f"{shards_per_client} shards each"
        )
    rng = np.random.default_rng(seed)
    order = np.argsort(labels, kind="stable")
    shard_list = np.array_split(order, num_shards)
    dealt = rng.permutation(num_shards)
    parts = [
        np.concatenate([shard_list[s] for s in dealt[j::num_clients][:shards_per_client]])
        for j in range(num_clients)
    ]
    # Shards beyond clients × shards_per_client are dealt round-robin so the split covers.
    leftover = dealt[num_clients * shards_per_client :]
    for k, s in enumerate(leftover):
        parts[k % num_clients] = np.concatenate([parts[k % num_clients], shard_list[s]])
    return _to_tensors(parts)


@register_partitioner("label_k")
def label_k(
    labels: np.ndarray, num_clients: int, seed: int, labels_per_client: int = 2, **_: object
) -> list[torch.Tensor]:
    """Each client holds exactly ``labels_per_client`` distinct labels.

    Labels are assigned round-robin over a seeded permutation so every label is held by some
    client; each label's examples are split equally among the clients holding it.
    """
    rng = np.random.default_rng(seed)
    classes = np.unique(labels)
    if not 1 <= labels_per_client <= len(classes):
        raise ValueError(
            f"data.labels_per_client: must be in [1, {len(classes)}], got {labels_per_client}"
        )
    order = rng.permutation(classes)
    assigned = [
        {order[(j * labels_per_client + k) % len(classes)] for k in range(labels_per_client)}
        for j in range(num_clients)
    ]
    return label_groups(labels, num_clients, seed, groups=[sorted(a) for a in assigned])


@register_partitioner("label_groups")
def label_groups(
    labels: np.ndarray,
    num_clients: int,
    seed: int,
    groups: Sequence[Sequence[int]] | None = None,
    **_: object,
) -> list[torch.Tensor]:
    """Explicit label sets per client, e.g. ``[[0,1,2,3,4],[5,6,7,8,9]]`` (GCFL, paper 001).

    Each label's examples are split equally (seeded) among the clients whose set contains it.
    """
    if not groups or len(groups) != num_clients:
        raise ValueError(
            f"data.label_groups: need one label set per client ({num_clients}), got "
            f"{0 if not groups else len(groups)}"
        )
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c in np.unique(labels):
        holders = [j for j, g in enumerate(groups) if int(c) in {int(v) for v in g}]
        if not holders:
            continue
        idx = rng.permutation(np.flatnonzero(labels == c))
        for j, chunk in zip(holders, np.array_split(idx, len(holders))):
            parts[j].append(chunk)
    if any(not p for p in parts):
        raise ValueError("data.label_groups: some client's labels do not occur in the data")
    return _to_tensors([np.concatenate(p) for p in parts])


def label_histogram(labels: torch.Tensor, parts: Sequence[torch.Tensor], num_classes: int):
    """(num_clients, num_classes) int tensor of per-client label counts."""
    return torch.stack([torch.bincount(labels[p], minlength=num_classes) for p in parts])
