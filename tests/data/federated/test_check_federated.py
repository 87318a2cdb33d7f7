"""``python -m fl_lightning.data.check_federated``: the summary a run would see, or one line."""

from __future__ import annotations

import pytest

from fl_lightning.data.check_federated import main
from fl_lightning.testing.federated_files import write_tff_emnist


def test_summary_of_a_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FL_LIGHTNING_CACHE", str(tmp_path / "index"))
    root = write_tff_emnist(tmp_path / "tff")
    assert main(["tff_emnist", "--root", str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "dataset tff_emnist: 6 clients, 31 training examples, 62 classes"
    assert out[2].startswith("client 0 (f0000_00): x (6, 1, 28, 28) float32, y (6,) int64")
    assert out[-1].startswith("test: 9 examples")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tff_emnist", "--root", "nowhere"], "error: data.root: fed_emnist_train.h5 not found"),
        (["digits"], "error: data.dataset: 'digits' is not a federated source"),
        (["tff_emnist", "--options", "[1]"], "error: data.dataset_options: --options must be"),
    ],
)
def test_bad_input_is_one_line(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FL_LIGHTNING_CACHE", str(tmp_path / "index"))
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message)
    assert list(tmp_path.iterdir()) == []
