"""What a user sees: a tiny ``fl-lightning fit`` in a fresh process, with the default loggers
(CSV + W&B, offline for lack of credentials) and the progress bar, prints one bar in rounds
with loss and ε, the final summary and the run directory, and nothing else."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import QUICKSTART, REPO, TINY

EXPECTED = [
    re.compile(r"^Round\b"),  # the bar (tqdm redraws it with \r)
    re.compile(r"^Finished \d+ rounds: test accuracy [0-9.]+, ε = [0-9.]+ "),
    re.compile(r"^Run directory: "),
    # A warning the user needs: TINY's 3 clients a round drown its σ = 1.5 (server/noise_signal.py)
    re.compile(r"^WARNING: noise-to-signal [0-9.,]+ over \d+ rounds \("),
]


@pytest.mark.parametrize("imports", [[], ["--import", "json"]], ids=["plain", "with_import"])
def test_fit_prints_only_the_round_bar_and_the_summary(tmp_path, imports):
    """With ``--import`` too: the CLI then hands LightningCLI its arguments, which Lightning
    warns about (twice, with both lists) unless the command says it means it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    home = tmp_path / "home"
    home.mkdir()
    env.update(HOME=str(home), PYTHONPATH=str(REPO))
    env.pop("PYTHONWARNINGS", None)  # what a user gets: Python's default warning filters
    env.pop("NETRC", None)
    quiet = {"--trainer.logger", "false", "--trainer.enable_progress_bar"}
    args = [a for a in TINY if a not in quiet]
    root = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fl_lightning.cli",
            *imports,
            "fit",
            "--config",
            str(QUICKSTART),
            *args,
            "--trainer.max_steps",
            "2",
            "--trainer.default_root_dir",
            str(root),
        ],  # fmt: skip
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln.strip() for ln in re.split(r"[\r\n]", proc.stdout + proc.stderr) if ln.strip()]
    unexpected = [ln for ln in lines if not any(p.search(ln) for p in EXPECTED)]
    assert not unexpected, "unexpected console output:\n" + "\n".join(unexpected)
    bar = [ln for ln in lines if ln.startswith("Round")]
    assert any("2/2" in ln and "loss=" in ln and "ε=" in ln for ln in bar), bar
    assert any(ln.startswith("Finished 2 rounds") for ln in lines)
    assert sum(ln.startswith("WARNING: noise-to-signal") for ln in lines) == 1  # one line
    # W&B ran (offline: no credentials in this HOME) and wrote under default_root_dir.
    assert list((root / "wandb").glob("offline-run-*"))


def test_install_metadata_uses_the_current_license_form():
    """setuptools >= 77 warns on every install about ``license = {text = ...}``; the SPDX
    string form is the current one (PEP 639)."""
    import tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert isinstance(meta["project"]["license"], str)
    assert "setuptools>=77" in meta["build-system"]["requires"]
