"""FLAIR (Song et al. 2022): 51,414 Flickr users' images with multi-label annotations, from
the HDF5 file pfl-research's ``prepare_dataset`` writes (``flair_federated.hdf5``).

Layout: ``/<partition>/<user_id>/images`` uint8 k×H×W×3 (256×256), ``image_ids``, and the
labels as sparse multi-hot coordinates ``labels_row``/``labels_col`` (17 coarse labels) and
``fine_grained_labels_row``/``_col`` (1,628); ``/metadata/label_mapping`` and
``/metadata/fine_grained_label_mapping`` are JSON objects label → index. Partitions ``train``,
``val`` and ``test`` hold disjoint users: training clients are the ``train`` users, the test
split the ``test`` users' images (held-out clients; ``max_test_examples`` caps a seeded sample),
validation the ``val`` users'. ``x``: float32 k×3×H×W in [0, 1]; ``y``: the float32 k×C
multi-hot labels. FLAIR is multi-label: its benchmark trains with a sigmoid/binary
cross-entropy loss and scores averaged precision, which this project's classification client
(softmax cross-entropy, accuracy) does not do; the loader delivers the data for such a client.
``max_user_images`` keeps a user's first images (pfl-research: 512).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fl_lightning.data.datasets import DatasetSpec, register_dataset
from fl_lightning.data.federated.hdf5 import Hdf5ClientStore, feature, require_h5py
from fl_lightning.data.federated.store import FederatedData, gather
from fl_lightning.data.federated.tff import _unused_load, sample_clients

FLAIR_SOURCE = (
    "pfl-research's benchmarks/dataset/flair (python -m dataset.flair.download_preprocess "
    "--output_file flair_federated.hdf5)"
)


def label_mapping(path: Path, fine_grained: bool) -> dict[str, int]:
    h5py = require_h5py()
    key = "metadata/fine_grained_label_mapping" if fine_grained else "metadata/label_mapping"
    with h5py.File(path, "r") as f:
        if key not in f:
            raise ValueError(f"data.root: {path} has no /{key} (FLAIR HDF5)")
        raw = f[key][()]
    try:
        mapping = json.loads(raw.decode() if isinstance(raw, bytes) else str(raw))
    except json.JSONDecodeError as err:
        raise ValueError(f"data.root: {path}: /{key} is not JSON ({err})") from err
    return {str(k): int(v) for k, v in mapping.items()}


def _store(
    path: Path,
    partition: str,
    classes: int,
    fine_grained: bool,
    max_images: int,
    options: dict[str, Any],
) -> Hdf5ClientStore:
    prefix = "fine_grained_labels" if fine_grained else "labels"

    def decode(group: Any) -> tuple[torch.Tensor, torch.Tensor]:
        images = np.asarray(feature(group, "images", str(path)))[:max_images]
        if images.ndim != 4 or images.shape[-1] != 3:
            raise ValueError(
                f"data.root: {path}: {group.name}/images has shape {images.shape}; expected k×H×W×3"
            )
        rows = np.asarray(feature(group, f"{prefix}_row", str(path)), dtype=np.int64)
        cols = np.asarray(feature(group, f"{prefix}_col", str(path)), dtype=np.int64)
        if len(cols) and cols.max() >= classes:
            raise ValueError(
                f"data.root: {path}: {group.name}/{prefix}_col has label "
                f"{cols.max()} beyond the {classes} of the label mapping"
            )
        y = np.zeros((len(images), classes), dtype=np.float32)
        keep = rows < len(images)
        y[rows[keep], cols[keep]] = 1.0
        x = torch.from_numpy(np.moveaxis(images, -1, 1).astype(np.float32) / 255.0)
        return x, torch.from_numpy(y)

    def size_of(group: Any) -> int:
        if "image_ids" not in group:
            feature(group, "image_ids", str(path))
        return min(int(group["image_ids"].shape[0]), max_images)

    return Hdf5ClientStore(
        path, decode, size_of, f"flair-{max_images}", classes, group=partition, **options
    )


def check_flair(
    root: str,
    download: bool,
    file: str = "flair_federated.hdf5",
    fine_grained: bool = False,
    **_: Any,
) -> None:
    require_h5py()
    path = Path(root) / file
    if not path.is_file():
        raise ValueError(
            f"data.root: {file} not found under {root!r}; it comes from {FLAIR_SOURCE}"
        )
    label_mapping(path, fine_grained)


def load_flair(
    root: str,
    seed: int,
    file: str = "flair_federated.hdf5",
    fine_grained: bool = False,
    max_user_images: int = 512,
    max_val_examples: int | None = None,
    max_test_examples: int | None = None,
    **options: Any,
) -> FederatedData:
    check_flair(root, False, file, fine_grained)
    path = Path(root) / file
    classes = len(label_mapping(path, fine_grained))
    store_options: dict[str, Any] = {
        k: options[k] for k in ("index_cache", "cache_clients") if k in options
    }
    train, val, test = (
        _store(path, p, classes, fine_grained, max_user_images, store_options)
        for p in ("train", "val", "test")
    )
    return FederatedData(
        train,
        gather(
            test, sample_clients(len(test), seed, max_test_examples is not None), max_test_examples
        ),
        gather(
            val, sample_clients(len(val), seed + 1, max_val_examples is not None), max_val_examples
        ),
    )


register_dataset("flair", DatasetSpec(load=_unused_load, check=check_flair, federated=load_flair))
