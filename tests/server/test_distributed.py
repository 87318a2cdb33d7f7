"""Collectives with two real gloo processes: config agreement, update gathering."""

from __future__ import annotations

import json

import pytest
import torch

from fl_lightning.records import ClientUpdate
from fl_lightning.server.distributed import (
    check_ranks_agree,
    gather_updates,
    launch_problem,
    rank_and_world,
)
from fl_lightning.strategies.fedavg import FedAvg


def collectives(rank: int, world: int) -> dict:
    """Runs on every rank of a gloo group of 2 (tests/server/ddp_batch.py, launched torchrun
    style by the ``ddp_runs`` fixture): what each rank saw."""
    out: dict = {"world": list(rank_and_world())}
    check_ranks_agree({"lr": 0.1})
    try:
        check_ranks_agree({"lr": 0.1 if rank == 0 else 0.2})
        out["mismatch"] = None
    except ValueError as err:
        out["mismatch"] = str(err)
    mine = [ClientUpdate(client_id=c, delta=torch.full((3,), float(c)), num_examples=c,
                         loss=float(c)) for c in ([4, 0] if rank == 0 else [2])]  # fmt: skip
    everyone, payloads = gather_updates(mine, dim=3, device=torch.device("cpu"), payload=rank * 10)
    out["payloads"] = payloads
    out["ids"] = [u.client_id for u in everyone]
    out["deltas"] = [u.delta.tolist() for u in everyone]
    return out


@pytest.mark.ddp
def test_two_ranks_agree_disagree_and_gather(ddp_runs):
    ddp_runs.torchrun.step("collectives")
    for rank in (0, 1):
        r = json.loads((ddp_runs.root / f"collectives.rank{rank}.json").read_text())
        assert r["world"] == [rank, 2]
        assert r["mismatch"] is not None and r["mismatch"].startswith("config:")
        assert r["ids"] == [0, 2, 4]
        assert r["deltas"] == [[0.0] * 3, [2.0] * 3, [4.0] * 3]
        assert r["payloads"] == [0, 10]


def test_launch_problems():
    assert "trainer.devices" in launch_problem(
        accelerator="cpu", devices=10_000, world_size=10_000, strategy=FedAvg()
    )
    assert launch_problem(accelerator="cpu", devices=1, world_size=1, strategy=FedAvg()) is None


def test_plans_that_keep_unsynced_client_state_are_refused_under_several_processes(monkeypatch):
    from fl_lightning.records import ClientPlan
    from fl_lightning.server import round as executor  # the round builds the plans

    plan = ClientPlan(start_params=torch.zeros(2), save_optimizer_state=lambda state: None)
    executor.refuse_unsynced_state(plan, FedAvg())  # one process: nothing to lose
    monkeypatch.setattr(executor, "rank_and_world", lambda: (0, 2))
    with pytest.raises(ValueError, match="^strategy: FedAvg keeps per-client optimizer state"):
        executor.refuse_unsynced_state(plan, FedAvg())

    synced = FedAvg()
    synced.client_states = {}
    executor.refuse_unsynced_state(plan, synced)
    executor.refuse_unsynced_state(ClientPlan(start_params=torch.zeros(2)), FedAvg())


def test_config_hash_describes_strategy_settings_not_process_local_objects():
    """Closures, ledgers and other objects whose repr carries a memory address must not make
    the ranks disagree; a different setting must."""
    from fl_lightning.server.distributed import fingerprint
    from fl_lightning.server.run_identity import describe_setting
    from fl_lightning.strategies.adp_fl import ADPFL

    def desc(strategy) -> str:
        return fingerprint(describe_setting(dict(vars(strategy))))

    a, b = ADPFL(epsilon=10.0), ADPFL(epsilon=10.0)
    a.budget.accuracy_fn, b.budget.accuracy_fn = (lambda c: 0.0), (lambda c: 1.0)
    assert desc(a) == desc(b)
    assert desc(a) != desc(ADPFL(epsilon=11.0))
    assert desc(a) != desc(ADPFL(epsilon=10.0, clip_norm=2.0))  # inside the UploadMechanism
