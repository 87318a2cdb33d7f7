"""Same answer at any scale: 1 process and 2 DDP processes (gloo, CPU) end identically.

Runs the real CLI (in batches, one import per process: tests/server/conftest.py; the 2-process
batch is started by Lightning's DDP launcher, which re-executes it as rank 1), then compares the
checkpoints' global weights (within 1e-5) and summary.json's ε. One run pair uses a sum-based
strategy (one all-reduce per round, DP-FedAvg + DP-SGD: client noise keyed by (seed, round,
client), central noise by (seed, round)), the other a strategy that needs every update
(DP-FedExP: all updates gathered to every rank). Also: resume of a DDP checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

# Every test here reads runs launched on two processes (the session's ddp_runs batches).
pytestmark = pytest.mark.ddp


def global_weights(root: Path) -> dict[str, torch.Tensor]:
    ckpt = torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    return {k: v for k, v in ckpt["state_dict"].items() if k.startswith("global_net.")}


def assert_same_run(a: Path, b: Path) -> None:
    wa, wb = global_weights(a), global_weights(b)
    assert wa.keys() == wb.keys() and wa
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], atol=1e-5, rtol=0)
    sa = json.loads((a / "summary.json").read_text())
    sb = json.loads((b / "summary.json").read_text())
    assert sa["rounds"] == sb["rounds"]
    assert sa["privacy/epsilon"] == pytest.approx(sb["privacy/epsilon"], rel=1e-9)
    assert sa["test/accuracy"] == pytest.approx(sb["test/accuracy"], abs=1e-6)
    assert sa["test/loss"] == pytest.approx(sb["test/loss"], abs=1e-4)


def test_two_processes_match_one_sum_based_with_dp_sgd_and_resume(ddp_runs):
    one, two = ddp_runs.run("sum", 1), ddp_runs.run("sum", 2)
    assert_same_run(one, two)
    # Resume the 2-round DDP checkpoint for a 3rd round under DDP == 3 rounds in one process.
    three, resumed = ddp_runs.run("sum_3", 1), ddp_runs.run("sum_resumed", 2)
    assert_same_run(three, resumed)
    # The weights moved between rounds 2 and 3 (the comparison is not of frozen weights).
    w2, w3 = global_weights(two), global_weights(three)
    assert any(not torch.allclose(w2[k], w3[k], atol=1e-4) for k in w2)
    ddp_runs.lightning.exited_cleanly()
    ddp_runs.one.exited_cleanly()


def test_two_processes_match_one_with_budgeted_local_dp_on_a_sum_strategy(ddp_runs):
    """FedAvg + BudgetedUploads (tests/server/conftest.py LOCAL_DP, record reading): the
    budgets and the sound client-level ε are charged on the server on every rank, the noise is
    drawn on the rank that trained the client from a generator keyed by (seed, round, client),
    so two processes report the same per-client ε and end with the same model."""
    one, two = ddp_runs.run("local_dp", 1), ddp_runs.run("local_dp", 2)
    assert_same_run(one, two)
    sa = json.loads((one / "summary.json").read_text())
    sb = json.loads((two / "summary.json").read_text())
    assert (
        sa["privacy/guarantee"].startswith("none")
        and "record-level sensitivity" in (sa["privacy/guarantee"])
    )
    assert sa["privacy/epsilon_sound"] == pytest.approx(sb["privacy/epsilon_sound"], rel=1e-12)
    assert 0 < sa["privacy/epsilon_sound"] < float("inf")


def test_two_processes_match_one_when_the_strategy_needs_every_update(ddp_runs):
    """DP-FedExP (tests/server/conftest.py ALL_UPDATES) reads every update's norm."""
    from fl_lightning.strategies.dp_fedexp import DPFedExP

    assert DPFedExP.reduction == "stream"
    assert_same_run(ddp_runs.run("all_updates", 1), ddp_runs.run("all_updates", 2))


def test_two_processes_match_one_with_dp_ftrl(ddp_runs):
    """DP-FTRL (banded square root, cyclic cohorts): the correlated noise is drawn from
    generators keyed by the seed on every rank, so 2 processes end where 1 does."""
    one, two = ddp_runs.run("ftrl", 1), ddp_runs.run("ftrl", 2)
    assert_same_run(one, two)


@pytest.mark.parametrize("run", ["ftrl_blt", "ftrl_banded", "ftrl_honaker", "ftrl_amplified"])
def test_two_processes_match_one_with_each_new_dp_ftrl_factorisation(ddp_runs, run):
    """Issue 50: the BLT and the optimised banded factorisation are optimised on every rank
    (deterministic float64 L-BFGS), Honaker's estimates kept on every rank and the cyclic
    Poisson cohorts drawn from the seed on every rank, so 2 processes end where 1 does."""
    assert_same_run(ddp_runs.run(run, 1), ddp_runs.run(run, 2))


def test_two_processes_match_one_with_adaptive_clipping(ddp_runs):
    """AdaptiveClipping on FedAvg (tests/server/conftest.py ADAPTIVE): the clip's update reads
    the all-reduced noisy count with noise from the generator every rank shares, so the clip in
    the checkpoint, the model and ε are those of one process."""
    one, two = ddp_runs.run("adaptive", 1), ddp_runs.run("adaptive", 2)
    assert_same_run(one, two)

    def clip(root: Path) -> float:
        ckpt = torch.load(root / "checkpoints" / "last.ckpt", weights_only=False)
        (state,) = [v for k, v in ckpt["callbacks"].items() if "central_dp" in v]
        return state["central_dp"]["clip_norm"]

    assert clip(one) == clip(two) != 0.05


def test_two_processes_match_one_with_distributed_dp_behind_secagg(ddp_runs):
    """DDPFedAvg (tests/server/conftest.py SECAGG): the modular sum of the masked uploads is the
    all-reduce, the dropouts and masks are keyed by (seed, round), so 2 processes decode the
    integers 1 process does: the same weights, the same survivors and the same ε."""
    one, two = ddp_runs.run("secagg", 1), ddp_runs.run("secagg", 2)
    assert_same_run(one, two)
    sa = json.loads((one / "summary.json").read_text())
    sb = json.loads((two / "summary.json").read_text())
    assert "SecAgg" in sa["privacy/guarantee"] and "16-bit" in sa["privacy/guarantee"]
    assert sa["privacy/secagg_survivors_min"] == sb["privacy/secagg_survivors_min"]
    assert 0 < sa["privacy/epsilon"] < float("inf")
