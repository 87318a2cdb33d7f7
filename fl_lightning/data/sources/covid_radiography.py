"""COVID-19 Radiography Database (Chowdhury et al. 2020; Rahman et al. 2021; Kaggle), the
4-class chest X-ray task of the GCFL paper (21,165 images of 299×299: COVID 3,616, Lung_Opacity
6,012, Normal 10,192, Viral Pneumonia 1,345; the paper lists three classes but its total needs
all four).

Layout (ImageFolder): ``<data.root>/<class>/*.png`` or the Kaggle archive's
``<data.root>/[COVID-19_Radiography_Dataset/]<class>/images/*.png`` (``masks/`` is ignored).
Classes are the four folder names in sorted order. Images are read as grayscale, resized to
``image_size`` × ``image_size`` (bilinear), scaled to [0, 1] and normalised to (x − 0.5)/0.5.
No official split exists: a seeded stratified split holds out ``data.test_fraction`` (0.15
gives the paper's 17,993 / 3,172 proportions).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fl_lightning.data.datasets import (
    DatasetSpec,
    TensorDataset,
    register_dataset,
    stratified_split,
)

CLASSES = ("COVID", "Lung_Opacity", "Normal", "Viral Pneumonia")
ARCHIVE_DIR = "COVID-19_Radiography_Dataset"
EXTENSIONS = (".png", ".jpg", ".jpeg")


def _class_dirs(root: Path) -> list[Path] | None:
    for base in (root, root / ARCHIVE_DIR):
        dirs = [base / c for c in CLASSES]
        if all(d.is_dir() for d in dirs):
            return [d / "images" if (d / "images").is_dir() else d for d in dirs]
    return None


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in EXTENSIONS)


def _check(root: str, download: bool, **_: object) -> None:
    dirs = _class_dirs(Path(root))
    if dirs is None or any(not _files(d) for d in dirs):
        raise ValueError(
            f"data.root: COVID-19 Radiography images not found under {root!r} (expected "
            f"class folders {', '.join(CLASSES)} with .png files, optionally in {ARCHIVE_DIR}/)"
        )


def _load(
    root: str,
    download: bool,
    seed: int,
    test_fraction: float = 0.15,
    image_size: int = 64,
    **_: object,
) -> tuple[TensorDataset, TensorDataset]:
    from PIL import Image

    _check(root, download)
    if image_size < 1:
        raise ValueError(f"data.dataset_options.image_size: must be >= 1, got {image_size}")
    images: list[np.ndarray] = []
    labels: list[int] = []
    for label, folder in enumerate(_class_dirs(Path(root)) or []):
        for path in _files(folder):
            with Image.open(path) as img:
                small = img.convert("L").resize((image_size, image_size), Image.Resampling.BILINEAR)
                images.append(np.asarray(small, dtype=np.uint8))
            labels.append(label)
    x = torch.from_numpy(np.stack(images)).float().unsqueeze(1) / 255.0
    x = (x - 0.5) / 0.5
    y_np = np.asarray(labels, dtype=np.int64)
    y = torch.from_numpy(y_np)
    tr, te = stratified_split(y_np, test_fraction, seed)
    k = len(CLASSES)
    return TensorDataset(x[tr], y[tr], k), TensorDataset(x[te], y[te], k)


register_dataset("covid_radiography", DatasetSpec(load=_load, check=_check))
