"""Where a run writes, and what it must never overwrite; W&B's mode and an agent-launched run.

W&B is mocked here (``wandb.init`` returns a recorder): the tests see what the CLI asks of
W&B, with no network, no wandb-core process and no dependence on this machine's credentials.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import QUICKSTART, REPO, TINY

CSV_V0 = [
    "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
    "--trainer.logger.version", "v0",
]  # fmt: skip


class FakeRun:
    """What ``WandbLogger`` uses of a ``wandb`` Run."""

    def __init__(self, **kwargs: Any) -> None:
        import os

        self.init_kwargs = kwargs
        self.env_mode = os.environ.get("WANDB_MODE")
        self.id = kwargs.get("id") or "fake"
        self.name = kwargs.get("name") or "fake"
        self.project = kwargs.get("project")
        self.summary: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []

        class Config(dict):
            def update(self, d: dict, allow_val_change: bool = False) -> None:  # noqa: ARG002
                super().update(d)

        self.config = Config()

    def log(self, row: dict[str, Any], **_: Any) -> None:
        self.history.append(dict(row))

    def define_metric(self, *_: Any, **__: Any) -> None:
        pass


@pytest.fixture
def fake_wandb(monkeypatch, tmp_path):
    """``wandb.init`` recorded; no credentials and no W&B settings visible to the run."""
    import wandb

    runs: list[FakeRun] = []

    def init(**kwargs: Any) -> FakeRun:
        runs.append(FakeRun(**kwargs))
        return runs[-1]

    monkeypatch.setattr(wandb, "init", init)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_DIR",
                "NETRC", "WANDB_DISABLED", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_SWEEP_ID",
                "WANDB_SWEEP_PARAM_PATH", "WANDB_RUN_ID"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    return runs


# -- item 1: a refused run deletes nothing ----------------------------------------------------
def test_refused_run_keeps_the_earlier_runs_files(run_cli, capsys, tmp_path):
    logs = tmp_path / "logs"
    args = ["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", "1", *CSV_V0,
            "--trainer.logger.save_dir", str(logs)]  # fmt: skip
    assert run_cli(args) == 0
    run_dir = logs / "lightning_logs" / "v0"
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    assert {"metrics.csv", "summary.json", "config.yaml"} <= set(before)
    ckpt = (run_dir / "checkpoints" / "last.ckpt").read_bytes()
    capsys.readouterr()

    assert run_cli(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: trainer.") and str(run_dir) in err[-1], err
    assert "already holds a run" in err[-1]
    after = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    assert after == before, "a refused run must not delete or change the earlier run's files"
    assert (run_dir / "checkpoints" / "last.ckpt").read_bytes() == ckpt


def test_output_path_that_is_a_file_is_one_line(capsys, tmp_path, monkeypatch):
    from fl_lightning.cli import main

    monkeypatch.chdir(REPO)
    blocker = tmp_path / "a_file"
    blocker.write_text("mine\n")
    rc = main(["fit", "--config", str(QUICKSTART), *TINY,
               "--trainer.default_root_dir", str(blocker / "runs")])  # fmt: skip
    assert rc == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: trainer.default_root_dir: ") and str(blocker) in line
    assert blocker.read_text() == "mine\n"


# -- item 3: every output under trainer.default_root_dir --------------------------------------
def test_default_root_dir_holds_every_output(fake_wandb, tmp_path, monkeypatch):
    from fl_lightning.cli import main

    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    root = tmp_path / "out"
    rc = main(["fit", "--config", str(QUICKSTART), *TINY, "--trainer.logger", "true",
               "--trainer.max_steps", "2", "--trainer.default_root_dir", str(root)])  # fmt: skip
    assert rc == 0
    run_dir = root / "fl" / "version_0"
    for name in ("metrics.csv", "summary.json", "config.yaml", "checkpoints/last.ckpt"):
        assert (run_dir / name).is_file(), name
    assert [r.init_kwargs["dir"] for r in fake_wandb] == [str(root)]
    assert (root / "wandb").parent == root
    assert not list(cwd.iterdir()), "nothing may be written outside default_root_dir"


# -- item 2: W&B's mode follows the environment ----------------------------------------------
def test_wandb_mode_follows_the_environment(fake_wandb, tmp_path, monkeypatch):
    from fl_lightning.loggers import WandbLogger, has_wandb_credentials, wandb_mode

    monkeypatch.chdir(tmp_path)  # no ./wandb/settings
    assert not has_wandb_credentials()
    assert wandb_mode() == "offline"  # nothing configured: offline, no prompt
    logger = WandbLogger()
    assert logger._wandb_init["mode"] == "offline" and logger.mode == "offline"
    assert "anonymous" not in logger._wandb_init  # W&B warns about anonymous=None
    assert logger._wandb_init["project"] == "fl-lightning"

    monkeypatch.setenv("WANDB_MODE", "online")
    assert wandb_mode() is None
    logger = WandbLogger()
    assert "mode" not in logger._wandb_init and logger.mode == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert WandbLogger().mode == "disabled"
    monkeypatch.delenv("WANDB_MODE")

    # Credentials (as `wandb login` writes them) and no mode: W&B's default, online.
    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    assert has_wandb_credentials() and wandb_mode() is None
    assert WandbLogger().mode == "online"
    monkeypatch.delenv("NETRC")
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert WandbLogger().mode == "online"
    monkeypatch.delenv("WANDB_API_KEY")

    # `wandb offline` in this directory
    (tmp_path / "wandb").mkdir()
    (tmp_path / "wandb" / "settings").write_text("[default]\nmode = offline\n")
    assert wandb_mode() is None and WandbLogger().mode == "offline"

    monkeypatch.setenv("WANDB_PROJECT", "proj")
    monkeypatch.setenv("WANDB_ENTITY", "team")
    logger = WandbLogger()
    assert logger._wandb_init["project"] == "proj" and logger._wandb_init["entity"] == "team"
    assert WandbLogger(offline=True)._wandb_init["mode"] == "offline"


def test_agent_launched_run_reads_its_point_and_reports_the_sweep_metric(
    fake_wandb, tmp_path, monkeypatch
):
    """As ``wandb agent`` starts a point: WANDB_SWEEP_ID / WANDB_RUN_ID / the parameter file set,
    online mode asked for, and a command without ``${args}``."""
    from fl_lightning.cli import main
    from fl_lightning.sweeps.spec import load_spec

    spec = load_spec(REPO / "sweeps" / "quickstart_eps.yaml")
    params = tmp_path / "config-run1.yaml"
    params.write_text(
        "wandb_version: 1\n"
        "model.clients_per_round: {value: 2}\n"
        "strategy.init_args.noise_multiplier: {value: 2.0}\n"
        "trainer.max_steps: {value: 2}\n"
    )
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_SWEEP_ID", "sweep1")
    monkeypatch.setenv("WANDB_RUN_ID", "run1")
    monkeypatch.setenv("WANDB_SWEEP_PARAM_PATH", str(params))
    monkeypatch.chdir(REPO)
    tiny = [a for a in TINY if a != "3"]  # the agent's clients_per_round, not TINY's
    tiny.remove("--model.clients_per_round")
    rc = main(["fit", "--config", str(QUICKSTART), *tiny, "--trainer.logger", "true",
               "--trainer.default_root_dir", str(tmp_path / "out")])  # fmt: skip
    assert rc == 0
    (run,) = fake_wandb
    assert "mode" not in run.init_kwargs and run.env_mode == "online"
    assert run.config["model.clients_per_round"] == 2
    assert run.config["strategy.init_args.noise_multiplier"] == 2.0
    metric = spec.metric["name"]
    assert 0.0 <= run.summary[metric] <= 1.0
    assert run.summary["rounds"] == 2
    assert any("privacy/epsilon" in row for row in run.history)


def test_agent_parameters_do_not_override_the_command_line(tmp_path, monkeypatch):
    from fl_lightning.cli import sweep_agent_args

    params = tmp_path / "p.yaml"
    params.write_text("a.b: {value: 1}\nc: {value: [1, 2]}\n_wandb: {value: {}}\n")
    args = ["fit", "--a.b=5"]
    assert sweep_agent_args(args) == args  # not launched by an agent
    monkeypatch.setenv("WANDB_SWEEP_PARAM_PATH", str(params))
    monkeypatch.setenv("WANDB_SWEEP_ID", "s")
    assert sweep_agent_args(args) == ["fit", "--a.b=5", "--c=[1, 2]"]


def test_summary_json_follows_the_run(run_cli, tmp_path):
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", "1"])
    assert rc == 0
    summary = json.loads((Path(tmp_path) / "summary.json").read_text())
    assert summary["rounds"] == 1


def test_every_ddp_rank_follows_rank_zeros_look_at_the_run_directory(tmp_path):
    """Under DDP rank 0 writes config.yaml right after it has looked for an earlier run; a rank
    that looked for itself a moment later found that file and refused alone (exit 2, silent),
    leaving rank 0 waiting for it: an intermittent failure of 2-process runs. Every rank now
    acts on what rank 0 saw, broadcast to all."""
    from types import SimpleNamespace

    from lightning.pytorch.cli import SaveConfigCallback

    from fl_lightning.runs.cli_class import build_cli_class

    cli = build_cli_class()(["--config", str(QUICKSTART), *TINY], run=False)
    callback = next(c for c in cli.trainer.callbacks if isinstance(c, SaveConfigCallback))
    (tmp_path / "config.yaml").write_text("written by rank 0 after its look\n")

    def rank_one(rank_zero_saw: str | None) -> SimpleNamespace:
        told = iter([rank_zero_saw, False])  # the look, then whether rank 0 saved
        strategy = SimpleNamespace(broadcast=lambda obj: next(told))
        return SimpleNamespace(log_dir=str(tmp_path), is_global_zero=False, strategy=strategy)

    callback.setup(rank_one(None), None, "fit")  # rank 0 found no run: rank 1 goes on
    callback.already_saved = False
    target = str(tmp_path / "config.yaml")
    with pytest.raises(ValueError, match="already holds a run"):
        callback.setup(rank_one(target), None, "fit")  # rank 0 found one: all refuse
