"""FedBuff and FedAsync on the real round loop (strategies/fedbuff.py, fedasync.py)."""

import lightning.pytorch as pl
import pytest
import torch

from fl_lightning.client.module import ClientModule
from fl_lightning.data.datamodule import FederatedDataModule
from fl_lightning.models.mlp import MLP
from fl_lightning.server.module import FederatedModule
from fl_lightning.strategies.asynchronous.staleness import staleness_scale
from fl_lightning.strategies.budgeted_uploads import BudgetedUploads
from fl_lightning.strategies.fedasync import FedAsync
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.strategies.fedbuff import FedBuff
from fl_lightning.utils.flat import flatten_into, trainable_parameters

M = 4


def fit(strategy, rounds=2, clients_per_round=M):
    torch.manual_seed(0)
    client = ClientModule(
        net=MLP(input_dim=16, hidden=(8,), num_classes=3),
        num_classes=3,
        lr=0.1,
        local_steps=2,
        batch_size=8,
    )
    model = FederatedModule(
        client=client,
        strategy=strategy,
        clients_per_round=clients_per_round,
        eval_every=0,
    )
    data = FederatedDataModule(
        dataset="synthetic",
        num_clients=8,
        partitioner="dirichlet",
        alpha=1.0,
        dataset_options={"num_examples": 400, "num_features": 16, "num_classes": 3},
    )
    trainer = pl.Trainer(
        max_steps=rounds,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(model, datamodule=data)
    params = trainable_parameters(model.global_net)
    flat = flatten_into(params, torch.empty(sum(p.numel() for p in params)))
    return flat, strategy, model.strategy_metrics  # the last round's strategy/<key> metrics


def test_fedbuff_with_k_equal_to_the_cohort_and_no_delay_is_fedavg():
    fedavg, _, _ = fit(FedAvg())
    fedbuff, s, metrics = fit(FedBuff(buffer_size=M, weighting="num_examples"))
    assert torch.allclose(fedavg, fedbuff, atol=1e-6)
    assert s.model_version == 2 and metrics["async/staleness_max"] == 0


def test_fedasync_without_delay_and_full_mixing_of_one_client_is_fedavg():
    fedavg, _, _ = fit(FedAvg(), clients_per_round=1)
    fedasync, _, _ = fit(FedAsync(mixing=1.0), clients_per_round=1)
    assert torch.allclose(fedavg, fedasync, atol=1e-6)


def test_async_strategies_run_with_stragglers_and_local_noise():
    kw = dict(
        delay_kind="exponential",
        delay_mean=0.8,
        straggler_fraction=0.5,
        straggler_slowdown=3.0,
        receive_window=1.0,
        aggregation_window=0.2,
    )
    noise = BudgetedUploads(mechanism="gaussian", epsilon=50.0)
    _, fb, metrics = fit(FedBuff(buffer_size=3, local_dp=noise, **kw), rounds=4)
    assert metrics["async/model_version"] >= 1
    assert fb.traits.private and metrics["eps_basic_max"] <= 50.0 * (1 + 1e-9)
    _, fa, metrics = fit(FedAsync(mixing=0.5, **kw), rounds=4)
    in_flight = {a.dispatch_round for arr in fa.pending.values() for a in arr}
    assert set(fa.versions) <= in_flight
    assert not fa.traits.private and "eps_basic_max" not in metrics


def test_local_dp_is_the_same_component_on_any_async_algorithm():
    """Local DP is a component, not a base class: FedBuff and FedAsync given the same
    BudgetedUploads settings dispatch the same clients and charge the same per-client ledger;
    without one they are not private."""
    kw = dict(receive_window=1.0)
    runs = {}
    for name, cls, extra in [("fedbuff", FedBuff, {"buffer_size": 2}), ("fedasync", FedAsync, {})]:
        noise = BudgetedUploads(mechanism="laplace", epsilon=20.0, clip_norm=0.5)
        runs[name] = fit(cls(local_dp=noise, **extra, **kw), rounds=2)[1]
    a, b = runs["fedbuff"].local_dp, runs["fedasync"].local_dp
    assert a is not None and b is not None
    assert a.ledger.state_dict() == b.ledger.state_dict() and a.ledger.spent
    plain = fit(FedBuff(buffer_size=2, **kw), rounds=2)[1]
    assert plain.local_dp is None and not plain.traits.private


def test_staleness_functions():
    assert staleness_scale("sqrt", 3) == pytest.approx(0.5)
    assert staleness_scale("polynomial", 3, a=1.0) == pytest.approx(0.25)
    assert staleness_scale("hinge", 4, a=1.0, b=4) == 1.0
    assert staleness_scale("hinge", 6, a=1.0, b=4) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="buffer_size"):
        FedBuff(buffer_size=0)
    with pytest.raises(ValueError, match="mixing"):
        FedAsync(mixing=0.0)


def test_local_dp_composes_with_a_synchronous_strategy_and_its_budget_holds():
    """Budgeted local DP is not tied to the asynchronous loop: FedAvg holding a BudgetedUploads
    (ε = 2, 1 per upload) dispatches every client twice, then none (Alg. 1 line 2 of Wu et al.
    2025: a client that cannot afford its next upload leaves)."""
    noise = BudgetedUploads(mechanism="laplace", epsilon=2.0, upload_epsilon=1.0)
    _, s, metrics = fit(FedAvg(local_dp=noise), rounds=4, clients_per_round=8)
    assert s.traits.private and s.local_dp is noise
    assert noise.exited == set(range(8)) and metrics["clients_exited"] == 8.0
    assert metrics["eps_basic_max"] == pytest.approx(2.0)
    assert all(noise.ledger.paper_spent(c) == pytest.approx(2.0) for c in range(8))


def test_an_upload_whose_budget_was_never_charged_is_refused_not_sent_in_clear():
    """A subclass that overrides configure_round without super() would skip the charge: the
    upload is refused with the reason, never released without its noise or its accounting."""

    class Forgetful(FedAvg):
        def configure_round(self, ctx):
            return {}

    noise = BudgetedUploads(mechanism="laplace", epsilon=2.0, upload_epsilon=1.0)
    with pytest.raises(RuntimeError, match="super\\(\\).configure_round"):
        fit(Forgetful(local_dp=noise), rounds=1)
