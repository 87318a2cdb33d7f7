"""Argument errors of the argparse subcommands (``repro``, ``sweep``, ``report``, ``audit``) are
one line naming the option and the value, exit 2, no usage screen (issue 58 item 3); flags that
each do something else are refused together instead of one being silently ignored."""

from __future__ import annotations

import pytest

from fl_lightning.utils.argparse_lines import argparse_line


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["repro", "000", "--verify", "abc"], "error: --verify: expected an integer, got 'abc'"),
        (["repro", "000", "--verify-seed", "x"],
         "error: --verify-seed: expected an integer, got 'x'"),
        (["repro", "000", "--verify", "3", "--report-only"],
         "error: --report-only: not allowed with --verify"),
        (["repro", "000", "--register", "--dry-run"],
         "error: --dry-run: not allowed with --register"),
        (["repro", "000", "--verify-seed", "3"], "error: --verify-seed: only with --verify K"),
        (["repro"], "error: paper: required (see fl-lightning repro --help)"),
        (["repro", "000", "--jbos", "2"], "error: --jbos: not an option of fl-lightning repro"),
        (["sweep", "x.yaml", "--count", "1.5"], "error: --count: expected an integer, got '1.5'"),
        (["report", "runs", "--paper"], "error: --paper: expected one argument"),
        (["audit", "--config", "x.yaml", "--attack", "dlg", "--threshold-score", "ratio"],
         "error: --threshold-score: 'ratio' is not one of 'loss', 'confidence'"),
    ],
)  # fmt: skip
def test_argument_errors_are_one_line(capsys, tmp_path, monkeypatch, argv, line):
    from fl_lightning.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(argv)
    out, err = capsys.readouterr()
    assert stop.value.code == 2
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith(line), err
    assert not any(tmp_path.iterdir()), "nothing may be written on bad input"


def test_unknown_argparse_messages_pass_through():
    assert argparse_line("something new", "fl-lightning x") == "something new"


def test_repro_dry_run_lists_the_points_without_the_data(capsys, monkeypatch):
    """The reproducing tutorial's next step, ``repro 002 --dry-run``, on a clone without
    shared/data: the points are listed (the stored ones are finished), with one note saying
    what running them would need; without --dry-run the same command is refused in one line."""
    from fl_lightning.cli import main
    from fl_lightning.reports.repro import cli as repro_cli
    from tests.conftest import REPO

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(repro_cli, "find_shared_data", lambda: None)
    assert main(["repro", "002", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("note: shared/data (the MNIST test set) is not beside this checkout")
    assert "points," in out
    assert main(["repro", "002"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --data-root: shared/data (the MNIST test set) not found beside this "
                   "checkout; set FL_SHARED_DATA or pass --data-root DIR"]  # fmt: skip
