"""Where the data is: an explicit ``data.root`` beats ``$FL_SHARED_DATA``, which beats the
``shared/data`` lookup; the lookup finds ``shared/data`` inside the checkout (a device machine's
copy), beside it or above it (issues 37, 39). One lookup serves the data module, the
reproduction harness and the tests (``fl_lightning/utils/shared.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import fl_lightning.utils.shared as shared
from fl_lightning.data.datasets import IDX_IMAGES, IDX_LABELS, mnist_offline_root


def _mnist_folder(folder: Path) -> Path:
    raw = folder / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for stem in (IDX_IMAGES, IDX_LABELS):
        (raw / f"{stem}.gz").write_bytes(b"")  # only their presence is looked at here
    return folder


@pytest.fixture
def away(tmp_path, monkeypatch) -> Path:
    """A checkout at tmp/a/b/repo, the working directory tmp/cwd, FL_SHARED_DATA unset."""
    checkout = tmp_path / "a" / "b" / "repo"
    checkout.mkdir(parents=True)
    (tmp_path / "cwd").mkdir()
    monkeypatch.setattr(shared, "CHECKOUT", checkout)
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.delenv(shared.SHARED_DATA_ENV, raising=False)
    return checkout


def test_finds_shared_data_inside_the_checkout(away) -> None:
    inside = _mnist_folder(away / "shared" / "data")
    _mnist_folder(away.parent / "shared" / "data")  # beside: farther than inside
    assert shared.find_shared_data() == inside.resolve()
    assert mnist_offline_root("../shared/data") == inside


def test_finds_shared_data_beside_the_checkout_or_above(away) -> None:
    above = _mnist_folder(away.parents[1] / "shared" / "data")
    assert shared.find_shared_data() == above.resolve()
    beside = _mnist_folder(away.parent / "shared" / "data")
    assert shared.find_shared_data() == beside.resolve()
    assert mnist_offline_root("../shared/data") == beside


def test_environment_beats_the_lookup_and_is_not_second_guessed(away, tmp_path, monkeypatch):
    _mnist_folder(away / "shared" / "data")
    chosen = _mnist_folder(tmp_path / "chosen")
    monkeypatch.setenv(shared.SHARED_DATA_ENV, str(chosen))
    assert shared.find_shared_data() == chosen.resolve()
    assert mnist_offline_root("../shared/data") == chosen
    monkeypatch.setenv(shared.SHARED_DATA_ENV, str(tmp_path / "empty"))
    assert shared.find_shared_data() is None
    with pytest.raises(ValueError, match=r"data.root: .* or \$FL_SHARED_DATA .*empty"):
        mnist_offline_root("../shared/data")


def test_explicit_root_beats_the_environment(away, tmp_path, monkeypatch):
    env = _mnist_folder(tmp_path / "env")
    monkeypatch.setenv(shared.SHARED_DATA_ENV, str(env))
    mine = _mnist_folder(tmp_path / "mine")
    assert mnist_offline_root(str(mine)) == mine
    missing = tmp_path / "missing"
    with pytest.raises(ValueError, match="not consulted for an explicit data.root") as err:
        mnist_offline_root(str(missing))
    assert repr(str(missing)) in str(err.value) and str(env) not in str(err.value)


def test_shipped_root_that_holds_the_files_beats_the_environment(away, tmp_path, monkeypatch):
    """``../shared/data`` is a config value: where it holds the files, they are read."""
    config_side = _mnist_folder(tmp_path / "shared" / "data")  # ../shared/data from tmp/cwd
    monkeypatch.setenv(shared.SHARED_DATA_ENV, str(_mnist_folder(tmp_path / "env")))
    assert mnist_offline_root("../shared/data").resolve() == config_side.resolve()


def test_nothing_found_says_where_it_looked(away) -> None:
    with pytest.raises(ValueError, match="shared/data inside, beside or above the checkout"):
        mnist_offline_root("../shared/data")
    assert shared.find_shared_data() is None
