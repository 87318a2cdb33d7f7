"""Bad input is one line naming the field and where, before any work (exit 2); a run that would
train nothing is refused; an error once training has started keeps its traceback (exit 1)."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import QUICKSTART, REPO, TINY


def _last_err(capsys) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("override", "field"),
    [
        (["--strategy.clip_norm", "0"], "strategy.clip_norm: must be > 0"),
        (["--strategy.clip_norm", "-1"], "strategy.clip_norm: must be > 0"),
        (["--strategy.noise_multiplier", "-1"], "strategy.noise_multiplier: must be >= 0"),
        (
            [
                "--strategy",
                "fl_lightning.strategies.fedavg.FedAvg",
                "--client.dp_sgd.noise_multiplier",
                "1",
                "--client.dp_sgd.max_grad_norm",
                "0",
            ],
            "client.dp_sgd.max_grad_norm: must be > 0",
        ),  # fmt: skip
        (
            [
                "--strategy",
                "fl_lightning.strategies.fedavg.FedAvg",
                "--client.dp_sgd.noise_multiplier",
                "-0.5",
            ],
            "client.dp_sgd.noise_multiplier: must be >= 0",
        ),  # fmt: skip
        (["--strategy.init_args.noise_mult", "1"], "strategy.init_args.noise_mult: not a param"),
        (["--model.clients_per_rnd", "3"], "model.clients_per_rnd: not an option"),
        (["--trainer.max_steps", "0"], "trainer.max_steps: 0 rounds would train nothing"),
        (["--model.server_momentum", "1.0"], "model.server_momentum: must be in [0, 1)"),
        (["--model.server_momentum", "1.5"], "model.server_momentum: must be in [0, 1)"),
    ],
)
def test_dp_and_round_settings_name_the_field(run_cli, capsys, tmp_path, override, field):
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, *override])
    line = _last_err(capsys)
    assert rc == 2
    assert line.startswith(f"error: {field}"), line
    assert "Union" not in line
    assert not list(Path(tmp_path).rglob("*.ckpt")), "nothing may be trained on bad input"


@pytest.mark.parametrize("flag", ["--config", "--client"])
def test_malformed_yaml_names_file_and_line(run_cli, capsys, tmp_path, flag):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  max_steps: 2\nmodel: [a, b\n  c: 1\n")
    args = ["fit", "--config", str(QUICKSTART), *TINY]
    rc = run_cli(args + [flag, str(bad)] if flag != "--config" else ["fit", flag, str(bad)])
    line = _last_err(capsys)
    assert rc == 2
    assert line.startswith(f"error: {flag[2:]}: {bad} line 4, column "), line


def test_download_without_internet_says_what_to_do(run_cli, capsys, tmp_path, monkeypatch):
    def no_network(*_, **__):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--data.dataset", "cifar10",
                  "--data.download", "true", "--data.root", str(tmp_path / "data")])  # fmt: skip
    line = _last_err(capsys)
    assert rc == 2
    assert line.startswith("error: data.download: could not download cifar10"), line
    for hint in ("no internet", str(tmp_path / "data"), "cifar-10-batches-py", "mnist_offline"):
        assert hint in line, hint


@pytest.fixture(scope="module")
def one_round_checkpoint(tmp_path_factory) -> Path:
    from fl_lightning.cli import main

    root = tmp_path_factory.mktemp("first")
    rc = main(["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", "1",
               "--trainer.default_root_dir", str(root)])  # fmt: skip
    assert rc == 0
    return root / "checkpoints" / "last.ckpt"


def test_checkpoint_problems_are_one_line(run_cli, capsys, tmp_path, one_round_checkpoint):
    ckpt = str(one_round_checkpoint)
    base = ["fit", "--config", str(QUICKSTART), *TINY]
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"not a checkpoint\n")
    cases = [
        (["--ckpt_path", str(corrupt)], f"ckpt_path: {corrupt} is not a readable checkpoint"),
        (["--ckpt_path", str(tmp_path / "none.ckpt")], "ckpt_path: "),
        (["--ckpt_path", ckpt, "--client.net.init_args.hidden", "[16]"],
         f"ckpt_path: {ckpt} was saved from another model (global_net"),
        (["--ckpt_path", ckpt, "--trainer.max_steps", "1"],
         f"trainer.max_steps: {ckpt} has already run 1 rounds"),
    ]  # fmt: skip
    for override, start in cases:
        rc = run_cli([*base, *override])
        line = _last_err(capsys)
        assert rc == 2, override
        assert line.startswith(f"error: {start}"), line
    assert not list(Path(tmp_path).rglob("summary.json")), "nothing may run on bad input"


def test_resume_continues_to_max_steps(run_cli, capsys, tmp_path, one_round_checkpoint):
    import json

    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", "2",
                  "--ckpt_path", str(one_round_checkpoint)])  # fmt: skip
    assert rc == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rounds"] == 2


def test_error_during_training_keeps_its_traceback(run_cli, capsys, monkeypatch):
    from fl_lightning.server.module import FederatedModule

    def broken(self, batch, batch_idx):  # noqa: ARG001
        raise ValueError("a bug in round code")

    monkeypatch.setattr(FederatedModule, "training_step", broken)
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", "1"])
    err = capsys.readouterr().err
    assert rc == 1, "a failure during training is not bad input (exit 2)"
    assert "Traceback (most recent call last)" in err and "in broken" in err
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith("error: during training: ValueError: a bug in round code")
    )


def test_bug_before_the_first_round_keeps_its_traceback(run_cli, capsys, monkeypatch):
    from fl_lightning.server.module import FederatedModule

    def broken(self):  # noqa: ARG001
        return {}["missing"]

    monkeypatch.setattr(FederatedModule, "on_fit_start", broken)
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", "1"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "Traceback (most recent call last)" in err and "KeyError" in err


def test_config_error_in_setup_stays_one_line(run_cli, capsys):
    """A refusal raised inside Trainer.fit's setup (here: model and dataset disagree on the
    number of classes) is still bad input: one line, exit 2."""
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--client.num_classes", "7",
                  "--client.net.init_args.num_classes", "7"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: client.num_classes"), err


def test_sweep_spec_errors_are_one_line(tmp_path, capsys, monkeypatch):
    from fl_lightning.sweeps.runner import main

    monkeypatch.chdir(REPO)
    bad = tmp_path / "bad.yaml"
    bad.write_text("method: grid\nparameters:\n  a: {values: [1, 2]}\n"
                   "command: [${env}, fl-lightning, fit, ${args}]\n")  # fmt: skip
    assert main([str(bad), "--store", str(tmp_path / "s")]) == 2
    line = _last_err(capsys)
    assert line.startswith(f"error: {bad} line 4, column ") and "not valid YAML" in line, line

    assert main([str(tmp_path / "missing.yaml")]) == 2
    assert "no such sweep spec" in _last_err(capsys)

    typo = tmp_path / "typo.yaml"
    typo.write_text(
        "method: grid\nparameters:\n"
        "  strategy.init_args.noise_multiplier: {values: [0.5, 1.0]}\n"
        "  strategy.init_args.noise_mult: {value: 1}\n"
        "command:\n  - fl-lightning\n  - fit\n  - --config\n"
        "  - configs/experiment/quickstart.yaml\n  - ${args}\n"
    )
    store = tmp_path / "store"
    assert main([str(typo), "--store", str(store)]) == 2
    line = _last_err(capsys)
    assert line.startswith(
        f"error: {typo}: parameters.strategy.init_args.noise_mult: "
        "strategy.init_args.noise_mult: not a parameter of DPFedAvg"
    ), line
    assert not (store / "results.jsonl").exists(), "no point may run from a bad spec"


def test_docs_sweep_example_is_a_valid_spec(tmp_path, monkeypatch):
    import re

    from fl_lightning.runs import argument_problem
    from fl_lightning.sweeps.spec import build_command, expand, load_spec

    monkeypatch.chdir(REPO)
    text = (REPO / "docs" / "sweeps.md").read_text()
    example = tmp_path / "example.yaml"
    example.write_text(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))
    spec = load_spec(example)
    argv = build_command(spec, expand(spec)[0].params)
    assert argument_problem(argv[argv.index("fit") :]) is None
