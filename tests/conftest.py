"""Shared fixtures: run the real CLI in-process on tiny offline settings."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from fl_lightning.utils.shared import find_shared

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# No end-of-fit PNGs (a third of a tiny run's CPU): the tests that read them, and every
# experiment config's run (tests/configs/test_experiments.py), switch them back on.
os.environ.setdefault("FL_LIGHTNING_PLOTS", "0")
# Subprocesses (a CLI run, a repro point) share the 2 cores with the other test worker: one
# intra-op thread each, as this process (below).
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The federated sources' client indexes (fl_lightning/data/federated/index.py) of the files the
# tests write go to a temporary folder, not the user's ~/.cache.
os.environ.setdefault("FL_LIGHTNING_CACHE", tempfile.mkdtemp(prefix="fl-lightning-index-"))


@pytest.fixture(scope="session", autouse=True)
def _one_intra_op_thread() -> None:
    """One intra-op thread: small models gain nothing from more, and a busy 2-core machine loses
    a lot to oversubscribed OpenMP threads (Opacus steps measured 8x slower). A fixture, not an
    import-time call: pytest-xdist's controller loads this file too, runs no test, and would
    spend seconds importing torch before it starts the workers."""
    import torch

    torch.set_num_threads(1)


REPO = Path(__file__).resolve().parents[1]
MNIST_TEST_IMAGES = Path("MNIST", "raw", "t10k-images-idx3-ubyte.gz")


# One lookup with the package (fl_lightning/utils/shared.py): $<env> when set, else the nearest
# shared/<name> inside the checkout, beside it or beside one of its parents.
SHARED_DATA = find_shared("data", MNIST_TEST_IMAGES, "FL_SHARED_DATA")
SHARED_PAPERS = find_shared("papers", Path("000-dp-fedasgp.notes.md"), "FL_SHARED_PAPERS")
QUICKSTART = REPO / "configs" / "experiment" / "quickstart.yaml"

# Tiny, fast settings of the quickstart shape: digits, MLP, 10 clients, 3 per round.
TINY = [
    "--data", str(REPO / "configs" / "data" / "digits.yaml"),
    "--client", str(REPO / "configs" / "client" / "digits_mlp.yaml"),
    "--model.clients_per_round", "3",
    "--data.num_clients", "10",
    "--model.eval_every", "0",
    "--trainer.logger", "false",
    "--trainer.enable_progress_bar", "false",
]  # fmt: skip


@pytest.fixture
def run_cli(tmp_path, monkeypatch):
    """Runs ``fl-lightning <args>`` in-process in a temporary directory; returns (rc, output)."""
    from fl_lightning.cli import main

    monkeypatch.chdir(REPO)

    def run(args: list[str], capsys=None) -> int:
        return (
            main([*args, "--trainer.default_root_dir", str(tmp_path)])
            if args[0] in ("fit", "validate", "test")
            else main(args)
        )

    return run


def offline_mnist_args() -> list[str]:
    """``--data.root`` for the real MNIST test set (``mnist_offline``); skips the calling test,
    saying why, where the data is not beside this checkout."""
    if SHARED_DATA is None:
        pytest.skip(
            "the real MNIST test set (shared/data/MNIST/raw) is not inside or beside this "
            "checkout; set FL_SHARED_DATA to its folder"
        )
    return ["--data.root", str(SHARED_DATA)]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/*.json from this checkout's runs (tests/golden/README.md)",
    )
