"""Secure-mode DP-FTRL and the canary audit, end to end (issue 46): the matrix mechanism's
streaming noise and the canaries' coins are keyed by the run's secret, never by the seed in
``config.yaml``, and the secret is written in no file but the checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fl_lightning.testing.secrecy import keyed_by_other, recorded_generator_keys
from tests.conftest import REPO, TINY

FTRL = REPO / "configs" / "experiment" / "quickstart_ftrl.yaml"
SECRET = 6_917_529_027_641_081_857
CONFIGURED = 0  # quickstart_ftrl's seed_everything


def _ftrl_args(root: Path, *extra: str) -> list[str]:
    return ["--config", str(FTRL), *TINY, "--trainer.max_steps", "3",
            "--model.clients_per_round", "5", "--trainer.default_root_dir", str(root),
            "--seed_everything", str(CONFIGURED), *extra]  # fmt: skip


def _draw(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fl_lightning.server.secure_seed.draw_secret_seed", lambda: SECRET)


def test_secure_dp_ftrl_noise_is_keyed_by_the_secret_and_written_nowhere(tmp_path, monkeypatch):
    from fl_lightning.cli import main

    _draw(monkeypatch)
    with recorded_generator_keys() as keys:
        assert main(["fit", *_ftrl_args(tmp_path / "secure"), "--privacy.secure_mode", "true"]) == 0
    noise = [k for k in keys if k[-1] == "matrix_mechanism"]
    assert noise and all(k[0] == SECRET for k in noise)
    assert keyed_by_other(keys, SECRET) == []
    with recorded_generator_keys() as plain:
        assert main(["fit", *_ftrl_args(tmp_path / "simulation")]) == 0
    plain_noise = [k for k in plain if k[-1] == "matrix_mechanism"]
    assert plain_noise and all(k[0] == CONFIGURED for k in plain_noise)
    assert {k[1:] for k in noise} == {k[1:] for k in plain_noise}  # same draws, other key
    written = [p for p in (tmp_path / "secure").rglob("*") if p.is_file()]
    ckpts = [p for p in written if p.suffix == ".ckpt"]
    assert ckpts and all(torch.load(p, weights_only=False)["secure_seed"] == SECRET for p in ckpts)
    for needle in (str(SECRET), hex(SECRET)[2:]):
        leaks = [p for p in written if p.suffix != ".ckpt" and needle.encode() in p.read_bytes()]
        assert not leaks, f"the secret seed is written in {leaks}"


def test_secure_canary_audit_draws_its_coins_from_the_secret(tmp_path, monkeypatch, capsys):
    from fl_lightning.attacks.cli import main as audit_main

    _draw(monkeypatch)
    args = [*_ftrl_args(tmp_path), "--attack", "canaries", "--num-canaries", "8",
            "--out", str(tmp_path / "audit"), "--privacy.secure_mode=true"]  # fmt: skip
    with recorded_generator_keys() as keys:
        assert audit_main(args) == 0, capsys.readouterr()
    canary = [k for k in keys if str(k[-1]).startswith("canary")]
    assert {k[-1] for k in canary} >= {"canary_coins", "canary_frame"}
    assert all(k[0] == SECRET for k in canary)
    assert keyed_by_other(keys, SECRET) == []
