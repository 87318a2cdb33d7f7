"""Issue 23, item 6: secrets never land in what a run writes; untrusted checkpoints and sweep
parameters cannot run code."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
import yaml

from fl_lightning.sweeps import runner
from fl_lightning.sweeps.store import ResultStore
from fl_lightning.utils.redact import REDACTED, redact, secret_values
from tests.conftest import QUICKSTART, REPO, TINY
from tests.reliability.runs import fit_args

pytestmark = pytest.mark.fault

SECRETS = {
    "WANDB_API_KEY": "wandb0123456789abcdef0123456789abcdef01234",
    "HF_TOKEN": "hf_TESTtokenABCDEFGHIJKLMNOP",
    "MY_SERVICE_SECRET": "s3cr3t-value-for-tests",
    "AWS_SECRET_ACCESS_KEY": "AKIAtestSECRETaccessKEY",
}


@pytest.fixture
def secrets_in_env(monkeypatch):
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SHORT_KEY", "1")  # a flag, not a secret: left alone
    return SECRETS


def _leaks(folder: Path, extra_text: str = "") -> list[str]:
    found = []
    for path in [p for p in folder.rglob("*") if p.is_file()]:
        data = path.read_bytes()
        found += [f"{name} in {path}" for name, v in SECRETS.items() if v.encode() in data]
    found += [f"{name} in output" for name, v in SECRETS.items() if v in extra_text]
    return found


def test_redact_replaces_secret_values_anywhere_in_a_structure(secrets_in_env):
    assert "1" not in secret_values()
    row = {"cmd": ["x", f"--k={SECRETS['HF_TOKEN']}"], SECRETS["MY_SERVICE_SECRET"]: 1.5}
    assert redact(row) == {"cmd": ["x", f"--k={REDACTED}"], REDACTED: 1.5}


def test_a_run_writes_no_environment_secret(secrets_in_env, tmp_path, capsys):
    """A real run with the CSV and (offline) W&B loggers and a checkpoint: no secret of the
    environment in any file it writes (config.yaml, hparams.yaml, metrics.csv, summary.json,
    the checkpoint, W&B's run files and logs) nor in its output."""
    from fl_lightning.cli import main

    root = tmp_path / "run"
    loggers = [
        {"class_path": "lightning.pytorch.loggers.CSVLogger",
         "init_args": {"save_dir": str(root), "name": "", "version": ""}},
        {"class_path": "lightning.pytorch.loggers.WandbLogger",
         "init_args": {"save_dir": str(root), "project": "leak-test", "offline": True}},
    ]  # fmt: skip
    assert main([*fit_args(root, 2), f"--trainer.logger={json.dumps(loggers)}"]) == 0
    out = capsys.readouterr()
    assert json.loads((root / "summary.json").read_text())["rounds"] == 2
    written = {p.name for p in root.rglob("*") if p.is_file()}
    assert {"config.yaml", "hparams.yaml", "metrics.csv", "summary.json", "last.ckpt"} <= written
    assert any(n.endswith(".wandb") for n in written)
    leaks = _leaks(root, out.out + out.err)
    assert leaks == [], "\n".join(leaks)


def test_the_sweep_store_holds_no_secret(secrets_in_env, fake_program_spec, tmp_path):
    spec = fake_program_spec({"x": {"values": [1]}, "tag": {"value": SECRETS["HF_TOKEN"]}})
    store = tmp_path / "store"
    assert runner.main([str(spec), "--store", str(store)]) == 0
    rows = list(ResultStore(store).rows())
    assert rows and rows[-1]["status"] == "finished"
    assert rows[-1]["params"]["tag"] == REDACTED
    assert SECRETS["HF_TOKEN"].encode() not in (store / "results.jsonl").read_bytes()
    assert not any(v.encode() in (store / "results.jsonl").read_bytes() for v in SECRETS.values())


# -- untrusted checkpoints -------------------------------------------------------------------
class Payload:
    """Unpickling this runs a command (what an untrusted checkpoint could do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _resume_args(tmp_path: Path, ckpt: Path) -> list[str]:
    return ["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", "2",
            "--trainer.default_root_dir", str(tmp_path / "resumed"),
            "--ckpt_path", str(ckpt)]  # fmt: skip


def test_a_checkpoint_with_code_is_refused_and_never_runs(tmp_path, capsys):
    from fl_lightning.cli import main

    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "global_step": 1, "payload": Payload(marker)}, evil)
    assert main(_resume_args(tmp_path, evil)) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(err) == 1
    assert err[0].startswith(f"error: ckpt_path: {evil} holds a posix.system object, which ")
    assert "weights_only=True" in err[0]
    assert not marker.exists()


def test_a_truncated_checkpoint_is_one_clear_error(tmp_path, capsys):
    from fl_lightning.cli import main

    good = tmp_path / "good"
    assert main(fit_args(good, 1)) == 0
    data = (good / "checkpoints" / "last.ckpt").read_bytes()
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(data[: len(data) // 2])
    capsys.readouterr()
    assert main(_resume_args(tmp_path, cut)) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(err) == 1
    assert err[0].startswith(f"error: ckpt_path: {cut} is not a readable checkpoint")


# -- sweep parameters are data, never commands -----------------------------------------------
@pytest.fixture
def fake_program_spec(tmp_path, monkeypatch):
    """A spec around a program that records the argv it received."""
    program = tmp_path / "echo_args.py"
    program.write_text(
        "import json, os, sys\n"
        "run = os.environ['FL_SWEEP_RUN_DIR']\n"
        "json.dump(sys.argv[1:], open(os.path.join(run, 'argv.json'), 'w'))\n"
        "json.dump({'test/accuracy': 1.0}, open(os.path.join(run, 'summary.json'), 'w'))\n"
    )

    def make(parameters: dict, command: list[str] | None = None) -> Path:
        spec = {"name": "argv", "method": "grid", "program": str(program),
                "command": command or ["${env}", "${interpreter}", "${program}", "${args}"],
                "parameters": parameters}  # fmt: skip
        path = tmp_path / "argv.yaml"
        path.write_text(yaml.safe_dump(spec))
        return path

    return make


HOSTILE = [
    "$(touch {m}1)",
    "; touch {m}2",
    "`touch {m}3`",
    "x && touch {m}4",
    "${{program}}",
    "fit",
]


@pytest.mark.parametrize("macro", ["${args}", "${args_no_hyphens}", "${args_json}"])
def test_parameter_values_reach_the_program_as_literal_arguments(
    fake_program_spec, tmp_path, macro
):
    marker = tmp_path / "pwned"
    values = [v.format(m=marker) for v in HOSTILE]
    params = {f"p{i}": {"value": v} for i, v in enumerate(values)}
    spec = fake_program_spec(params, ["${env}", "${interpreter}", "${program}", macro])
    store = tmp_path / "store"
    assert runner.main([str(spec), "--store", str(store)]) == 0
    row = ResultStore(store).finished("argv")[0]
    argv = json.loads((Path(row["run_dir"]) / "argv.json").read_text())
    if macro == "${args_json}":
        assert json.loads(argv[0]) == {f"p{i}": v for i, v in enumerate(values)}
    else:
        dash = "--" if macro == "${args}" else ""
        assert sorted(argv) == sorted(f"{dash}p{i}={v}" for i, v in enumerate(values))
    assert row["command"][:2] == [sys.executable, str(tmp_path / "echo_args.py")]
    assert not any("--trainer.logger" in t for t in row["command"])  # not taken for a fit
    assert not list(tmp_path.glob("pwned*")) and not list(REPO.glob("pwned*"))
