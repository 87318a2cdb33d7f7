"""TFF's federated datasets from their HDF5 files (``tff.simulation.datasets``, TFF ≤ 0.19).

- ``tff_emnist``: Federated EMNIST (Caldas et al. 2018 via TFF; Reddi et al. 2021): 3,400
  writers, 62 classes (``only_digits``: 3,383 writers, 10 classes). ``fed_emnist_train.h5`` /
  ``fed_emnist_test.h5`` (``fed_emnist_digitsonly_*``), ``examples/<writer>/pixels`` float32
  k×28×28 in [0, 1], ``label`` int32 k. Every writer's examples are split across the two files,
  so the test split is central: the union of the test file's examples.
- ``tff_shakespeare``: 715 speaking roles, ``shakespeare_{train,test}.h5``,
  ``examples/<role>/snippets`` (variable-length bytes). Characters map to TFF's 86-character
  vocabulary + 1 (0 = padding, 87 = out of vocabulary, 88 = beginning, 89 = end of snippet:
  90 tokens); each snippet is wrapped in BOS/EOS, padded to a multiple of ``seq_len + 1`` = 81
  and cut into chunks; ``x`` = chunk[:-1], ``y`` = chunk[1:] (int64, ``seq_len`` each).
- ``tff_stackoverflow``: next-word prediction on StackOverflow (342,477 users;
  ``stackoverflow_{train,held_out,test}.h5``, ``examples/<user>/tokens`` bytes sentences, one
  example each) with the vocabulary of the ``vocab_size`` (10,000) most frequent words of
  ``stackoverflow.word_count`` (lines ``word count``, most frequent first). A sentence's first
  ``seq_len`` (20) words map to vocabulary index + 1, others to the out-of-vocabulary id
  ``vocab_size + 1``; BOS (``vocab_size + 2``) leads; EOS (``vocab_size + 3``) ends a sentence
  shorter than ``seq_len``; padding 0 fills to ``seq_len + 1``; ``x``/``y`` are the shifted
  pairs (``vocab_size + 4`` = 10,004 tokens; Reddi et al. 2021, App. C.4). Validation: the
  held-out file, test: the test file, each capped at a seeded sample of clients up to
  ``max_val_examples`` / ``max_test_examples`` examples (Reddi et al. use 10,000).
- ``federated_hdf5``: any file of the layout: ``train``/``test`` file names under
  ``data.root``, ``x``/``y`` feature keys, ``num_classes``.

TFF's SQLite files (TFF ≥ 0.20: ``tf.train.Example`` protos in a table) are not read; the
HDF5 archives are at ``https://storage.googleapis.com/tff-datasets-public/<name>.tar.bz2``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from fl_lightning.data.datasets import DatasetSpec, TensorDataset, register_dataset
from fl_lightning.data.federated.hdf5 import (
    Hdf5ClientStore,
    array_decoder,
    feature,
    first_axis,
    require_h5py,
)
from fl_lightning.data.federated.store import FederatedData, gather

TFF_URL = "https://storage.googleapis.com/tff-datasets-public/{}.tar.bz2"


def find_file(root: str, name: str, archive: str) -> Path:
    """``<root>/<name>``, or a one-line error naming ``data.root`` and where the file comes
    from."""
    path = Path(root) / name
    if not path.is_file():
        raise ValueError(
            f"data.root: {name} not found under {root!r}; it comes from TFF's "
            f"{TFF_URL.format(archive)} (unpack it into data.root)"
        )
    return path


def sample_clients(num_clients: int, seed: int, capped: bool) -> np.ndarray | None:
    """All clients in file order, or a seeded order when the split is capped (so the cap
    draws across the population, not the first clients by name)."""
    return np.random.default_rng(seed).permutation(num_clients) if capped else None


def _store_options(options: dict[str, Any]) -> dict[str, Any]:
    return {k: options[k] for k in ("index_cache", "cache_clients") if k in options}


# -- EMNIST ---------------------------------------------------------------------------------
def _emnist_files(only_digits: bool) -> tuple[str, str, str]:
    stem = "fed_emnist_digitsonly" if only_digits else "fed_emnist"
    return f"{stem}_train.h5", f"{stem}_test.h5", stem


def check_tff_emnist(root: str, download: bool, only_digits: bool = False, **_: object) -> None:
    require_h5py()
    train, test, archive = _emnist_files(only_digits)
    for name in (train, test):
        find_file(root, name, archive)


def _emnist_store(path: Path, num_classes: int, options: dict[str, Any]) -> Hdf5ClientStore:
    label = array_decoder("pixels", "label", str(path))

    def decode(group: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = label(group)
        if x.ndim != 3:
            raise ValueError(
                f"data.root: {path}: pixels of client {group.name.rsplit('/', 1)[-1]!r} have "
                f"shape {tuple(x.shape)}; expected k×28×28"
            )
        return x.unsqueeze(1), y

    return Hdf5ClientStore(
        path,
        decode,
        first_axis("label", str(path)),
        "label",
        num_classes,
        **_store_options(options),
    )


def load_tff_emnist(
    root: str,
    seed: int,
    only_digits: bool = False,
    max_test_examples: int | None = None,
    **options: Any,
) -> FederatedData:
    check_tff_emnist(root, False, only_digits)
    train, test, archive = _emnist_files(only_digits)
    classes = 10 if only_digits else 62
    clients = _emnist_store(find_file(root, train, archive), classes, options)
    held = _emnist_store(find_file(root, test, archive), classes, options)
    order = sample_clients(len(held), seed, max_test_examples is not None)
    return FederatedData(clients, gather(held, order, max_test_examples))


# -- Shakespeare ----------------------------------------------------------------------------
CHAR_VOCAB = (
    "dhlptx@DHLPTX $(,048cgkoswCGKOSW[_#'/37;?bfjnrvzBFJNRVZ\"&*.26:\naeimquyAEIMQUY]!%)-159\r"
)
SHAKESPEARE_TOKENS = len(CHAR_VOCAB) + 4  # padding, out of vocabulary, BOS, EOS: 90
_CHAR_ID = {c: i + 1 for i, c in enumerate(CHAR_VOCAB)}
_CHAR_OOV, _CHAR_BOS, _CHAR_EOS = len(CHAR_VOCAB) + 1, len(CHAR_VOCAB) + 2, len(CHAR_VOCAB) + 3


def shakespeare_chunks(snippet: bytes | str, seq_len: int = 80) -> np.ndarray:
    """One snippet as rows of ``seq_len + 1`` token ids: BOS, characters, EOS, padding 0."""
    text = snippet.decode("utf-8") if isinstance(snippet, bytes) else str(snippet)
    ids = [_CHAR_BOS, *(_CHAR_ID.get(c, _CHAR_OOV) for c in text), _CHAR_EOS]
    ids += [0] * (-len(ids) % (seq_len + 1))
    return np.asarray(ids, dtype=np.int64).reshape(-1, seq_len + 1)


def _shakespeare_store(path: Path, seq_len: int, options: dict[str, Any]) -> Hdf5ClientStore:
    def rows(group: Any) -> np.ndarray:
        snippets = np.asarray(feature(group, "snippets", str(path))).reshape(-1)
        if not len(snippets):
            return np.zeros((0, seq_len + 1), dtype=np.int64)
        return np.concatenate([shakespeare_chunks(s, seq_len) for s in snippets])

    def decode(group: Any) -> tuple[torch.Tensor, torch.Tensor]:
        r = torch.from_numpy(rows(group))
        return r[:, :-1].contiguous(), r[:, 1:].contiguous()

    return Hdf5ClientStore(
        path,
        decode,
        lambda g: len(rows(g)),
        f"shakespeare-chunks-{seq_len}",
        SHAKESPEARE_TOKENS,
        **_store_options(options),
    )


def check_tff_shakespeare(root: str, download: bool, **_: object) -> None:
    require_h5py()
    for name in ("shakespeare_train.h5", "shakespeare_test.h5"):
        find_file(root, name, "shakespeare")


def load_tff_shakespeare(
    root: str,
    seed: int,
    seq_len: int = 80,
    max_test_examples: int | None = None,
    **options: Any,
) -> FederatedData:
    check_tff_shakespeare(root, False)
    clients = _shakespeare_store(
        find_file(root, "shakespeare_train.h5", "shakespeare"), seq_len, options
    )
    held = _shakespeare_store(
        find_file(root, "shakespeare_test.h5", "shakespeare"), seq_len, options
    )
    order = sample_clients(len(held), seed, max_test_examples is not None)
    return FederatedData(clients, gather(held, order, max_test_examples))


# -- StackOverflow --------------------------------------------------------------------------
SO_FILES = ("stackoverflow_train.h5", "stackoverflow_held_out.h5", "stackoverflow_test.h5")
SO_WORD_COUNT = "stackoverflow.word_count"


def read_vocabulary(path: Path, vocab_size: int) -> list[str]:
    """The ``vocab_size`` first words of a ``word count`` file (most frequent first)."""
    words: list[str] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2 or not parts[1].isdigit():
                raise ValueError(
                    f"data.root: {path}:{lineno}: expected 'word count', got {line.strip()!r}"
                )
            words.append(parts[0])
            if len(words) == vocab_size:
                break
    if len(words) < vocab_size:
        raise ValueError(
            f"data.dataset_options.vocab_size: {path} has {len(words)} words, fewer than "
            f"{vocab_size}"
        )
    return words


class NextWordIds:
    """TFF's StackOverflow next-word encoding (``word_prediction_preprocessing``) of one
    sentence: ``seq_len + 1`` ids, see the module docstring."""

    def __init__(self, vocab: list[str], seq_len: int = 20) -> None:
        self.index = {w: i + 1 for i, w in enumerate(vocab)}
        self.seq_len = seq_len
        n = len(vocab)
        self.oov, self.bos, self.eos = n + 1, n + 2, n + 3
        self.num_tokens = n + 4

    def __call__(self, sentence: bytes | str) -> list[int]:
        text = sentence.decode("utf-8") if isinstance(sentence, bytes) else str(sentence)
        words = text.split(" ")[: self.seq_len]
        ids = [self.index.get(w, self.oov) for w in words]
        if len(ids) < self.seq_len:
            ids.append(self.eos)
        ids = [self.bos, *ids]
        return ids + [0] * (self.seq_len + 1 - len(ids))


def _stackoverflow_store(
    path: Path, encode: NextWordIds, options: dict[str, Any]
) -> Hdf5ClientStore:
    def decode(group: Any) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = np.asarray(feature(group, "tokens", str(path))).reshape(-1)
        ids = torch.tensor([encode(s) for s in tokens], dtype=torch.int64)
        ids = ids.reshape(len(tokens), encode.seq_len + 1)
        return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    return Hdf5ClientStore(
        path,
        decode,
        first_axis("tokens", str(path)),
        "tokens",
        encode.num_tokens,
        **_store_options(options),
    )


def check_tff_stackoverflow(root: str, download: bool, **_: object) -> None:
    require_h5py()
    for name in SO_FILES:
        find_file(root, name, "stackoverflow")
    find_file(root, SO_WORD_COUNT, SO_WORD_COUNT)


def load_tff_stackoverflow(
    root: str,
    seed: int,
    vocab_size: int = 10_000,
    seq_len: int = 20,
    max_val_examples: int | None = 10_000,
    max_test_examples: int | None = 10_000,
    **options: Any,
) -> FederatedData:
    check_tff_stackoverflow(root, False)
    if vocab_size < 1 or seq_len < 1:
        raise ValueError(
            f"data.dataset_options: vocab_size and seq_len must be >= 1, got {vocab_size}, "
            f"{seq_len}"
        )
    vocab = read_vocabulary(find_file(root, SO_WORD_COUNT, SO_WORD_COUNT), vocab_size)
    encode = NextWordIds(vocab, seq_len)
    train, held_out, test = (
        _stackoverflow_store(find_file(root, name, "stackoverflow"), encode, options)
        for name in SO_FILES
    )
    val = gather(
        held_out,
        sample_clients(len(held_out), seed, max_val_examples is not None),
        max_val_examples,
    )
    tst = gather(
        test, sample_clients(len(test), seed + 1, max_test_examples is not None), max_test_examples
    )
    return FederatedData(train, tst, val)


# -- any file of the layout -----------------------------------------------------------------
def check_federated_hdf5(
    root: str,
    download: bool,
    train: str | None = None,
    test: str | None = None,
    num_classes: int | None = None,
    **_: object,
) -> None:
    require_h5py()
    for field, value in (("train", train), ("test", test), ("num_classes", num_classes)):
        if value is None:
            raise ValueError(f"data.dataset_options.{field}: federated_hdf5 needs it")
    for name in (train, test):
        if not (Path(root) / str(name)).is_file():
            raise ValueError(f"data.root: {name} not found under {root!r}")


def load_federated_hdf5(
    root: str,
    seed: int,
    train: str | None = None,
    test: str | None = None,
    x: str = "x",
    y: str = "y",
    num_classes: int | None = None,
    max_test_examples: int | None = None,
    **options: Any,
) -> FederatedData:
    check_federated_hdf5(root, False, train, test, num_classes)
    stores = []
    for name in (train, test):
        path = Path(root) / str(name)
        stores.append(
            Hdf5ClientStore(
                path,
                array_decoder(x, y, str(path)),
                first_axis(y, str(path)),
                y,
                int(num_classes or 0),
                **_store_options(options),
            )
        )
    order = sample_clients(len(stores[1]), seed, max_test_examples is not None)
    return FederatedData(stores[0], gather(stores[1], order, max_test_examples))


def _unused_load(**_: object) -> tuple[TensorDataset, TensorDataset]:
    raise ValueError("data.dataset: a federated source is read through its federated loader")


for _name, _load, _check in (
    ("tff_emnist", load_tff_emnist, check_tff_emnist),
    ("tff_shakespeare", load_tff_shakespeare, check_tff_shakespeare),
    ("tff_stackoverflow", load_tff_stackoverflow, check_tff_stackoverflow),
    ("federated_hdf5", load_federated_hdf5, check_federated_hdf5),
):
    register_dataset(_name, DatasetSpec(load=_unused_load, check=_check, federated=_load))
