"""Dataset registry: every source returns in-memory tensors (train and test splits).

Registered names: ``digits`` (scikit-learn, offline), ``mnist_offline`` (the MNIST test set in
IDX format from a directory, split train/test seeded and stratified), ``synthetic`` (seeded,
learnable), and the torchvision datasets ``mnist``, ``fashion_mnist``, ``emnist`` (byclass or
balanced), ``cifar10`` and ``cifar100``. Later modules add more with :func:`register_dataset`.
"""

from __future__ import annotations

import gzip
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fl_lightning.utils.shared import SHARED_DATA_ENV, is_shipped_data_root, shared_candidates


@dataclass
class TensorDataset:
    """A whole split in memory. ``x`` is float32 (N, ...), ``y`` int64 (N,)."""

    x: torch.Tensor
    y: torch.Tensor
    num_classes: int

    def __len__(self) -> int:
        return int(self.y.shape[0])


@dataclass
class DatasetSpec:
    """How to load one dataset.

    Attributes:
        load: ``load(root, download, seed, **options) -> (train, test)``.
        check: ``check(root, download, **options)`` raises ``ValueError`` naming the field when
            the data cannot be had (missing files with download off), before any work starts.
        natural_clients: optional ``(train) -> list[index tensor]`` for datasets with their own
            client split (e.g. LEAF Shakespeare speakers).
        federated: optional ``federated(root, seed, **options) ->``
            :class:`~fl_lightning.data.federated.store.FederatedData`: a source of natural
            clients read one client at a time (``data/federated/``); the DataModule uses it
            instead of ``load`` (``partitioner: natural``).
    """

    load: Callable[..., tuple[TensorDataset, TensorDataset]]
    check: Callable[..., None] | None = None
    natural_clients: Callable[..., list[torch.Tensor]] | None = None
    federated: Callable[..., Any] | None = None


DATASETS: dict[str, DatasetSpec] = {}


def register_dataset(name: str, spec: DatasetSpec) -> DatasetSpec:
    if name in DATASETS:
        raise ValueError(f"dataset {name!r} is already registered")
    DATASETS[name] = spec
    return spec


def stratified_split(
    y: np.ndarray, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split keeping each class's share in both parts."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for label in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == label))
        n_test = int(round(len(idx) * test_fraction))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


# -- digits (scikit-learn, ships with the package) ------------------------------------------
def _load_digits(
    root: str, download: bool, seed: int, test_fraction: float = 0.2, **_: object
) -> tuple[TensorDataset, TensorDataset]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = (x - 0.5) / 0.5
    y = torch.tensor(bunch.target, dtype=torch.int64)
    tr, te = stratified_split(bunch.target, test_fraction, seed)
    return TensorDataset(x[tr], y[tr], 10), TensorDataset(x[te], y[te], 10)


# -- MNIST test set in IDX format (offline) -------------------------------------------------
IDX_IMAGES = "t10k-images-idx3-ubyte"
IDX_LABELS = "t10k-labels-idx1-ubyte"
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def _find_idx(root: Path, stem: str) -> Path | None:
    for base in (root, root / "MNIST" / "raw", root / "raw"):
        for name in (stem, stem + ".gz"):
            if (base / name).is_file():
                return base / name
    return None


def read_idx(path: Path) -> np.ndarray:
    """Reads an IDX file (big-endian header; magic 2051 images, 2049 labels)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = struct.unpack(">I", data[:4])[0]
    if magic not in (2049, 2051):
        raise ValueError(f"data.root: {path} is not an IDX file (magic {magic})")
    ndim = magic & 0xFF
    shape = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def mnist_offline_root(root: str) -> Path:
    """The folder holding the MNIST test set.

    An explicit ``data.root`` is used as given: the command line or a config beats the
    environment. Only the shipped configs' ``../shared/data`` (which holds from a checkout
    beside ``shared/``) is looked for further: that folder when it holds the files, else
    ``$FL_SHARED_DATA`` when set, else the nearest ``shared/data`` inside, beside or above the
    checkout (:mod:`fl_lightning.utils.shared`). Raises ``ValueError`` naming where it looked.
    """
    candidates = [Path(root)]
    shipped = is_shipped_data_root(root)
    if shipped:
        candidates += [c for c in shared_candidates("data", SHARED_DATA_ENV) if c != Path(root)]
    for base in candidates:
        if all(_find_idx(base, stem) is not None for stem in (IDX_IMAGES, IDX_LABELS)):
            return base
    env = os.environ.get(SHARED_DATA_ENV)
    if not shipped:
        looked = repr(root)
        hint = f" (${SHARED_DATA_ENV} is not consulted for an explicit data.root)" if env else ""
    elif env:
        looked, hint = f"{root!r} or ${SHARED_DATA_ENV} {env!r}", ""
    else:
        looked = f"{root!r} or shared/data inside, beside or above the checkout"
        hint = f"; set {SHARED_DATA_ENV} to the folder holding them"
    raise ValueError(
        f"data.root: {IDX_IMAGES}[.gz] and {IDX_LABELS}[.gz] not found under {looked} "
        f"(looked in ., MNIST/raw, raw){hint}"
    )


def _check_mnist_offline(root: str, download: bool, **_: object) -> None:
    mnist_offline_root(root)


def _load_mnist_offline(
    root: str, download: bool, seed: int, test_fraction: float = 0.2, **_: object
) -> tuple[TensorDataset, TensorDataset]:
    base = mnist_offline_root(root)
    images = read_idx(_find_idx(base, IDX_IMAGES))  # type: ignore[arg-type]
    labels = read_idx(_find_idx(base, IDX_LABELS)).astype(np.int64)  # type: ignore[arg-type]
    x = torch.tensor(images, dtype=torch.float32).unsqueeze(1) / 255.0
    x = (x - MNIST_MEAN) / MNIST_STD
    y = torch.from_numpy(labels.copy())
    tr, te = stratified_split(labels, test_fraction, seed)
    return TensorDataset(x[tr], y[tr], 10), TensorDataset(x[te], y[te], 10)


# -- synthetic (seeded, learnable) ----------------------------------------------------------
def _load_synthetic(
    root: str,
    download: bool,
    seed: int,
    num_examples: int = 2000,
    num_features: int = 32,
    shape: list[int] | None = None,
    num_classes: int = 10,
    test_fraction: float = 0.2,
    **_: object,
) -> tuple[TensorDataset, TensorDataset]:
    """Gaussian class clusters around random centres: linearly separable up to the noise.

    ``shape`` (e.g. ``[3, 32, 32]``) reshapes each example into an image of that shape, so
    image models can run offline on learnable data of the right size.
    """
    dims = [num_features] if shape is None else [int(v) for v in shape]
    features = int(np.prod(dims))
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(num_classes, features, generator=g, device=g.device) * 2.0
    y = torch.randint(0, num_classes, (num_examples,), generator=g, device=g.device)
    x = (centres[y] + torch.randn(num_examples, features, generator=g, device=g.device)).view(
        -1, *dims
    )
    tr, te = stratified_split(y.numpy(), test_fraction, seed)
    return (
        TensorDataset(x[tr], y[tr], num_classes),
        TensorDataset(x[te], y[te], num_classes),
    )


# -- torchvision ----------------------------------------------------------------------------
_TORCHVISION = {
    # name: (class name, num_classes, mean, std)
    "mnist": ("MNIST", 10, (0.1307,), (0.3081,)),
    "fashion_mnist": ("FashionMNIST", 10, (0.2860,), (0.3530,)),
    "emnist": ("EMNIST", None, (0.1751,), (0.3332,)),
    "cifar10": ("CIFAR10", 10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ("CIFAR100", 100, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}
_EMNIST_CLASSES = {"byclass": 62, "balanced": 47}
# Where torchvision looks for each dataset's files under data.root.
_LAYOUT = {
    "mnist": "MNIST/raw/*-ubyte[.gz]",
    "fashion_mnist": "FashionMNIST/raw/*-ubyte[.gz]",
    "emnist": "EMNIST/raw/",
    "cifar10": "cifar-10-batches-py/",
    "cifar100": "cifar-100-python/",
}


def _torchvision_kwargs(name: str, split: str | None) -> dict[str, object]:
    if name != "emnist":
        return {}
    split = split or "balanced"
    if split not in _EMNIST_CLASSES:
        raise ValueError(f"data.split: EMNIST split must be 'byclass' or 'balanced', got {split!r}")
    return {"split": split}


def _make_torchvision_check(name: str) -> Callable[..., None]:
    def check(root: str, download: bool, split: str | None = None, **_: object) -> None:
        import torchvision

        cls = getattr(torchvision.datasets, _TORCHVISION[name][0])
        kwargs = _torchvision_kwargs(name, split)
        try:
            cls(root, train=False, download=False, **kwargs)
            return
        except RuntimeError as err:
            if not download:
                raise ValueError(
                    f"data.root: {name} files not found under {root!r} ({_LAYOUT[name]}) and "
                    "data.download is false"
                ) from err
        try:  # fetched here, so that no internet is one line before any work
            for train in (True, False):
                cls(root, train=train, download=True, **kwargs)
        except (OSError, RuntimeError) as err:  # URLError is an OSError
            reason = str(getattr(err, "reason", "") or err).splitlines()[0]
            raise ValueError(
                f"data.download: could not download {name} ({reason}); no internet? Put the "
                f"files under {root!r} ({_LAYOUT[name]}) and set data.download false, or use an "
                "offline dataset: data.dataset mnist_offline (the MNIST test set, IDX files) or "
                "digits (ships with scikit-learn)"
            ) from err

    return check


def _make_torchvision_loader(name: str) -> Callable[..., tuple[TensorDataset, TensorDataset]]:
    def load(
        root: str, download: bool, seed: int, split: str | None = None, **_: object
    ) -> tuple[TensorDataset, TensorDataset]:
        import torchvision

        cls_name, num_classes, mean, std = _TORCHVISION[name]
        cls = getattr(torchvision.datasets, cls_name)
        kwargs = _torchvision_kwargs(name, split)
        if name == "emnist":
            num_classes = _EMNIST_CLASSES[str(kwargs["split"])]
        parts = []
        for train in (True, False):
            ds = cls(root, train=train, download=download, **kwargs)
            data = torch.as_tensor(np.asarray(ds.data))
            x = data.float() / 255.0
            x = x.unsqueeze(1) if x.ndim == 3 else x.permute(0, 3, 1, 2)
            m = torch.tensor(mean).view(1, -1, 1, 1)
            s = torch.tensor(std).view(1, -1, 1, 1)
            y = torch.as_tensor(np.asarray(ds.targets), dtype=torch.int64)
            assert num_classes is not None  # set above for the one entry without (EMNIST)
            parts.append(TensorDataset(((x - m) / s).contiguous(), y, int(num_classes)))
        return parts[0], parts[1]

    return load


register_dataset("digits", DatasetSpec(load=_load_digits))
register_dataset("mnist_offline", DatasetSpec(load=_load_mnist_offline, check=_check_mnist_offline))
register_dataset("synthetic", DatasetSpec(load=_load_synthetic))
for _name in _TORCHVISION:
    register_dataset(
        _name,
        DatasetSpec(load=_make_torchvision_loader(_name), check=_make_torchvision_check(_name)),
    )


# Further sources register themselves on import: one module each in data/sources/ (e.g. LEAF
# Shakespeare), and the lazy federated sources of data/federated/ (TFF HDF5, LEAF JSON, FLAIR,
# Hugging Face).
import fl_lightning.data.federated  # noqa: E402,F401
import fl_lightning.data.sources  # noqa: E402,F401
