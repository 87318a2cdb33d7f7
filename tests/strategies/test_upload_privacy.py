"""Upload privatisation is one slot (``Strategy.local_dp``, the ``UploadPrivacy`` contract):
the strategies that were "FedAvg + a mechanism on each upload" hold their mechanism there, give
the same uploads, events and metrics as FedAvg holding it, and still load checkpoints written
when the mechanism's state sat flat in the strategy's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from fl_lightning.records import ClientUpdate, RoundContext, RoundPlan
from fl_lightning.strategies.budgeted_uploads import BudgetedUploads
from fl_lightning.strategies.clipped_upload_noise import ClippedUploadNoise
from fl_lightning.strategies.dp_fedavg_local import DPFedAvgLocal
from fl_lightning.strategies.dp_fedsnlc import DPFedSNLC
from fl_lightning.strategies.fedavg import FedAvg
from fl_lightning.strategies.high_impact_noise import HighImpactNoise
from fl_lightning.strategies.ldp_fedavg import LDPFedAvg
from fl_lightning.strategies.per_coordinate_ldp import PerCoordinateLDP
from fl_lightning.strategies.spec import FederationSpec
from fl_lightning.strategies.upload_privacy import UploadPrivacy
from fl_lightning.testing import round_context

D = 40

# named strategy, FedAvg holding the same mechanism
PAIRS = {
    "ldp_fedavg_pm": (
        lambda: LDPFedAvg(mechanism="pm", epsilon=0.5),
        lambda: FedAvg(weighting="uniform", local_dp=PerCoordinateLDP(mechanism="pm", epsilon=0.5)),
    ),
    "ldp_fedavg_spm": (
        lambda: LDPFedAvg(mechanism="spm", epsilon=0.3, upload="update"),
        lambda: FedAvg(
            weighting="uniform",
            local_dp=PerCoordinateLDP(mechanism="spm", epsilon=0.3, upload="update"),
        ),
    ),
    "dp_fedavg_local_gaussian": (
        lambda: DPFedAvgLocal(epsilon=0.5, clip_norm=0.7, noise="gaussian"),
        lambda: FedAvg(local_dp=ClippedUploadNoise(epsilon=0.5, clip_norm=0.7, noise="gaussian")),
    ),
    "dp_fedsnlc_sound": (
        lambda: DPFedSNLC(epsilon=1.0, significant_fraction=0.2, noise_unselected=True),
        lambda: FedAvg(
            local_dp=HighImpactNoise(epsilon=1.0, significant_fraction=0.2, noise_unselected=True)
        ),
    ),
}


def _ctx(round_idx: int = 0) -> RoundContext:
    # q = 0.5 of N = 6 (m = q·N = 3), no client-level sampling recorded
    return round_context(
        torch.linspace(-0.5, 0.5, D),
        [0, 2, 5],
        num_clients=6,
        round_idx=round_idx,
        total_rounds=3,
        sample_rate=0.5,
        sampling=None,
    )


def _round(strategy, round_idx: int):
    """One round by hand: select, configure, privatise three uploads, aggregate, account."""
    ctx = _ctx(round_idx)
    ctx.cohort = strategy.select_clients(ctx)
    strategy.configure_round(ctx)
    data = torch.Generator().manual_seed(round_idx)
    updates = []
    for cid in ctx.cohort:
        delta = torch.randn(D, generator=data) * 0.3
        u = ClientUpdate(client_id=cid, delta=delta, num_examples=5 + cid, loss=0.1)
        g = torch.Generator().manual_seed(100 * round_idx + cid)
        updates.append(strategy.process_update(u, ctx, generator=g))
    agg, agg_metrics = strategy.aggregate(updates, ctx, generator=torch.Generator())
    return agg, agg_metrics, strategy.round_privacy(ctx), strategy.after_round(ctx, agg)


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_fedavg_holding_the_mechanism_is_the_named_strategy(pair):
    named, composed = (make() for make in PAIRS[pair])
    assert isinstance(named.local_dp, UploadPrivacy)
    assert type(named.local_dp) is type(composed.local_dp)
    spec = FederationSpec(num_clients=6, num_parameters=D, seed=0)
    for s in (named, composed):
        s.setup_federation(spec)
    for r in range(2):
        a, b = _round(named, r), _round(composed, r)
        assert torch.equal(a[0], b[0])
        assert a[1:] == b[1:]
    assert named.traits.private and composed.traits.private
    assert named.reduction == composed.reduction == "sum"
    assert named.state_dict() == composed.state_dict()


def test_unbudgeted_mechanisms_dispatch_every_sampled_client():
    """The budget hooks default to no-ops: every sampled client is dispatched."""
    for mech in (PerCoordinateLDP(mechanism="pm"), ClippedUploadNoise(), HighImpactNoise()):
        s = FedAvg(local_dp=mech)
        ctx = _ctx()
        assert s.select_clients(ctx) == ctx.cohort
        assert s.configure_round(ctx) == RoundPlan(tuple(ctx.cohort))  # no overrides
    assert issubclass(BudgetedUploads, UploadPrivacy)


def test_the_nodp_baseline_holds_a_mechanism_that_privatises_nothing():
    s = LDPFedAvg(mechanism="none")
    ctx = _ctx()
    u = ClientUpdate(client_id=0, delta=torch.ones(D), num_examples=1, loss=0.0)
    out = s.process_update(u, ctx, generator=torch.Generator())
    assert torch.equal(out.delta, torch.ones(D))
    assert not s.traits.private and s.round_privacy(ctx).local == {}
    assert s.after_round(ctx, torch.zeros(D)) == {} and s.reports == {0: 1, 2: 1, 5: 1}


def test_ldp_fedavg_checkpoint_loads_in_both_layouts():
    """The report counts resume from a checkpoint, and from one written before the mechanism
    was a component (``{"reports": ...}`` flat in the strategy's state)."""
    s = LDPFedAvg(mechanism="pm", epsilon=0.5)
    s.setup_federation(FederationSpec(num_clients=6, num_parameters=D, seed=0))
    _round(s, 0)
    _round(s, 1)
    state = s.state_dict()
    assert state == {"local_dp": {"reports": {0: 2, 2: 2, 5: 2}}}
    for layout in (state, {"reports": {0: 2, 2: 2, 5: 2}}):
        resumed = LDPFedAvg(mechanism="pm", epsilon=0.5)
        resumed.load_state_dict(layout)
        assert resumed.state_dict() == state
        spec = FederationSpec(num_clients=6, num_parameters=D, seed=0)
        resumed.setup_federation(spec)
        assert _round(resumed, 2)[3]["reports_max"] == 3.0


@pytest.mark.parametrize("cls", [DPFedAvgLocal, DPFedSNLC])
def test_stateless_mechanisms_load_the_old_empty_checkpoint(cls):
    s = cls()
    s.load_state_dict({})  # what these strategies wrote before: no state
    assert s.state_dict() == {"local_dp": {}}
    s.load_state_dict(s.state_dict())


def test_the_guarantee_note_is_logged_for_any_strategy_holding_the_mechanism():
    """What the server logs at the start of fit (``run_files.log_upload_guarantee``; the run
    itself: tests/configs/test_upload_privacy_configs.py)."""
    from fl_lightning.server.run_files import log_upload_guarantee

    logged: list[dict] = []
    logger = SimpleNamespace(log_hyperparams=logged.append)
    s = FedAvg(weighting="uniform", local_dp=PerCoordinateLDP(mechanism="pm", epsilon=0.3))
    s.setup_federation(FederationSpec(num_clients=6, num_parameters=1000, seed=0))
    log_upload_guarantee(s.local_dp.guarantee_note(), [logger])
    assert logged == [{"strategy/guarantee": s.local_dp.guarantee_note()}]
    assert "d = 1000 coordinates is 300-LDP" in logged[0]["strategy/guarantee"]
    assert ClippedUploadNoise().guarantee_note() is None
    log_upload_guarantee(None, [logger])
    assert len(logged) == 1  # no note, nothing logged


def test_bad_component_settings_name_the_field():
    with pytest.raises(ValueError, match="strategy.mechanism"):
        PerCoordinateLDP(mechanism="foo")
    with pytest.raises(ValueError, match="strategy.noise"):
        ClippedUploadNoise(noise="uniform")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="strategy.significant_fraction"):
        HighImpactNoise(significant_fraction=0.0)
