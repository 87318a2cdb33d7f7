"""The carved round loop: the evaluation schedule (``server/settings.py``), the budget stop
(``server/privacy_plan.py``) and ``validate``/``test`` scoring through the round loop's one
evaluation path (``FederatedModule.evaluate_global``)."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest

from fl_lightning.privacy.accounting.budget import BudgetError
from fl_lightning.privacy.accounting.events import RoundPrivacy, SampledGaussian
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.server.privacy_plan import budget_stop
from fl_lightning.server.settings import ServerSettings
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.strategies.isolate import Isolate
from tests.strategies.dpfl_agn_helpers import tiny_run


def test_evaluation_every_k_rounds_and_at_the_last():
    def evaluated(eval_every: int, rounds: int) -> list[int]:
        settings = ServerSettings(eval_every=eval_every)
        return [r for r in range(rounds) if settings.evaluates_after(r, rounds)]

    assert evaluated(3, 7) == [2, 5, 6]
    assert evaluated(3, 6) == [2, 5]
    assert evaluated(0, 4) == [3]


def test_server_settings_name_the_bad_field():
    with pytest.raises(ValueError, match=r"^model\.executor: expected"):
        ServerSettings(executor="threads")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^model\.eval_every: must be >= 0, got -1$"):
        ServerSettings(eval_every=-1)
    assert ServerSettings(server_betas=(1, 0)).server_betas == (1.0, 0.0)


def test_budget_stop_goes_on_stops_and_refuses_the_first_round():
    round_cost = RoundPrivacy(client_level=[SampledGaussian(noise_multiplier=2.0, sample_rate=1.0)])
    accountant = PrivacyAccountant("rdp", 1e-5, target_epsilon=8.0)
    assert budget_stop(accountant, round_cost, round_idx=0, first_round=True) is None
    for _ in range(40):
        accountant.record(round_cost)
    stop = budget_stop(accountant, round_cost, round_idx=40, first_round=False)
    assert stop is not None and stop.startswith("Stopping before round 40")
    tight = PrivacyAccountant("rdp", 1e-5, target_epsilon=0.01)
    with pytest.raises(BudgetError, match=r"^privacy\.target_epsilon: 0\.01 cannot pay"):
        budget_stop(tight, round_cost, round_idx=0, first_round=True)


@pytest.mark.parametrize("strategy", [FedAvg, Isolate])
def test_validate_and_test_report_what_the_round_loop_reports(strategy):
    """Isolate scores the mean of its client models (``Strategy.evaluation_models``), not the
    global model: ``validate`` and ``test`` now say the same as the fit's summary."""
    module, fitted = tiny_run(strategy(), rounds=2, dp=False)
    data = fitted.datamodule
    trainer = pl.Trainer(
        logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu"
    )
    tested = trainer.test(module, datamodule=data, verbose=False)[0]
    validated = trainer.validate(module, datamodule=data, verbose=False)[0]
    for split, logged in (("test", tested), ("val", validated)):
        expected = module.evaluate_global(split)
        assert {k.split("/")[1] for k in logged} == set(expected)
        for k, v in expected.items():
            assert logged[f"{split}/{k}"] == pytest.approx(v, abs=1e-6)
