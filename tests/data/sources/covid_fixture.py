"""A tiny generated COVID-19 Radiography tree (4 class folders of small random PNGs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from fl_lightning.data.sources.covid_radiography import CLASSES


def make_covid_fixture(root: Path, per_class: int = 4, kaggle_layout: bool = True) -> Path:
    """Writes ``per_class`` random grayscale PNGs (of varying sizes) for each of the 4 classes."""
    rng = np.random.default_rng(0)
    base = root / "COVID-19_Radiography_Dataset" if kaggle_layout else root
    for label, name in enumerate(CLASSES):
        folder = base / name / "images" if kaggle_layout else base / name
        folder.mkdir(parents=True)
        if kaggle_layout:
            (base / name / "masks").mkdir()
        for i in range(per_class):
            side = 20 + 3 * i
            pixels = rng.integers(0, 256, (side, side), dtype=np.uint8) // 4 + 60 * label
            Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{name}-{i}.png")
    return root
