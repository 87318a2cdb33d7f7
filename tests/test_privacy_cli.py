"""Privacy truth end to end through the CLI: the guarantee sentence names adjacency and
sampling, DP-SGD calibration covers the smallest client, an unaffordable first round is refused,
and a σ with an ε target for it is refused (issues: privacy truth; silently ignored targets)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fl_lightning.privacy.accounting.analysis import epsilon
from fl_lightning.privacy.accounting.events import SampledGaussian
from tests.conftest import QUICKSTART, REPO, TINY

FEDSMP = REPO / "configs" / "strategy" / "dp_fedasgp" / "fedsmp.yaml"


def _summary(tmp_path: Path) -> dict:
    return json.loads(next(Path(tmp_path).rglob("summary.json")).read_text())


def _with_summary(args: list[str], tmp_path: Path) -> list[str]:
    # TINY switches the loggers off; summary.json needs the run directory of a CSV logger.
    i = args.index("--trainer.logger")
    logger = {"class_path": "lightning.pytorch.loggers.CSVLogger",
              "init_args": {"save_dir": str(tmp_path)}}  # fmt: skip
    return [*args[:i], "--trainer.logger", json.dumps(logger), *args[i + 2 :]]


@pytest.mark.parametrize(
    ("mode", "adjacency"), [("poisson", "add/remove one client"), ("fixed", "replace-one client")]
)
def test_client_level_epsilon_matches_the_sampling_that_ran(run_cli, tmp_path, mode, adjacency):
    rc = run_cli(
        [
            "fit",
            "--config",
            str(QUICKSTART),
            *_with_summary(TINY, tmp_path),
            "--trainer.max_steps",
            "3",
            "--model.sampling",
            mode,
        ]
    )
    assert rc == 0
    s = _summary(tmp_path)
    assert adjacency in s["privacy/guarantee"]
    population = 10 if mode == "fixed" else 0
    expected = epsilon([SampledGaussian(1.5, 0.3, 3, population)], 1e-5, "pld")
    assert s["privacy/epsilon"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(
    ("mode", "sigma", "printed"), [("poisson", 1.5, 12.35), ("fixed", 0.75, 35.8)]
)
def test_quickstart_prints_the_pld_epsilon_of_independently_built_events(
    run_cli, capsys, mode, sigma, printed
):
    """The quickstart's privacy (20 of 40 clients, σ = 1.5, 40 rounds, δ = 1e-5; training cut to
    one local step, which the accounting does not see) against dp-accounting's PLD of events
    built here: Poisson cohorts add/remove; fixed-size cohorts by their dominating pair, a
    Poisson-subsampled Gaussian of σ/2 at q = m/N (Zhu, Dong & Wang 2022)."""
    import dp_accounting

    args = ["fit", "--config", str(QUICKSTART), "--model.sampling", mode,
            "--client.local_steps", "1", "--model.eval_every", "0",
            "--trainer.logger", "false", "--trainer.enable_progress_bar", "false"]  # fmt: skip
    assert run_cli(args) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("Finished 40 rounds")]
    assert len(line) == 1
    eps = float(line[0].split("ε = ")[1].split(" ")[0])
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(dp_accounting.PoissonSampledDpEvent(0.5, dp_accounting.GaussianDpEvent(sigma)), 40)
    assert eps == pytest.approx(acc.get_epsilon(1e-5), rel=0.01)
    assert eps == pytest.approx(printed, abs=0.05)
    assert "(δ = 1e-05)" in line[0] and "1e-05)-DP" in line[0]


def test_default_sampling_of_dp_fedavg_is_poisson(run_cli, tmp_path):
    assert (
        run_cli(
            [
                "fit",
                "--config",
                str(QUICKSTART),
                *_with_summary(TINY, tmp_path),
                "--trainer.max_steps",
                "2",
            ]
        )
        == 0
    )
    assert "Poisson cohorts (q = 0.3)" in _summary(tmp_path)["privacy/guarantee"]


@pytest.mark.parametrize("accountant", ["pld", "prv", "rdp"])
def test_fixed_cohorts_are_accounted_on_every_accountant(run_cli, tmp_path, accountant):
    rc = run_cli(
        [
            "fit",
            "--config",
            str(QUICKSTART),
            *_with_summary(TINY, tmp_path),
            "--trainer.max_steps",
            "2",
            "--model.sampling",
            "fixed",
            "--privacy.accountant",
            accountant,
        ]
    )
    assert rc == 0
    s = _summary(tmp_path)
    assert "replace-one client" in s["privacy/guarantee"]
    assert "dominating pair" in s["privacy/guarantee"]
    expected = epsilon([SampledGaussian(1.5, 0.3, 2, 10)], 1e-5, accountant)
    assert s["privacy/epsilon"] == pytest.approx(expected, rel=1e-6)


def test_dirichlet_dp_sgd_keeps_every_client_within_the_target(run_cli, tmp_path):
    rc = run_cli(
        [
            "fit",
            "--config",
            str(QUICKSTART),
            *_with_summary(TINY, tmp_path),
            "--trainer.max_steps",
            "3",
            "--data.num_clients",
            "4",
            "--data.alpha",
            "0.1",
            "--strategy",
            "fl_lightning.strategies.fedavg.FedAvg",
            "--client.dp_sgd.noise_multiplier",
            "null",
            "--client.dp_sgd.max_grad_norm",
            "1.0",
            "--client.batch_size",
            "8",
            "--privacy.target_epsilon",
            "3.0",
        ]
    )
    assert rc == 0
    s = _summary(tmp_path)
    assert s["rounds"] == 3 and not s["stopped_by_budget"]
    assert 0 < s["privacy/epsilon_record"] <= 3.0


def test_a_target_below_one_round_fails_before_training_with_one_line(run_cli, capsys):
    rc = run_cli(
        [
            "fit",
            "--config",
            str(QUICKSTART),
            *TINY,
            "--trainer.max_steps",
            "3",
            "--strategy",
            "fl_lightning.strategies.fedavg.FedAvg",
            "--client.dp_sgd.noise_multiplier",
            "0.5",
            "--client.dp_sgd.max_grad_norm",
            "1.0",
            "--privacy.target_epsilon",
            "0.05",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0
    assert err[-1].startswith("error: privacy.target_epsilon: 0.05 cannot pay for a single round")
    assert "client " in err[-1]


def test_a_client_level_target_below_the_first_round_never_exits_0(run_cli, capsys):
    rc = run_cli(
        [
            "fit",
            "--config",
            str(QUICKSTART),
            *TINY,
            "--trainer.max_steps",
            "3",
            "--privacy.target_epsilon",
            "0.01",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0
    assert "cannot pay for the first round" in err[-1]


def test_sigma_and_epsilon_target_for_it_are_refused(run_cli, capsys):
    # The reproduction: noise_multiplier 1.5 is carried over from the quickstart's
    # DPFedAvg when --strategy switches to FedSMP, whose epsilon is 0.5.
    rc = run_cli(
        [
            "fit",
            "--config",
            str(QUICKSTART),
            "--strategy",
            str(FEDSMP),
            "--strategy.sparsifier",
            "rand_k",
            "--trainer.max_steps",
            "2",
            *TINY,
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert "strategy.noise_multiplier and strategy.epsilon: both set" in err[-1]


def test_a_given_sigma_with_a_target_says_which_wins(run_cli, tmp_path, caplog):
    with caplog.at_level("WARNING", logger="fl_lightning.server.privacy_plan"):
        rc = run_cli(
            [
                "fit",
                "--config",
                str(QUICKSTART),
                *_with_summary(TINY, tmp_path),
                "--trainer.max_steps",
                "2",
                "--privacy.target_epsilon",
                "50",
            ]
        )
    assert rc == 0
    assert "strategy.noise_multiplier = 1.5 is used as given" in caplog.text
    assert _summary(tmp_path)["privacy/epsilon"] <= 50


def test_a_given_dp_sgd_sigma_with_a_target_says_which_wins(run_cli, tmp_path, caplog):
    with caplog.at_level("WARNING", logger="fl_lightning.server.privacy_plan"):
        rc = run_cli(["fit", "--config", str(QUICKSTART), *_with_summary(TINY, tmp_path),
                      "--trainer.max_steps", "2",
                      "--strategy", "fl_lightning.strategies.fedavg.FedAvg",
                      "--client.dp_sgd.noise_multiplier", "1.0", "--client.batch_size", "4",
                      "--privacy.target_epsilon", "50"])  # fmt: skip
    assert rc == 0
    assert "client.dp_sgd.noise_multiplier = 1 is used as given" in caplog.text
    assert _summary(tmp_path)["privacy/epsilon_record"] <= 50


def test_the_accountant_can_be_switched_off_for_a_non_private_baseline(run_cli, tmp_path):
    rc = run_cli(["fit", "--config", str(QUICKSTART), *_with_summary(TINY, tmp_path),
                  "--trainer.max_steps", "1", "--strategy", "fl_lightning.strategies.fedavg.FedAvg",
                  "--privacy.accountant", "none"])  # fmt: skip
    assert rc == 0
    assert "privacy/epsilon" not in _summary(tmp_path)  # no accountant, no ε claimed


def test_a_private_run_cannot_switch_the_accountant_off(run_cli, capsys):
    rc = run_cli(["fit", "--config", str(QUICKSTART), *TINY, "--trainer.max_steps", "1",
                  "--privacy.accountant", "none"])  # fmt: skip
    assert rc == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .splitlines()[-1]
        .startswith("error: privacy.accountant: none, but this run privatises")
    )
