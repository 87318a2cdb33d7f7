"""The strategy's one set-up (strategies/spec.py): the server hands every strategy one frozen
FederationSpec, once, before the first round, with the clients' DP-SGD σ already fixed."""

from __future__ import annotations

import dataclasses

import pytest

from fl_lightning.client.config import LocalTrainingConfig
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.strategies.spec import FederationSpec, ServerOptimizerSpec, local_lr_in_force
from fl_lightning.testing import round_context
from tests.strategies.dpfl_agn_helpers import tiny_run


class Recording(FedAvg):
    """FedAvg that records every spec it is set up with and the rounds that ran before."""

    def __init__(self) -> None:
        super().__init__()
        self.specs: list[FederationSpec] = []
        self.rounds_before_setup: list[int] = []
        self.rounds_run = 0

    def setup_federation(self, spec: FederationSpec) -> None:
        super().setup_federation(spec)
        self.specs.append(spec)
        self.rounds_before_setup.append(self.rounds_run)

    def after_round(self, ctx, aggregate) -> dict:
        self.rounds_run += 1
        return {}


def test_a_run_sets_the_strategy_up_once_with_the_federation_it_runs():
    strategy = Recording()
    module, _ = tiny_run(strategy, rounds=2, sigma=None, target_epsilon=8.0, num_clients=4)
    assert len(strategy.specs) == 1 and strategy.rounds_before_setup == [0]
    spec = strategy.specs[0]
    assert spec.num_clients == 4 and spec.rounds == 2 and spec.seed == 0
    assert list(spec.client_sizes) == module.data.client_sizes().tolist()
    assert spec.num_parameters == sum(p.numel() for p in module.global_net.parameters())
    assert list(spec.layer_slices) == [n for n, _ in module.global_net.named_parameters()]
    # The clients' σ was calibrated from the target before the strategy saw the config.
    assert spec.local.dp_sgd is not None and spec.local.dp_sgd.noise_multiplier is not None
    assert spec.local == module.local_config
    assert module.client.training_config.dp_sgd.noise_multiplier is None  # left as configured
    assert spec.server.averages_models and spec.has_validation_split
    assert spec.global_model is module.global_net


def test_spec_is_frozen_and_its_slices_read_only():
    spec = FederationSpec(num_clients=2, num_parameters=3, layer_slices={"w": slice(0, 3)})
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.num_clients = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.layer_slices["b"] = slice(3, 4)  # type: ignore[index]
    assert spec.min_client_size == 0 and not spec.uses_dp_sgd


def test_model_averaging_and_the_local_lr_in_force():
    assert ServerOptimizerSpec().averages_models
    assert not ServerOptimizerSpec("sgd", 0.5).averages_models
    assert local_lr_in_force({}, 0.1) == 0.1
    assert local_lr_in_force({"lr": 0.3}, 0.1) == 0.3  # a per-round override wins
    with pytest.raises(ValueError, match="^strategy.lr: a positive local learning rate"):
        local_lr_in_force({}, None, field="strategy.lr")
    spec = FederationSpec(num_clients=1, num_parameters=1, local=LocalTrainingConfig(lr=0.2))
    assert spec.local.lr == 0.2


@pytest.mark.parametrize(
    ("path", "kwargs", "why"),
    [
        (
            "fl_lightning.strategies.nbafl.NbAFL",
            {"clip_norm": 1.0, "epsilon": 1.0},
            "NbAFL perturbs",
        ),
        ("fl_lightning.strategies.dp_fedasgp.DPFedASGP", {}, "DP-FedASGP privatises the upload"),
        ("fl_lightning.strategies.dp_fedavg_local.DPFedAvgLocal", {}, "dp_fedavg_local adds"),
    ],
)
def test_upload_privatising_strategies_refuse_dp_sgd_clients_in_one_line(path, kwargs, why):
    """Algorithms whose noise is on the upload refuse DP-SGD clients at set-up, naming the
    field (FederationSpec.refuse_dp_sgd), and accept the same federation without it."""
    import importlib

    from fl_lightning.client.config import DPSGDConfig

    module, name = path.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    plain = FederationSpec(num_clients=4, num_parameters=10, client_sizes=(5, 5, 5, 5), seed=0)
    dp = dataclasses.replace(
        plain, local=LocalTrainingConfig(dp_sgd=DPSGDConfig(noise_multiplier=1.0))
    )
    with pytest.raises(ValueError, match=rf"^client\.dp_sgd: {why}.*; leave dp_sgd unset$"):
        cls(**kwargs).setup_federation(dp)
    cls(**kwargs).setup_federation(plain)


@pytest.mark.parametrize("sampling", ["poisson", "fixed"])
def test_dp_fedavg_fixes_its_sigma_to_the_target_the_spec_carries(sampling):
    """σ is fixed in setup_federation from FederationSpec.privacy: the accountant that reports
    then spends the target over spec.rounds rounds of that sampling (within its bisection
    tolerance); a σ given is kept; no σ and no target is refused naming the field."""
    from fl_lightning.privacy.accounting.events import CohortSampling
    from fl_lightning.privacy.guarantee.accountant import PrivacyAccountant
    from fl_lightning.strategies.dp_fedavg import DPFedAvg
    from fl_lightning.strategies.spec import PrivacyTarget

    cohort = CohortSampling(sampling, 0.1, 100)
    target = PrivacyTarget(epsilon=2.0, delta=1e-5, accountant="rdp", sampling=cohort)
    spec = FederationSpec(num_clients=100, num_parameters=4, rounds=30, privacy=target)
    strategy = DPFedAvg(noise_multiplier=None)
    strategy.setup_federation(spec)
    assert strategy.noise_multiplier is not None and strategy.noise_multiplier > 0
    accountant = PrivacyAccountant("rdp", delta=1e-5)
    ctx = round_context(4, range(10), total_rounds=30, sampling=cohort)
    for _ in range(30):
        accountant.record(strategy.round_privacy(ctx))
    assert accountant.report()["privacy/epsilon"] == pytest.approx(2.0, rel=0.02)

    given = DPFedAvg(noise_multiplier=1.3)
    given.setup_federation(spec)
    assert given.noise_multiplier == 1.3
    with pytest.raises(ValueError, match="^strategy.noise_multiplier: unset"):
        DPFedAvg(noise_multiplier=None).setup_federation(
            dataclasses.replace(spec, privacy=PrivacyTarget(sampling=cohort))
        )
