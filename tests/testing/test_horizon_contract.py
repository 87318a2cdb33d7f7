"""The horizon contract, over every registered strategy (``privacy/accounting/horizon.py``): a run
of K rounds resumed to 2K prints the ε of a fresh 2K-round run, or its resume is refused with one
line naming ``trainer.max_steps`` and the planned horizon. A resume is refused only where the
accounting is bound to the planned rounds (``StrategyTraits.horizon_bound``, a calibrated σ)."""

from __future__ import annotations

import io
import logging
import re

import pytest
import torch

from fl_lightning.client.config import DPSGDConfig
from fl_lightning.client.module import ClientModule
from fl_lightning.models.mlp import MLP
from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.strategies.dp_fedavg import DPFedAvg
from fl_lightning.testing import Simulation, epsilons_equal
from tests.testing.cases import CLASSES, FEATURES, case_names, simulation

K = 2
REFUSAL = rf"^trainer\.max_steps: the checkpoint was planned and accounted for {K} rounds \("


def reports_equal(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, float) or isinstance(y, float):
            if not epsilons_equal(float(x), float(y)):
                return False
        elif x != y:
            return False
    return True


def resumed_to(make, rounds: int):
    """A run of K rounds (planned K), checkpointed, resumed in a fresh simulation planned for
    ``rounds``; returns it (or raises the refusal)."""
    first = make(K)
    first.run()
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    resumed = make(rounds)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    return resumed


def check_horizon(make) -> str:
    """'refused' or 'equal'; fails when the resumed run prints another ε than a fresh one."""
    try:
        resumed = resumed_to(make, 2 * K)
    except ValueError as err:
        refusal = str(err)
    else:
        refusal = None
    if refusal is not None:
        assert re.match(REFUSAL, refusal), refusal
        assert "\n" not in refusal
        return "refused"
    rest = resumed.run()
    assert [r.round_idx for r in rest] == list(range(K, 2 * K))
    fresh = make(2 * K)
    fresh.run()
    got, want = resumed.accountant.report(), fresh.accountant.report()
    assert reports_equal(got, want), (got, want)
    return "equal"


@pytest.mark.parametrize("name", case_names())
def test_a_resume_to_twice_the_rounds_prints_the_fresh_epsilon_or_is_refused(name, data):
    outcome = check_horizon(lambda rounds: simulation(name, data, rounds=rounds))
    bound = simulation(name, data, rounds=K).accountant.horizon
    assert bound is not None and bound.rounds == K
    assert (outcome == "refused") == (bound.reason is not None), (outcome, bound)


def calibrated(dp_sgd: bool, data):
    def make(rounds: int) -> Simulation:
        torch.manual_seed(0)
        client = ClientModule(
            MLP(input_dim=FEATURES, hidden=(8,), num_classes=CLASSES),
            num_classes=CLASSES, lr=0.1, local_steps=2, batch_size=8,
            dp_sgd=DPSGDConfig(noise_multiplier=None, max_grad_norm=1.0) if dp_sgd else None,
        )  # fmt: skip
        logging.disable(logging.WARNING)
        try:
            return Simulation(
                DPFedAvg(noise_multiplier=None) if not dp_sgd else DPFedAvg(noise_multiplier=1.0),
                data, client=client, rounds=rounds, clients_per_round=3,
                privacy=PrivacyAccountant("rdp", 1e-5, target_epsilon=20.0),
            )  # fmt: skip
        finally:
            logging.disable(logging.NOTSET)

    return make


@pytest.mark.parametrize("dp_sgd", [False, True], ids=["strategy-sigma", "dp-sgd-sigma"])
def test_a_sigma_calibrated_over_the_planned_rounds_refuses_a_longer_resume(dp_sgd, data):
    assert check_horizon(calibrated(dp_sgd, data)) == "refused"


def test_a_bound_run_resumes_to_its_planned_rounds(data):
    """DP-FTRL planned for 2K rounds, checkpointed at K, resumes to 2K: the ε of the straight
    run (its one event was charged at round 0 for 2K rounds)."""
    first = simulation("DPFTRL", data, rounds=2 * K)
    first.run(K)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    again = simulation("DPFTRL", data, rounds=2 * K)
    again.load_state_dict(torch.load(buffer, weights_only=True))
    rest = again.run()
    straight = simulation("DPFTRL", data, rounds=2 * K).run()
    assert epsilons_equal(rest[-1].epsilon, straight[-1].epsilon)
