"""The secure-mode contract over every registered strategy and the extra cases
(``fl_lightning/testing/secrecy.py``): two secure-mode runs of one configuration key every
noise, cohort and batch generator by their own secret, never by the configured seed, and
release different aggregates; replacing the secret by the configured seed is caught."""

from __future__ import annotations

import logging

import pytest

from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
from fl_lightning.testing import Simulation, secrecy_problems
from fl_lightning.testing.secrecy import keyed_by_other, recorded_generator_keys
from tests.testing.cases import case, case_names, client

CONFIGURED = 7  # the seed config.yaml would hold


def secure(name: str, data, *, secure_mode: bool = True):
    c = case(name)

    def make() -> Simulation:
        logging.disable(logging.WARNING)
        try:
            return Simulation(
                c.build(), data, client=client(c.dp_sgd), rounds=2, clients_per_round=3,
                privacy=PrivacyAccountant("rdp", 1e-5, secure_mode=secure_mode),
                seed=CONFIGURED, **c.options,
            )  # fmt: skip
        finally:
            logging.disable(logging.NOTSET)

    return make


@pytest.mark.parametrize("name", case_names())
def test_secure_runs_key_every_generator_by_their_own_secret(name, data):
    assert secrecy_problems(secure(name, data), configured_seed=CONFIGURED) == []


@pytest.mark.parametrize("name", ["DPFTRL", "DPFedAvg", "FedAvg+DP-SGD", "ADPFL"])
def test_the_contract_fails_when_the_secret_is_the_configured_seed(name, data, monkeypatch):
    monkeypatch.setattr("fl_lightning.testing.simulation.draw_secret_seed", lambda: CONFIGURED)
    problems = secrecy_problems(secure(name, data), configured_seed=CONFIGURED)
    assert "the run's secret is the configured seed" in problems
    assert "two runs drew the same secret" in problems
    assert "round 0: two runs released the same aggregate" in problems


def test_noise_keyed_by_the_configured_seed_is_caught(data, monkeypatch):
    """DP-FTRL's streaming noise keyed by ``spec.seed`` again (the bug of issue 46): the
    secret differs and the cohorts differ, yet the contract names the matrix mechanism."""
    from fl_lightning.strategies.dp_ftrl import DPFTRL

    bind = DPFTRL.finalize

    def keyed_by_config(self, reduced, ctx, *, generator):
        self.noise.seed = CONFIGURED  # what setup_federation did with spec.seed
        return bind(self, reduced, ctx.__class__(**{**ctx.__dict__, "seed": CONFIGURED}),
                    generator=generator)  # fmt: skip

    monkeypatch.setattr(DPFTRL, "finalize", keyed_by_config)
    problems = secrecy_problems(secure("DPFTRL", data), configured_seed=CONFIGURED)
    assert any("generators keyed by something other than the secret" in p for p in problems)
    assert any("matrix_mechanism" in p for p in problems), problems


def test_a_simulation_run_is_keyed_by_the_configured_seed(data):
    with recorded_generator_keys() as keys:
        sim = secure("DPFTRL", data, secure_mode=False)()
        sim.run()
    assert sim.noise_seed == CONFIGURED
    assert keys and keyed_by_other(keys, CONFIGURED) == []
