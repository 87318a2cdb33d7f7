"""Partitioners: split example indices among clients. Each returns a :class:`ClientIndex`.

Every partitioner is a pure function of the labels, the number of clients, its options and a
seed. All of them are disjoint and cover the training set (``label_k`` and ``label_groups``
assign every example of a label to the clients that hold that label).

A :class:`ClientIndex` keeps the whole partition in two arrays (one int64 tensor of example
indices, client after client, and the clients' offsets into it), so registering 100,000 clients
costs two arrays, not 100,000 tensors; ``index[i]`` is a view of client i's indices.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import SupportsIndex, TypeVar, overload

import numpy as np
import torch


class ClientIndex(Sequence[torch.Tensor]):
    """Every client's example indices in one flat tensor (compressed sparse rows).

    Client ``i`` holds ``order[offsets[i]:offsets[i + 1]]``, returned as a view of ``order``
    (no copy, no per-client object kept). ``offsets`` is a host (numpy) array so that looking a
    client up never synchronises with a device. Clients may overlap (``overlap_label_k``).

    Args:
        order: int64 example indices, client after client.
        offsets: int64, ``num_clients + 1`` non-decreasing offsets, ``offsets[0] == 0`` and
            ``offsets[-1] == len(order)``.
    """

    __slots__ = ("order", "offsets")

    def __init__(self, order: torch.Tensor, offsets: np.ndarray) -> None:
        offsets = np.asarray(offsets, dtype=np.int64)
        if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0:
            raise ValueError("data.client_indices: offsets must be 1-D and start at 0")
        if offsets[-1] != len(order) or np.any(np.diff(offsets) < 0):
            raise ValueError(
                f"data.client_indices: offsets must be non-decreasing and end at {len(order)}"
            )
        self.order = order
        self.offsets = offsets

    @classmethod
    def from_flat(
        cls, flat: np.ndarray | torch.Tensor, sizes: np.ndarray, *, sort: bool = True
    ) -> ClientIndex:
        """Clients of ``sizes[i]`` consecutive entries of ``flat`` each; ``sort`` orders every
        client's indices ascending (one ``lexsort``, no per-client array)."""
        flat = np.asarray(flat.cpu() if isinstance(flat, torch.Tensor) else flat, np.int64)
        sizes = np.asarray(sizes, dtype=np.int64)
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        if sort and len(flat):
            segment = np.repeat(np.arange(len(sizes)), sizes)
            flat = flat[np.lexsort((flat, segment))]
        return cls(torch.as_tensor(flat, dtype=torch.int64), offsets)

    @classmethod
    def from_parts(
        cls, parts: Iterable[np.ndarray | torch.Tensor], *, sort: bool = True
    ) -> ClientIndex:
        """From one index array or tensor per client (e.g. a user's partitioner's list)."""
        arrays = [np.asarray(p.cpu() if isinstance(p, torch.Tensor) else p) for p in parts]
        sizes = np.array([len(a) for a in arrays], dtype=np.int64)
        flat = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
        return cls.from_flat(flat, sizes, sort=sort)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, i: SupportsIndex) -> torch.Tensor: ...
    @overload
    def __getitem__(self, i: slice) -> list[torch.Tensor]: ...
    def __getitem__(self, i: SupportsIndex | slice) -> torch.Tensor | list[torch.Tensor]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        j = operator.index(i)
        n = len(self)
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError(f"client {i} out of range for {n} clients")
        return self.order[int(self.offsets[j]) : int(self.offsets[j + 1])]

    def __iter__(self) -> Iterator[torch.Tensor]:
        for j in range(len(self)):
            yield self.order[int(self.offsets[j]) : int(self.offsets[j + 1])]

    def sizes(self) -> np.ndarray:
        """Every client's number of examples (int64, host)."""
        return np.diff(self.offsets)

    def to(self, device: torch.device | str) -> ClientIndex:
        """The same partition with ``order`` on ``device`` (offsets stay on the host)."""
        return ClientIndex(self.order.to(device), self.offsets)

    def __repr__(self) -> str:
        return f"ClientIndex({len(self)} clients, {len(self.order)} indices)"


def as_client_index(parts: Sequence[torch.Tensor]) -> ClientIndex:
    """``parts`` as a :class:`ClientIndex` (kept as given when it is one already; a list of
    per-client tensors, e.g. from a user's partitioner, is packed without reordering)."""
    if isinstance(parts, ClientIndex):
        return parts
    return ClientIndex.from_parts(parts, sort=False)


Partitioner = Callable[..., Sequence[torch.Tensor]]
PARTITIONERS: dict[str, Partitioner] = {}


_P = TypeVar("_P", bound=Partitioner)


def register_partitioner(name: str) -> Callable[[_P], _P]:
    def wrap(fn: _P) -> _P:
        PARTITIONERS[name] = fn
        return fn

    return wrap


def _to_tensors(parts: Sequence[np.ndarray]) -> ClientIndex:
    return ClientIndex.from_parts(parts, sort=True)


@register_partitioner("iid")
def iid(labels: np.ndarray, num_clients: int, seed: int, **_: object) -> ClientIndex:
    """Shuffles and deals the examples into ``num_clients`` near-equal parts (the sizes of
    ``np.array_split``: the first ``n mod num_clients`` clients get one example more)."""
    perm = np.random.default_rng(seed).permutation(len(labels))
    base, extra = divmod(len(labels), num_clients)
    sizes = np.full(num_clients, base, dtype=np.int64)
    sizes[:extra] += 1
    return ClientIndex.from_flat(perm, sizes)


@register_partitioner("dirichlet")
def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    seed: int,
    alpha: float = 0.5,
    equal_size: bool = False,
    min_size: int = 2,
    **_: object,
) -> ClientIndex:
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
    members = [np.flatnonzero(labels == c) for c in classes]
    for _attempt in range(100):
        # Class c's shuffled examples are cut at ⌊cumsum(p)·n_c⌋: client j holds the piece
        # between its cuts (np.split's pieces), so its size is the cuts' difference and each
        # example's owner is the number of cuts at or before its position.
        shuffled, owners = [], []
        sizes = np.zeros(num_clients, dtype=np.int64)
        for idx in members:
            idx = rng.permutation(idx)
            props = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(props)[:-1] * len(idx)).astype(int)
            sizes += np.diff(cuts, prepend=0, append=len(idx))
            shuffled.append(idx)
            owners.append(np.searchsorted(cuts, np.arange(len(idx)), side="right"))
        if sizes.min() >= min_size:
            flat = np.concatenate(shuffled)
            by_owner = flat[np.argsort(np.concatenate(owners), kind="stable")]
            return _to_tensors(np.split(by_owner, np.cumsum(sizes)[:-1]))
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
) -> ClientIndex:
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
) -> ClientIndex:
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
) -> ClientIndex:
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
) -> ClientIndex:
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


def label_histogram(
    labels: torch.Tensor, parts: Sequence[torch.Tensor], num_classes: int
) -> torch.Tensor:
    """(num_clients, num_classes) int tensor of per-client label counts (one ``bincount`` of
    client × class codes for a :class:`ClientIndex`, no per-client tensor)."""
    if isinstance(parts, ClientIndex):
        client = torch.repeat_interleave(
            torch.arange(len(parts), device=parts.order.device),
            torch.as_tensor(parts.sizes(), device=parts.order.device),
        )
        codes = client * num_classes + labels[parts.order].to(client.device)
        counts = torch.bincount(codes, minlength=len(parts) * num_classes)
        return counts.view(len(parts), num_classes)
    return torch.stack([torch.bincount(labels[p], minlength=num_classes) for p in parts])
