"""The noise-to-signal warning before round 0 (server/noise_signal.py): the shipped offline
ADP-FL config (which trains 20 rounds to chance) is warned, the quickstart is not, and a run
whose noise is raised past the threshold prints exactly one WARNING line."""

from __future__ import annotations

import logging
import math

from fl_lightning.server.federation import set_up_federation
from fl_lightning.server.noise_signal import WARN_RATIO, estimate, run_estimate, warning_line
from fl_lightning.strategies.dp_fedavg import DPFedAvg
from tests.conftest import QUICKSTART, REPO, TINY, offline_mnist_args

ADP_FL_OFFLINE = REPO / "configs" / "experiment" / "adp_fl" / "mnist_offline_adp_fl.yaml"


def _set_up_estimate(args: list[str]):
    """Builds a config's run (no training), sets the federation up as ``fit`` does, and
    returns the module's own estimate."""
    from fl_lightning.runs.cli_class import build_cli_class

    cli = build_cli_class()(args, run=False)
    model, data = cli.model, cli.datamodule
    data.setup("fit")
    rounds = int(cli.trainer.max_steps)
    set_up_federation(
        strategy=model.strategy,
        client=model.client,
        accountant=model.accountant,
        sampler=model.sampler,
        data=data,
        global_net=model.global_net,
        server=model.settings.optimizer_spec,
        rounds=rounds,
        seed=model.seed,
    )
    return run_estimate(model.strategy, model.global_net, model.sampler, data, rounds)


def test_shipped_offline_adp_fl_config_is_warned():
    est = _set_up_estimate(["--config", str(ADP_FL_OFFLINE), *offline_mnist_args()])
    assert est is not None and est.rounds == 20
    assert est.ratio_run >= WARN_RATIO
    line = warning_line(est)
    assert line is not None and line.startswith("WARNING: noise-to-signal ")
    assert "\n" not in line and "more clients a round" in line and "larger ε" in line


def test_quickstart_is_not_warned():
    est = _set_up_estimate(["--config", str(QUICKSTART)])
    assert est is not None
    # σ = 1.5 on the sum of 20 of 40 clients, d = 650 (digits, logistic regression):
    # √650·1.5/20 = 1.91 a round, / √40 over the run.
    assert math.isclose(est.ratio_round, math.sqrt(650) * 1.5 / 20, rel_tol=1e-9)
    assert math.isclose(est.ratio_run, est.ratio_round / math.sqrt(40), rel_tol=1e-9)
    assert warning_line(est) is None


def test_central_gaussian_ratio_follows_its_definition():
    strategy = DPFedAvg(clip_norm=2.0, noise_multiplier=3.0)
    est = estimate(strategy, dimension=10_000, cohort_size=5, rounds=16)
    assert est is not None
    assert math.isclose(est.ratio_round, 3.0 * 2.0 / 5 * 100 / 2.0)  # √d·σC/m / C
    assert math.isclose(est.ratio_run, est.ratio_round / 4)
    assert warning_line(est) is not None  # 15 ≥ 10


def test_a_drowned_run_prints_one_warning_line_and_a_quiet_one_none(tmp_path, caplog):
    from fl_lightning.cli import main

    quick = ["--trainer.max_steps", "1", "--model.eval_every", "0", "--trainer.logger", "false",
             "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir"]  # fmt: skip
    with caplog.at_level(logging.WARNING):
        assert (
            main(["fit", "--config", str(QUICKSTART), *quick, str(tmp_path / "a")]) == 0
        )  # 1.91 in 1 round
    assert not [r for r in caplog.records if "noise-to-signal" in r.getMessage()]
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # TINY: 3 clients a round, d = 2,410: 24.5
        assert main(["fit", "--config", str(QUICKSTART), *TINY, *quick, str(tmp_path / "b")]) == 0
    lines = [r.getMessage() for r in caplog.records if "noise-to-signal" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("WARNING: noise-to-signal ")
