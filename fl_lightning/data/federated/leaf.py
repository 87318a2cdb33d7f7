"""LEAF's JSON datasets (Caldas et al. 2018) with their natural clients, read lazily.

LEAF writes each split as JSON files ``{train,test}/*.json``, each
``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}``
(``hierarchies`` optional). A JSON file cannot be read one user at a time, so the first run
converts the split, one file at a time (memory: one file), into TFF's HDF5 layout
(``examples/<user>/{x,y}``, encoded) in the index cache folder (``index.py``), keyed by the JSON
files' paths, sizes and modification times and the encoding; later runs open that file, and
clients are read when sampled (``hdf5.py``). The test split is central: every test user's
examples (``max_test_examples`` caps a seeded sample). Files are looked for in
``<root>/<name>/data/<split>``, ``<root>/<name>/<split>`` or ``<root>/<split>``.

- ``leaf_femnist``: ``x`` 784 floats in [0, 1] (28×28 row-major) → float32 k×1×28×28,
  ``y`` 0-61 (3,550 writers).
- ``leaf_shakespeare``: ``x`` 80-character strings, ``y`` the next character, LEAF's 80-letter
  alphabet (``sources/shakespeare.py``: 90 classes), 1,129 roles.
- ``leaf_sent140``: ``x`` ``[id, date, query, user, text]``, ``y`` 0/1 (660,120 users); the
  text's words (LEAF's ``split_line``: ``[\\w']+|[.,!?;]``) map to the vocabulary of LEAF's
  ``embs.json`` (``vocab``; or a text file, one word a line: ``vocab`` option), the first
  ``max_words`` (25) kept, unknown words and padding ``len(vocab)``: int64 k×25,
  ``len(vocab) + 1`` tokens.

LEAF hosts no preprocessed files: ``./preprocess.sh`` in ``leaf/data/<name>`` builds them
(e.g. ``-s niid --sf 1.0 -k 0 -t sample`` for FEMNIST).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fl_lightning.data.datasets import DatasetSpec, register_dataset
from fl_lightning.data.federated.hdf5 import (
    Hdf5ClientStore,
    array_decoder,
    first_axis,
    require_h5py,
)
from fl_lightning.data.federated.index import cache_folder, index_key
from fl_lightning.data.federated.store import FederatedData, gather
from fl_lightning.data.federated.tff import _unused_load, sample_clients
from fl_lightning.data.sources.shakespeare import VOCAB_SIZE, encode

LEAF_BUILD = "LEAF has no download: build the JSON with ./preprocess.sh in leaf/data/{}"
# (xs, ys, field) -> (x array, y array): one user's examples encoded
Encode = Callable[[list[Any], list[Any], str], tuple[np.ndarray, np.ndarray]]


def find_leaf_split(root: str, name: str, split: str) -> Path:
    base = Path(root)
    for cand in (base / name / "data" / split, base / name / split, base / split):
        if cand.is_dir() and any(cand.glob("*.json")):
            return cand
    raise ValueError(
        f"data.root: no LEAF {name} {split}/*.json under {root!r} (looked in {name}/data, "
        f"{name}, .); {LEAF_BUILD.format(name)}"
    )


def _user_examples(blob: Any, path: Path) -> list[tuple[str, list[Any], list[Any]]]:
    """Every user of one LEAF JSON file, checked against the format."""
    for key in ("users", "user_data"):
        if not isinstance(blob, dict) or key not in blob:
            raise ValueError(f"data.root: {path}: no {key!r} (LEAF JSON: users, user_data)")
    counts = blob.get("num_samples")
    if counts is not None and len(counts) != len(blob["users"]):
        raise ValueError(
            f"data.root: {path}: num_samples has {len(counts)} entries for "
            f"{len(blob['users'])} users"
        )
    out = []
    for k, user in enumerate(blob["users"]):
        data = blob["user_data"].get(user)
        if not isinstance(data, dict) or "x" not in data or "y" not in data:
            raise ValueError(f"data.root: {path}: user_data[{user!r}] needs 'x' and 'y'")
        xs, ys = data["x"], data["y"]
        if len(xs) != len(ys):
            raise ValueError(
                f"data.root: {path}: user_data[{user!r}] has {len(xs)} x but {len(ys)} y"
            )
        if counts is not None and int(counts[k]) != len(ys):
            raise ValueError(
                f"data.root: {path}: num_samples of {user!r} is {counts[k]}, "
                f"user_data has {len(ys)}"
            )
        out.append((str(user), xs, ys))
    return out


def convert_split(directory: Path, encode: Encode, kind: str, index_cache: str | None) -> Path:
    """The split's JSON files as one TFF-layout HDF5 file in the cache (written once, from a
    temporary name; a malformed file leaves nothing)."""
    h5py = require_h5py()
    files = sorted(directory.glob("*.json"))
    target = cache_folder(index_cache) / f"leaf-{index_key(files, kind)}.h5"
    if target.is_file():
        return target
    encoded: list[tuple[str, np.ndarray, np.ndarray]] = []
    seen: set[str] = set()
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_suffix(f".{os.getpid()}.part")
    try:
        with h5py.File(part, "w") as out:
            examples = out.create_group("examples")
            for path in files:
                try:
                    with open(path, encoding="utf-8") as fh:
                        blob = json.load(fh)
                except (OSError, json.JSONDecodeError) as err:
                    raise ValueError(f"data.root: {path} is not JSON ({err})") from err
                encoded = [
                    (u, *encode(xs, ys, f"{path}: user_data[{u!r}]"))
                    for u, xs, ys in _user_examples(blob, path)
                ]
                del blob
                for user, x, y in encoded:
                    if user in seen:  # a user split over two files: its examples appended
                        g = examples[user]
                        x = np.concatenate([g["x"][()], x])
                        y = np.concatenate([g["y"][()], y])
                        del examples[user]
                    seen.add(user)
                    g = examples.create_group(user)
                    g.create_dataset("x", data=x)
                    g.create_dataset("y", data=y)
                encoded = []
        if not seen:
            raise ValueError(f"data.root: {directory} holds no LEAF users")
        part.replace(target)
    finally:
        part.unlink(missing_ok=True)
    return target


def _leaf(
    name: str, encode_for: Callable[..., tuple[Encode, int, str]]
) -> tuple[Callable[..., None], Callable[..., FederatedData]]:
    def check(root: str, download: bool, **options: Any) -> None:
        require_h5py()
        for split in ("train", "test"):
            find_leaf_split(root, name, split)
        encode_for(root, **options)

    def load(
        root: str,
        seed: int,
        max_test_examples: int | None = None,
        index_cache: str | None = None,
        cache_clients: int = 16,
        **options: Any,
    ) -> FederatedData:
        check(root, False, **options)
        encode, classes, kind = encode_for(root, **options)
        stores = []
        for split in ("train", "test"):
            h5 = convert_split(find_leaf_split(root, name, split), encode, kind, index_cache)
            stores.append(
                Hdf5ClientStore(
                    h5,
                    array_decoder("x", "y", str(h5)),
                    first_axis("y", str(h5)),
                    "y",
                    classes,
                    index_cache=index_cache,
                    cache_clients=cache_clients,
                )
            )
        order = sample_clients(len(stores[1]), seed, max_test_examples is not None)
        return FederatedData(stores[0], gather(stores[1], order, max_test_examples))

    return check, load


def _labels(ys: list[Any], field: str, classes: int) -> np.ndarray:
    try:
        y = np.asarray(ys, dtype=np.int64).reshape(len(ys))
    except (TypeError, ValueError) as err:
        raise ValueError(f"data.root: {field}: y must be integer labels") from err
    if len(y) and (y.min() < 0 or y.max() >= classes):
        raise ValueError(f"data.root: {field}: y outside 0..{classes - 1}")
    return y


# -- FEMNIST --------------------------------------------------------------------------------
def _femnist(root: str, **_: Any) -> tuple[Encode, int, str]:
    def enc(xs: list[Any], ys: list[Any], field: str) -> tuple[np.ndarray, np.ndarray]:
        try:
            x = np.asarray(xs, dtype=np.float32)
        except (TypeError, ValueError):
            x = np.zeros(0, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != 784:
            raise ValueError(
                f"data.root: {field}: x must be lists of 784 pixels, got shape {x.shape}"
            )
        return x.reshape(-1, 1, 28, 28), _labels(ys, field, 62)

    return enc, 62, "femnist"


# -- Shakespeare ----------------------------------------------------------------------------
def _shakespeare(root: str, seq_len: int = 80, **_: Any) -> tuple[Encode, int, str]:
    def enc(xs: list[Any], ys: list[Any], field: str) -> tuple[np.ndarray, np.ndarray]:
        x = np.asarray([encode(str(t), seq_len) for t in xs], dtype=np.int64)
        y = np.asarray([encode(str(n)[-1:] or "\n")[0] for n in ys], dtype=np.int64)
        return x.reshape(len(xs), seq_len), y

    return enc, VOCAB_SIZE, f"shakespeare-{seq_len}"


# -- Sent140 --------------------------------------------------------------------------------
_SPLIT_LINE = re.compile(r"[\w']+|[.,!?;]")


def read_sent140_vocab(root: str, vocab: str | None) -> list[str]:
    candidates = (
        [Path(root) / vocab]
        if vocab
        else [Path(root) / "sent140" / "embs.json", Path(root) / "embs.json"]
    )
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        raise ValueError(
            f"data.dataset_options.vocab: no vocabulary {' or '.join(map(str, candidates))}; "
            "LEAF's sent140 uses the GloVe vocabulary of embs.json (leaf/models/sent140/"
            "get_embs.sh), or give a text file of one word a line"
        )
    if path.suffix == ".json":
        with open(path, encoding="utf-8") as fh:
            blob = json.load(fh)
        if not isinstance(blob, dict) or not isinstance(blob.get("vocab"), list):
            raise ValueError(f"data.dataset_options.vocab: {path} has no 'vocab' list")
        return [str(w) for w in blob["vocab"]]
    return [w.strip() for w in path.read_text(encoding="utf-8").splitlines() if w.strip()]


def sent140_ids(text: str, word_id: dict[str, int], max_words: int) -> list[int]:
    """LEAF's ``line_to_indices``: the first ``max_words`` words, unknown and padding =
    ``len(vocab)``."""
    unk = len(word_id)
    ids = [word_id.get(w, unk) for w in _SPLIT_LINE.findall(text)[:max_words]]
    return ids + [unk] * (max_words - len(ids))


def _sent140(
    root: str, vocab: str | None = None, max_words: int = 25, **_: Any
) -> tuple[Encode, int, str]:
    words = read_sent140_vocab(root, vocab)
    word_id = {w: i for i, w in enumerate(words)}

    def enc(xs: list[Any], ys: list[Any], field: str) -> tuple[np.ndarray, np.ndarray]:
        rows = []
        for row in xs:
            if not isinstance(row, list) or len(row) != 5:
                raise ValueError(
                    f"data.root: {field}: x entries must be [id, date, query, user, text]"
                )
            rows.append(sent140_ids(str(row[4]), word_id, max_words))
        x = np.asarray(rows, dtype=np.int64).reshape(len(xs), max_words)
        return x, _labels(ys, field, 2)

    digest = hashlib.sha256("\n".join(words).encode()).hexdigest()[:16]
    return enc, 2, f"sent140-{max_words}-{digest}"


for _name, _dir, _enc in (
    ("leaf_femnist", "femnist", _femnist),
    ("leaf_shakespeare", "shakespeare", _shakespeare),
    ("leaf_sent140", "sent140", _sent140),
):
    _check, _load = _leaf(_dir, _enc)
    register_dataset(_name, DatasetSpec(load=_unused_load, check=_check, federated=_load))
