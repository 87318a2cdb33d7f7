"""COVID-19 Radiography loader on a tiny generated PNG fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from fl_lightning.data.datamodule import FederatedDataModule
from fl_lightning.data.datasets import DATASETS
from tests.data.sources.covid_fixture import make_covid_fixture


@pytest.mark.parametrize("kaggle_layout", [True, False])
def test_loads_four_classes_resized(tmp_path: Path, kaggle_layout: bool) -> None:
    make_covid_fixture(tmp_path, per_class=4, kaggle_layout=kaggle_layout)
    train, test = DATASETS["covid_radiography"].load(
        root=str(tmp_path), download=False, seed=0, test_fraction=0.25, image_size=8
    )
    assert train.num_classes == 4
    assert train.x.shape == (12, 1, 8, 8) and test.x.shape == (4, 1, 8, 8)
    assert sorted(test.y.tolist()) == [0, 1, 2, 3]  # stratified
    assert float(train.x.min()) >= -1.0 and float(train.x.max()) <= 1.0
    # Class k's fixture pixels are brighter with k: the labels follow the sorted folder names.
    means = [float(train.x[train.y == k].mean()) for k in range(4)]
    assert means == sorted(means)


def test_missing_files_one_line_error_naming_data_root(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^data\.root: COVID-19 Radiography") as err:
        FederatedDataModule(dataset="covid_radiography", root=str(tmp_path / "absent"))
    assert "\n" not in str(err.value)
    (tmp_path / "COVID").mkdir()  # partial layout: still the same clear error
    with pytest.raises(ValueError, match=r"data\.root"):
        FederatedDataModule(dataset="covid_radiography", root=str(tmp_path))
