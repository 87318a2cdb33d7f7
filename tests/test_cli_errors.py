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
        (["--strategy.clip_norm", "nan"], "strategy.clip_norm: nan is not a finite number"),
        (
            ["--strategy.noise_multiplier", "inf"],
            "strategy.noise_multiplier: inf is not a finite number",
        ),
        (["--client.lr", "nan"], "client.lr: nan is not a finite number"),
        (["--trainer.max_steps", "-3"], "trainer.max_steps: -3 is not a number of rounds"),
        (
            ["--trainer.max_steps", "-1"],
            "trainer.max_steps: -1 (no last round) on a run that spends privacy (DPFedAvg)",
        ),
    ],
)
def test_dp_and_round_settings_name_the_field(run_cli, capsys, tmp_path, override, field):
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, *override])
    line = _last_err(capsys)
    assert rc == 2
    assert line.startswith(f"error: {field}"), line
    assert "Union" not in line
    assert not list(Path(tmp_path).rglob("*.ckpt")), "nothing may be trained on bad input"


DDG = REPO / "configs" / "experiment" / "distributed_dp" / "ddg.yaml"


@pytest.mark.parametrize(
    ("override", "field"),
    [
        (["--strategy.init_args.bits", "1"], "strategy.bits: an integer in [2, 40]"),
        (["--strategy.init_args.mechanism", "gauss"], "strategy.mechanism: unknown 'gauss'"),
        (["--strategy.init_args.dropout_rate", "1.5"], "strategy.dropout_rate: must be in"),
        (["--strategy.init_args.beta", "1"], "strategy.beta: must be in [0, 1)"),
        (["--strategy.init_args.noise_multiplier", "0"], "strategy.noise_multiplier: must be"),
        (
            [
                "--strategy.init_args.bits",
                "6",
                "--strategy.init_args.noise_multiplier",
                "null",
                "--privacy.target_epsilon",
                "8",
            ],
            "privacy.target_epsilon: 8.0 is unreachable with strategy.bits 6: more noise shrinks",
        ),  # fmt: skip
    ],
)
def test_distributed_dp_settings_name_the_field(run_cli, capsys, tmp_path, override, field):
    rc = run_cli(["fit", "--config", str(DDG), *TINY, *override])
    line = _last_err(capsys)
    assert rc == 2 and line.startswith(f"error: {field}"), line
    assert not any(p.is_file() for p in Path(tmp_path).rglob("*")), "nothing may be written"


@pytest.mark.parametrize("flag", ["--config", "--client"])
def test_malformed_yaml_names_file_and_line(run_cli, capsys, tmp_path, flag):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer:\n  max_steps: 2\nmodel: [a, b\n  c: 1\n")
    args = ["fit", "--config", str(QUICKSTART), *TINY]
    rc = run_cli(args + [flag, str(bad)] if flag != "--config" else ["fit", flag, str(bad)])
    line = _last_err(capsys)
    assert rc == 2
    assert line.startswith(f"error: {flag[2:]}: {bad} line 4, column "), line


@pytest.mark.parametrize("flag", ["--config", "--client"])
def test_yaml_whose_top_level_is_not_a_mapping_names_file(run_cli, capsys, tmp_path, flag):
    listed = tmp_path / "listed.yaml"
    listed.write_text("- trainer\n- max_steps: 2\n")
    args = ["fit", "--config", str(QUICKSTART), *TINY]
    rc = run_cli(args + [flag, str(listed)] if flag != "--config" else ["fit", flag, str(listed)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {flag[2:]}: {listed} holds a list at its top level"), err


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
    corrupt.write_bytes(Path(ckpt).read_bytes()[:300])  # truncated
    text = tmp_path / "experiment.yaml"
    text.write_text("trainer:\n  max_steps: 2\n")
    cases = [
        (["--ckpt_path", str(corrupt)], f"ckpt_path: {corrupt} is not a readable checkpoint"),
        (["--ckpt_path", str(text)],
         f"ckpt_path: {text} is a text file (it begins 'trainer:'), not a checkpoint; give a"),
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


def test_config_error_in_setup_stays_one_line(run_cli, capsys, monkeypatch):
    """A refusal raised inside Trainer.fit's setup (here: the trainer's precision, checked in
    FederatedModule.setup) is still bad input: one line, exit 2."""
    import fl_lightning.server.module as server_module

    def refuse(precision: str) -> None:
        raise ValueError(f"trainer.precision: {precision} refused here")

    monkeypatch.setattr(server_module, "refuse_trainer_precision", refuse)
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: trainer.precision"), err


# -- first contact (issue 39): model against data, the data root, δ against the population --


def _nothing_written(root: Path) -> None:
    written = [p for p in Path(root).rglob("*") if p.is_file()]
    assert not written, f"bad input wrote {written[:3]}"


@pytest.mark.parametrize(
    ("override", "parts"),
    [
        (  # the case: a 28×28 network on 8×8 digits
            ["--client", str(REPO / "configs" / "client" / "mnist_cnn_small.yaml")],
            [
                "error: client.net: MnistCNN expects 1×28×28 inputs (its classifier.1 takes 784 "
                "features, 1×8×8 inputs give it 64), data.dataset digits gives 1×8×8; use a "
                "network for 8×8 inputs (client: configs/client/digits_logreg.yaml) or a dataset "
                "of 28×28 inputs"
            ],
        ),
        (  # 3 channels where the network takes 1
            [
                "--client",
                str(REPO / "configs" / "client" / "mnist_cnn_small.yaml"),
                "--data.dataset",
                "synthetic",
                "--data.dataset_options",
                "{shape: [3, 32, 32]}",
            ],
            [
                "error: client.net: MnistCNN expects 1×28×28 inputs",
                "takes 1 channel, not 3",
                "data.dataset synthetic gives 3×32×32",
                "client: configs/client/gcfl_cifar_cnn.yaml",
            ],
        ),
        (  # a 10-class head on 62 classes (EMNIST byclass's count)
            [
                "--client",
                str(REPO / "configs" / "client" / "mnist_cnn_small.yaml"),
                "--data.dataset",
                "synthetic",
                "--data.dataset_options",
                "{shape: [1, 28, 28], num_classes: 62}",
            ],
            [
                "error: client.net: MnistCNN gives 10 outputs (classes), data.dataset synthetic "
                "has 62 classes",
                "client: configs/client/emnist_cnn.yaml",
            ],
        ),
        (  # the metrics' class count disagrees with the data (the network agrees)
            ["--client.num_classes", "7"],
            ["error: client.num_classes: 7, but data.dataset digits has 10 classes"],
        ),
    ],  # fmt: skip
)
def test_network_and_data_mismatch_is_one_line_before_anything_is_written(
    run_cli, capsys, tmp_path, override, parts
):
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--trainer.logger", "true",
                  *override])  # fmt: skip
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert rc == 2 and "Traceback" not in err, err[-2000:]
    for part in parts:
        assert part in line, line
    assert line.startswith(parts[0])
    _nothing_written(tmp_path)


def test_switched_to_offline_mnist_names_the_network_and_what_fits(run_cli, capsys, tmp_path):
    """The issue's first edit: the quickstart with ``--data.dataset mnist_offline``."""
    from tests.conftest import offline_mnist_args

    rc = run_cli(["fit", "--config", str(QUICKSTART), "--data.dataset", "mnist_offline",
                  *offline_mnist_args()])  # fmt: skip
    line = _last_err(capsys)
    assert rc == 2
    assert line.startswith(
        "error: client.net: LogisticRegression expects 64 input features (1×8×8 flattened), "
        "data.dataset mnist_offline gives 1×28×28 (784 features); use a network for 28×28 "
        "inputs (client: configs/client/"
    ), line
    _nothing_written(tmp_path)


def test_explicit_data_root_beats_fl_shared_data(run_cli, capsys, tmp_path, monkeypatch):
    """With ``FL_SHARED_DATA`` pointing at the real files, ``--data.root`` elsewhere is used
    (and refused, the files not being there), not silently replaced by the variable's folder."""
    from tests.conftest import offline_mnist_args

    monkeypatch.setenv("FL_SHARED_DATA", offline_mnist_args()[1])
    elsewhere = tmp_path / "elsewhere"
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--data.dataset", "mnist_offline",
                  "--client", str(REPO / "configs" / "client" / "spm_fl_mlp.yaml"),
                  "--data.root", str(elsewhere)])  # fmt: skip
    line = _last_err(capsys)
    assert rc == 2
    assert line.startswith("error: data.root: t10k-images-idx3-ubyte[.gz] and "), line
    assert repr(str(elsewhere)) in line and "FL_SHARED_DATA is not consulted" in line, line


_DP_SGD = ["--strategy", "fl_lightning.strategies.fedavg.FedAvg",
           "--client.dp_sgd.noise_multiplier", "1",
           "--client.dp_sgd.max_grad_norm", "1"]  # fmt: skip
_LOCAL_DP = ["--strategy", "fl_lightning.strategies.ldp_fedavg.LDPFedAvg",
             "--strategy.init_args.epsilon", "1.0"]  # fmt: skip


@pytest.mark.parametrize(
    ("override", "start"),
    [
        (
            ["--privacy.delta", "0.1"],
            "error: privacy.delta: 0.1 ≥ 1/N = 1/10 (10 clients): a client-level guarantee at "
            "this δ allows publishing a whole client's data; choose δ < 0.1",
        ),
        (
            [*_LOCAL_DP, "--privacy.delta", "0.25"],
            "error: privacy.delta: 0.25 ≥ 1/N = 1/10 (10 clients): a local guarantee",
        ),
        ([*_DP_SGD, "--privacy.delta", "0.05"], "error: privacy.delta: 0.05 ≥ 1/n = 1/"),
    ],  # fmt: skip
)
def test_delta_at_least_one_over_the_population_is_refused(
    run_cli, capsys, tmp_path, override, start
):
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--trainer.logger", "true",
                  *override])  # fmt: skip
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert rc == 2 and "Traceback" not in err, err[-2000:]
    assert line.startswith(start), line
    assert "privacy.allow_large_delta: true" in line
    if "1/n" in start:
        assert "the smallest, holds" in line and "a whole record of a client" in line
    _nothing_written(tmp_path)


_FTRL = [str(REPO / "configs" / "experiment" / "quickstart_ftrl.yaml")]
_AGN = [
    "--config", str(REPO / "configs" / "experiment" / "dpfl_agn" / "s52_mnist_anr.yaml"),
    "--data.dataset", "synthetic", "--data.download", "false",
    "--data.dataset_options", '{"shape": [1, 28, 28], "num_examples": 600}',
    "--data.partitioner", "iid", "--model.clients_per_round", "3",
    "--trainer.enable_progress_bar", "false",
]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "start"),
    [
        (
            ["--config", *_FTRL, "--model.sampling", "fixed"],
            "error: model.sampling: DPFTRL needs each client's rounds at least b apart, which "
            "'fixed' cohorts cannot guarantee",
        ),
        (
            ["--config", *_FTRL, "--model.sampling", "poisson"],
            "error: model.sampling: DPFTRL needs each client's rounds at least b apart, which "
            "'poisson' cohorts cannot guarantee",
        ),
        (
            [*_AGN, "--privacy.accountant", "pld"],
            "error: privacy.accountant: 'pld' composes noise fixed in advance, but DPFL-AGN's "
            "ANR chooses σ_t from the released models",
        ),
        (
            [
                "--config",
                str(QUICKSTART),
                *TINY,
                "--strategy",
                "fl_lightning.strategies.fedavg.FedAvg",
                "--strategy.central_dp",
                "fl_lightning.strategies.adaptive_clipping.AdaptiveClipping",
                "--strategy.central_dp.noise_multiplier",
                "1.0",
                "--strategy.central_dp.count_noise_std",
                "0.4",
            ],
            "error: strategy.central_dp.count_noise_std: must be > noise_multiplier / 2 = 0.5",
        ),
        (
            ["--config", str(DDG), *TINY, "--strategy.init_args.bits", "2"],
            "error: strategy.bits: 2 bits cannot hold 4 standard deviations of the sum of",
        ),
    ],  # fmt: skip
    ids=["dp_ftrl_fixed", "dp_ftrl_poisson", "anr_pld", "adaptive_clip_count_noise", "ddg_bits"],
)
def test_strategy_and_mechanism_refusals_write_nothing(run_cli, capsys, tmp_path, args, start):
    """Checks made when the strategy is set up (its sampling, its accountant, its mechanism's
    calibration) refuse before the Trainer exists: one line, exit 2, and no ``fl/version_N``
    nor W&B run under the run's root (the default loggers are on)."""
    rc = run_cli(["fit", *args, "--trainer.logger", "true", "--trainer.max_steps", "2"])
    err = capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 2 and "Traceback" not in err, err[-2000:]
    assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err[-2000:]
    assert errors[0].startswith(start), errors[0]
    _nothing_written(tmp_path)


def test_allow_large_delta_releases_and_says_so(run_cli, capsys, tmp_path):
    import json

    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", "1",
                  "--privacy.delta", "0.1", "--privacy.allow_large_delta", "true"])  # fmt: skip
    assert rc == 0
    guarantee = json.loads((tmp_path / "summary.json").read_text())["privacy/guarantee"]
    assert guarantee.startswith("client-level (")
    assert guarantee.endswith(
        "; δ = 0.1 ≥ 1/N = 1/10 (10 clients) allowed by privacy.allow_large_delta: publishing "
        "one client's data whole meets this δ"
    ), guarantee


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

    from fl_lightning.runs.arguments import argument_problem
    from fl_lightning.sweeps.spec import build_command, expand, load_spec

    monkeypatch.chdir(REPO)
    text = (REPO / "docs" / "sweeps.md").read_text()
    example = tmp_path / "example.yaml"
    example.write_text(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))
    spec = load_spec(example)
    argv = build_command(spec, expand(spec)[0].params)
    assert argument_problem(argv[argv.index("fit") :]) is None


def test_messages_name_the_field_the_file_and_the_reason(run_cli, capsys, tmp_path):
    """Issue 48's messages that said nothing: a config naming a missing group file, an unknown
    strategy class (by name, by class_path, in a config), an unknown key in a config file."""
    experiment = tmp_path / "exp"
    experiment.mkdir()
    missing = experiment / "missing_group.yaml"
    missing.write_text("trainer:\n  max_steps: 2\nclient: ../client/nope.yaml\n")
    unknown_class = experiment / "unknown_class.yaml"
    unknown_class.write_text("strategy:\n  class_path: fl_lightning.strategies.FedAvgX\n")
    typo = experiment / "typo.yaml"
    typo.write_text("model:\n  eval_every: 0\n  clients_per_rnd: 3\n")
    cases = [
        (["--config", str(missing)],
         f"error: client: ../client/nope.yaml not found (named in {missing} line 3; a path in a "
         f"config is relative to that config's folder: {tmp_path / 'client' / 'nope.yaml'})"),
        (["--config", str(QUICKSTART), "--strategy", "NoSuchStrategy"],
         "error: strategy: cannot use class 'NoSuchStrategy' (no class of that name is known); "
         "choose one of ADPFL, "),
        (["--config", str(QUICKSTART), "--config", str(unknown_class)],
         "error: strategy: cannot use class 'fl_lightning.strategies.FedAvgX' (module "
         "'fl_lightning.strategies' has no attribute 'FedAvgX'); choose one of "),
        (["--config", str(QUICKSTART), "--config", str(typo)],
         f"error: model.clients_per_rnd: not an option ({typo} line 3); did you mean "
         "model.clients_per_round? (see fl-lightning fit --help)"),
    ]  # fmt: skip
    for args, start in cases:
        rc = run_cli(["fit", *args])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1, err
        assert err[0].startswith(start), err[0]
        assert "NestedArg" not in err[0] and "NoneType" not in err[0], err[0]
    written = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["missing_group.yaml", "typo.yaml", "unknown_class.yaml"], written
