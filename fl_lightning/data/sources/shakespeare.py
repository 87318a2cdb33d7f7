"""LEAF Shakespeare (Caldas et al. 2018): next-character prediction, one client per speaker.

DP-FedASGP (Zhang et al. 2024, Table II) uses 715 clients, 80-character inputs and a 90-symbol
vocabulary (the TFF version of Reddi et al. 2021). This source reads LEAF's preprocessed JSON
(``{"users": [...], "user_data": {user: {"x": [80-char strings], "y": [next chars]}}}``), from
``<root>/shakespeare/data/{train,test}``, ``<root>/shakespeare/{train,test}`` or
``<root>/{train,test}``. LEAF does not host these files (its scripts build them from the Project
Gutenberg text: ``./preprocess.sh -s niid --sf 1.0 -k 0 -t sample`` in ``leaf/data/shakespeare``),
so there is no download: a missing directory is a one-line ``ValueError`` naming ``data.root``.

Encoding: characters index LEAF's 80-letter alphabet (``ALL_LETTERS``); anything else maps to
index 80 (out of vocabulary); the model's vocabulary of 90 leaves the rest unused. ``x`` is
int64 (N, 80), ``y`` the int64 index of the next character. Natural clients: the train examples
of each user, in file order (``partitioner: natural``).
Options: ``min_samples`` drops users with fewer train examples; ``max_clients`` keeps the first
users (e.g. 715); ``seq_len`` (80).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from fl_lightning.data.datasets import DatasetSpec, TensorDataset, register_dataset

ALL_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
OOV_INDEX = len(ALL_LETTERS)  # 80
VOCAB_SIZE = 90
_INDEX = {c: i for i, c in enumerate(ALL_LETTERS)}


def encode(text: str, length: int | None = None) -> list[int]:
    ids = [_INDEX.get(c, OOV_INDEX) for c in text]
    if length is not None:
        ids = ids[-length:] if len(ids) >= length else [0] * (length - len(ids)) + ids
    return ids


def find_split_dir(root: str | Path, split: str) -> Path | None:
    base = Path(root)
    for cand in (base / "shakespeare" / "data" / split, base / "shakespeare" / split, base / split):
        if cand.is_dir() and any(cand.glob("*.json")):
            return cand
    return None


def check_shakespeare(root: str, download: bool, **_: object) -> None:
    for split in ("train", "test"):
        if find_split_dir(root, split) is None:
            raise ValueError(
                f"data.root: no LEAF Shakespeare {split}/*.json under {root!r} (looked in "
                "shakespeare/data, shakespeare, .); LEAF has no download, build it with "
                "leaf/data/shakespeare/preprocess.sh"
            )


def read_leaf_split(directory: Path) -> dict[str, tuple[list[str], list[str]]]:
    """{user: (x strings, y chars)} over every JSON file of a LEAF split, in file order."""
    users: dict[str, tuple[list[str], list[str]]] = {}
    for path in sorted(directory.glob("*.json")):
        with open(path) as f:
            blob = json.load(f)
        for user in blob["users"]:
            data = blob["user_data"][user]
            xs, ys = users.setdefault(user, ([], []))
            xs.extend(data["x"])
            ys.extend(data["y"])
    return users


def _to_tensors(
    users: dict[str, tuple[list[str], list[str]]], names: list[str], seq_len: int
) -> tuple[TensorDataset, list[torch.Tensor]]:
    xs: list[list[int]] = []
    ys: list[int] = []
    clients: list[torch.Tensor] = []
    for name in names:
        ux, uy = users[name]
        start = len(ys)
        for text, nxt in zip(ux, uy):
            xs.append(encode(text, seq_len))
            ys.append(encode(nxt[-1:] or "\n")[0])
        clients.append(torch.arange(start, len(ys)))
    x = torch.tensor(xs, dtype=torch.int64).reshape(len(ys), seq_len)
    y = torch.tensor(ys, dtype=torch.int64)
    return TensorDataset(x, y, VOCAB_SIZE), clients


def load_shakespeare(
    root: str,
    download: bool,
    seed: int,
    seq_len: int = 80,
    min_samples: int = 0,
    max_clients: int | None = None,
    **_: object,
) -> tuple[TensorDataset, TensorDataset]:
    check_shakespeare(root, download)
    train_users = read_leaf_split(find_split_dir(root, "train"))  # type: ignore[arg-type]
    test_users = read_leaf_split(find_split_dir(root, "test"))  # type: ignore[arg-type]
    names = [u for u in train_users if len(train_users[u][1]) >= max(min_samples, 1)]
    if max_clients is not None:
        names = names[:max_clients]
    train, clients = _to_tensors(train_users, names, seq_len)
    test, _test_clients = _to_tensors(test_users, [u for u in names if u in test_users], seq_len)
    train.clients = clients  # type: ignore[attr-defined]  # read by natural_clients
    return train, test


def natural_clients(train: TensorDataset) -> list[torch.Tensor]:
    clients = getattr(train, "clients", None)
    if clients is None:
        raise ValueError("data.partitioner: natural split needs the shakespeare loader's clients")
    return list(clients)


register_dataset(
    "shakespeare",
    DatasetSpec(load=load_shakespeare, check=check_shakespeare, natural_clients=natural_clients),
)
