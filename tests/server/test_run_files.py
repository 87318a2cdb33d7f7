"""A run's own files (server/run_files.py) go where the run chose, never into the directory the
user started it from: Lightning falls back to the working directory for a Trainer with neither a
logger nor a ``default_root_dir``, and a ``summary.json`` there may be the user's own."""

from __future__ import annotations

from fl_lightning.server.run_files import NOT_WRITTEN, run_files_dir
from fl_lightning.strategies.fedavg import FedAvg
from tests.strategies.dpfl_agn_helpers import tiny_run

RUN_FILES = ["label_histogram.csv", "privacy_ledger.json", "privacy_statement.md", "summary.json"]


def test_the_working_directory_is_never_a_run_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_files_dir(None) is None
    assert run_files_dir(".") is None
    assert run_files_dir(str(tmp_path)) is None
    assert run_files_dir(str(tmp_path / "run")) == str(tmp_path / "run")
    assert run_files_dir("run") == "run"


def test_a_trainer_without_a_directory_leaves_the_working_directory_as_it_was(
    tmp_path, monkeypatch, capsys
):
    """``Trainer(logger=False)`` without ``default_root_dir``: the user's own ``summary.json``
    is kept, nothing is added beside it, and the printed line says why no files were written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "summary.json").write_text("mine\n")
    tiny_run(FedAvg(), rounds=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
    assert (tmp_path / "summary.json").read_text() == "mine\n"
    assert NOT_WRITTEN in capsys.readouterr().out


def test_a_trainer_given_a_directory_gets_the_run_files_there(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    tiny_run(FedAvg(), rounds=1, default_root_dir=str(tmp_path / "run"))
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == RUN_FILES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    out = capsys.readouterr().out
    assert NOT_WRITTEN not in out and f"details: {tmp_path / 'run' / 'privacy_statement.md'}" in out
