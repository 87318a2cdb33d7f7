"""The federated-dataset configs (configs/experiment/federated/, issue 61): each refuses in one
line naming data.root and where its files come from when they are missing, before any work, and
passes pre-flight (every check before the Trainer starts) on small files in the real format.
Their two-round runs are in test_experiments.py."""

from __future__ import annotations

import pytest

from fl_lightning.testing.federated_files import WRITERS
from tests.conftest import REPO

CONFIGS = {
    "femnist_cnn": ("tff_emnist", "fed_emnist.tar.bz2"),
    "stackoverflow_lstm": ("tff_stackoverflow", "stackoverflow.tar.bz2"),
    "shakespeare_tff_lstm": ("tff_shakespeare", "shakespeare.tar.bz2"),
}


def _config(name: str) -> str:
    return str(REPO / "configs" / "experiment" / "federated" / f"{name}.yaml")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_refuses_without_files(name, run_cli, capsys, tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    rc = run_cli(["fit", "--config", _config(name), "--data.root", str(root)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("error: data.root: ") and CONFIGS[name][1] in err[0]
    assert list(root.iterdir()) == [] and not (tmp_path / "lightning_logs").exists()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_passes_preflight_on_files_in_the_real_format(name, tmp_path, monkeypatch):
    """Every check of ``before_fit`` (model × data, sampler, accountant, mechanism, σ) runs;
    the Trainer's fit itself is replaced by a probe (the two-round run: test_experiments)."""
    import lightning.pytorch as pl

    from fl_lightning.runs.cli_class import build_cli_class

    monkeypatch.chdir(REPO)
    reached = []
    monkeypatch.setattr(
        pl.Trainer, "fit", lambda self, model, datamodule=None, **_: reached.append(datamodule)
    )
    root = WRITERS[CONFIGS[name][0]](tmp_path / "data")
    build_cli_class()(
        ["fit", "--config", _config(name), "--data.root", str(root),
         "--trainer.default_root_dir", str(tmp_path / "runs"), "--trainer.logger", "false",
         "--model.clients_per_round", "2"],
    )  # fmt: skip
    (data,) = reached
    assert data.num_clients == len(data.clients) >= 4
    x, y = data.client_data(0)
    assert len(x) == len(y) == data.client_sizes()[0]
