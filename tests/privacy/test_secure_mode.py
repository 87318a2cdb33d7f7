"""``privacy.secure_mode``: the generators' seed comes from the OS's entropy, is written to no
file but the checkpoint, a resumed run continues from the checkpoint's secret exactly, and the
guarantee drops the simulation caveat; ``privacy_statement.md`` says which mode ran."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fl_lightning.privacy.guarantee.statement import SIMULATION_CLAUSE
from tests.conftest import QUICKSTART, TINY

SECRET = 6_917_529_027_641_081_857  # what the patched OS draw returns (distinctive digits)
OTHER = 1_152_921_504_606_846_977


def _fit(root: Path, rounds: int, *extra: str) -> Path:
    from fl_lightning.cli import main

    args = ["fit", "--config", str(QUICKSTART), *TINY[:-4], "--model.eval_every", "0",
            "--trainer.enable_progress_bar", "false", "--trainer.max_steps", str(rounds),
            "--trainer.default_root_dir", str(root), *extra]  # fmt: skip
    assert main(args) == 0
    (summary,) = root.rglob("summary.json")
    return summary.parent


def _draws(monkeypatch: pytest.MonkeyPatch, *values: int) -> None:
    it = iter(values)
    monkeypatch.setattr("fl_lightning.server.secure_seed.draw_secret_seed", lambda: next(it))


def _global_net(run_dir: Path) -> dict[str, torch.Tensor]:
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    return {k: v for k, v in ckpt["state_dict"].items() if k.startswith("global_net.")}


def test_secure_run_writes_its_seed_nowhere_but_the_checkpoint(tmp_path, monkeypatch, capsys):
    _draws(monkeypatch, SECRET)
    run = _fit(tmp_path / "secure", 2, "--privacy.secure_mode", "true")
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["secure_seed"] == SECRET
    written = [p for p in (tmp_path / "secure").rglob("*") if p.is_file() and p.suffix != ".ckpt"]
    assert {"config.yaml", "metrics.csv", "summary.json", "privacy_ledger.json",
            "privacy_statement.md"} <= {p.name for p in written}  # fmt: skip
    assert any("wandb" in p.parts for p in written)  # W&B's offline run (config, logs) too
    for needle in (str(SECRET), hex(SECRET)[2:]):
        leaks = [p for p in written if needle.encode() in p.read_bytes()]
        assert not leaks, f"the secret seed is written in {leaks}"
    line = capsys.readouterr().out
    assert str(SECRET) not in line
    assert "secure mode" in (run / "privacy_statement.md").read_text().lower()


def test_secure_run_resumes_exactly_from_its_checkpoints_secret(tmp_path, monkeypatch):
    _draws(monkeypatch, SECRET, SECRET, OTHER)
    whole = _fit(tmp_path / "whole", 3, "--privacy.secure_mode", "true")
    first = _fit(tmp_path / "first", 2, "--privacy.secure_mode", "true")
    ckpt = str(first / "checkpoints" / "last.ckpt")
    resumed = _fit(tmp_path / "resumed", 3, "--privacy.secure_mode", "true", "--ckpt_path", ckpt)
    a, b = _global_net(whole), _global_net(resumed)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)  # the checkpoint's secret, not OTHER


def test_secure_and_simulation_noise_and_sentences_differ(tmp_path, monkeypatch):
    import json

    _draws(monkeypatch, SECRET)
    secure = _fit(tmp_path / "secure", 2, "--privacy.secure_mode", "true")
    simulation = _fit(tmp_path / "simulation", 2)
    s = json.loads((secure / "summary.json").read_text())["privacy/guarantee"]
    m = json.loads((simulation / "summary.json").read_text())["privacy/guarantee"]
    assert m == f"{s}; {SIMULATION_CLAUSE}"
    a, b = _global_net(secure), _global_net(simulation)
    assert any(not torch.equal(a[k], b[k]) for k in a)  # other noise, other cohorts
    text = (simulation / "privacy_statement.md").read_text()
    assert SIMULATION_CLAUSE in text and "secure_mode: true" in text
