"""Strategies with per-client state kept by client-side hooks, under DDP (docs/distributed.md).

Clients move between ranks from round to round (the cohort changes, so the sharding does): the
state a client left on the rank that trained it (SCAFFOLD's control variate c_i, DPFL-AGN's
per-client Adam state) must be on whichever rank trains it next. 1 process and 2 gloo processes
must end with the same global weights (1e-5) and ε, and rank 0's checkpoint must hold every
client's latest state (without the sync, clients last trained on rank 1 would be missing or
stale there). A strategy that keeps such state without syncing it is refused on every rank.
"""

from __future__ import annotations

from typing import Literal

import pytest
import torch

from fl_lightning.strategies.dpfl_agn import DPFLAGN
from tests.server.conftest import CLIENT_STATE_ROUNDS as ROUNDS
from tests.server.test_ddp_equivalence import assert_same_run

# The runs (SCAFFOLD, AGN, ADP, UNSYNCED in tests/server/conftest.py): the session's ddp_runs.


class UnsyncedAdam(DPFLAGN):
    """A strategy that persists per-client optimizer state but does not sync it."""

    def __init__(self, *, adam_state: Literal["persist", "reset"] = "persist") -> None:
        super().__init__(adam_state=adam_state)
        self.client_states = None  # the Adam states stay in optimizer_states, unsynced


def _ranks_of_clients(val_fraction: float) -> list[dict[int, int]]:
    """Which rank trains which client in each round of the runs below (same code path)."""
    from fl_lightning.data.datamodule import FederatedDataModule
    from fl_lightning.server.sampling import CohortSampler
    from fl_lightning.server.sharding import assign_clients

    data = FederatedDataModule(dataset="digits", num_clients=8, partitioner="dirichlet",
                               alpha=0.5, val_fraction=val_fraction, seed=0)  # fmt: skip
    data.setup("fit")
    sizes = data.client_sizes()
    out = []
    for r in range(ROUNDS):
        cohort = CohortSampler("fixed", 5).sample(0, r, 8)
        costs = {c: 3.0 * min(16, int(sizes[c])) for c in cohort}
        shards = assign_clients(cohort, costs, 2)
        out.append({c: rank for rank, shard in enumerate(shards) for c in shard})
    return out


def _moved(val_fraction: float) -> set[int]:
    rounds = _ranks_of_clients(val_fraction)
    seen: dict[int, int] = {}
    moved = set()
    for ranks in rounds:
        for c, rank in ranks.items():
            if c in seen and seen[c] != rank:
                moved.add(c)
            seen[c] = rank
    return moved


def test_clients_move_between_ranks_in_these_runs():
    assert _moved(0.0) and _moved(0.1)


def strategy_state(root, key: str) -> dict:
    """The strategy's checkpointed state (written by rank 0) holding ``key``."""
    ckpt = torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    (state,) = [s for s in ckpt["callbacks"].values() if isinstance(s, dict) and key in s]
    return state[key]


@pytest.mark.ddp
def test_scaffold_two_processes_match_one(ddp_runs):
    one, two = ddp_runs.run("scaffold", 1), ddp_runs.run("scaffold", 2)
    assert_same_run(one, two)
    # Rank 0's checkpoint holds every client's latest c_i, also those last trained on rank 1
    # (without the sync they would be missing or stale there).
    c1, c2 = strategy_state(one, "client_controls"), strategy_state(two, "client_controls")
    assert c1.keys() == c2.keys() and len(c1) > 5
    for cid in c1:
        torch.testing.assert_close(c1[cid], c2[cid], atol=1e-5, rtol=0)


@pytest.mark.ddp
def test_dpfl_agn_persisted_adam_two_processes_match_one(ddp_runs):
    one, two = ddp_runs.run("agn", 1), ddp_runs.run("agn", 2)
    assert_same_run(one, two)
    s1, s2 = strategy_state(one, "optimizer_states"), strategy_state(two, "optimizer_states")
    assert s1.keys() == s2.keys() and len(s1) > 5
    for cid in s1:
        steps = [int(v["step"]) for v in s2[cid]["state"].values()]
        assert steps == [int(v["step"]) for v in s1[cid]["state"].values()]
        for k, v in s1[cid]["state"].items():
            torch.testing.assert_close(v["exp_avg"], s2[cid]["state"][k]["exp_avg"], atol=1e-5,
                                       rtol=0)  # fmt: skip


@pytest.mark.ddp
def test_unsynced_client_state_is_refused_on_every_rank_without_a_hang(ddp_runs):
    """torchrun-style launch (every rank runs the CLI): every rank exits 2, rank 0 says why.
    A hang would leave the step unfinished (the batch is killed after its timeout)."""
    errs = []
    for rank in (0, 1):
        rc, out = ddp_runs.torchrun.ranks[rank].get("refused", (None, "step never started"))
        assert rc == 2, out[-2000:]
        errs.append([line for line in out.splitlines() if line.startswith("error:")])
    # The one line comes from rank 0 only; rank 1 exits with the same status, silently.
    assert len(errs[0]) == 1 and errs[1] == [], errs
    assert errs[0][0].startswith("error: strategy:") and "UnsyncedAdam" in errs[0][0]
    assert not list((ddp_runs.root / "refused").rglob("*.ckpt"))


@pytest.mark.ddp
def test_async_adp_fl_two_processes_match_one(ddp_runs):
    """Async state (clock, buffered late uploads, per-client budgets, staleness, accuracy
    callback) is written by server-side hooks that run on every rank with every update, so it
    needs no sync; this checks it (ADP-FL with stragglers: late uploads cross rounds; the
    strategy's settings: ADP in tests/server/conftest.py)."""
    from fl_lightning.strategies.adp_fl import ADPFL

    assert ADPFL.reduction == "gather" and ADPFL(epsilon=1.0).client_states is None
    assert_same_run(ddp_runs.run("adp", 1), ddp_runs.run("adp", 2))
    # The batch's last run: both ranks then exit without a crash (a successful 2-process
    # ADP-FL run once died with SIGABRT at exit).
    ddp_runs.torchrun.exited_cleanly()
