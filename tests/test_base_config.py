"""configs/base.yaml is loaded before every --config file, in both ways the CLI is built."""

from __future__ import annotations

import contextlib
import io

import pytest
import yaml

import fl_lightning.configs as configs
from tests.conftest import QUICKSTART, REPO


def _resolved(args: list[str], run: bool) -> dict:
    from fl_lightning.runs.cli_class import build_cli_class

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        build_cli_class()(args, run=run)
    return yaml.safe_load(out.getvalue())


@pytest.mark.parametrize("run", [True, False])
def test_base_values_apply_and_the_experiment_overrides_them(tmp_path, monkeypatch, run):
    base = tmp_path / "base.yaml"
    base.write_text("seed_everything: 7\nprivacy: {delta: 1.0e-6}\ntrainer: {max_steps: 3}\n")
    monkeypatch.setattr(configs, "BASE_CONFIG", base)
    monkeypatch.chdir(REPO)
    args = ["--config", str(QUICKSTART), "--print_config"]
    cfg = _resolved(["fit", *args] if run else args, run)
    assert cfg["seed_everything"] == 7
    assert cfg["privacy"]["delta"] == 1e-6
    assert cfg["trainer"]["max_steps"] == 40  # quickstart.yaml says 40


def test_the_checkout_base_restates_the_built_in_defaults(monkeypatch):
    """Without configs/base.yaml (an installed package) every experiment resolves the same."""
    monkeypatch.chdir(REPO)
    with_base = _resolved(["fit", "--config", str(QUICKSTART), "--print_config"], True)
    monkeypatch.setattr(configs, "BASE_CONFIG", REPO / "configs" / "no-such-base.yaml")
    without = _resolved(["fit", "--config", str(QUICKSTART), "--print_config"], True)
    assert with_base == without
