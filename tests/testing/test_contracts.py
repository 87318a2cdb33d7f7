"""Contracts every registered strategy keeps, on ``fl_lightning.testing.Simulation`` (rounds on
``FederatedRound`` without Lightning; milliseconds a round here).

* the declared reduction gives what ``gather`` gives: a ``"sum"`` strategy's partial sums over
  1, 2 or 3 emulated processes, added and finalized, and a ``"stream"`` strategy's one pass
  over the updates as they are trained, equal ``aggregate`` of the list of every update (what
  DDP's all-reduce and a single process's streaming rely on). A ``"gather"`` strategy is the
  reference itself: its declared reason is ``reduction = "gather"`` (its ``aggregate`` needs
  every update at once), and the harness refuses to sum it;
* the ε a round is priced at before any client trains (the budget stop reads it) is the ε the
  accountant reports once the round is recorded;
* a checkpoint taken mid-run (``torch.save``, then ``torch.load(weights_only=True)`` as the
  run's checkpoint IO loads it) resumes to the weights and ε of the uninterrupted run;
* a client whose training raises is named, with the round, on the exception;
* the stacked engine (``executor: vectorized``) gives the sequential loop's weights and ε, or
  the strategy is sequential-only for the reason declared in ``SEQUENTIAL_ONLY`` (and the
  executor's fallback says that reason).
"""

from __future__ import annotations

import io
import re

import pytest
import torch

from fl_lightning.testing import Simulation, epsilons_equal
from tests.testing.cases import case, case_names, simulation

NAMES = case_names()


def reduction_of(name: str) -> str:
    return case(name).build().reduction


SUMS = [n for n in NAMES if reduction_of(n) == "sum"]
STREAMS = [n for n in NAMES if reduction_of(n) == "stream"]
GATHERS = [n for n in NAMES if reduction_of(n) == "gather"]


def weights_of(sim: Simulation, rounds: int) -> list[torch.Tensor]:
    return [r.weights for r in sim.run(rounds)]


def test_every_registered_strategy_is_in_one_reduction_group():
    assert sorted(SUMS + STREAMS + GATHERS) == sorted(NAMES)
    assert {"FedAvg", "DPFedAvg", "DPFTRL"} <= set(SUMS)
    assert "Isolate" in STREAMS and "GCFL" in GATHERS


@pytest.mark.parametrize("processes", [1, 2, 3])
@pytest.mark.parametrize("name", SUMS)
def test_sum_reduction_equals_gather(name, processes, data):
    gathered = weights_of(simulation(name, data, reduction="gather"), 2)
    summed = weights_of(simulation(name, data, reduction="sum", processes=processes), 2)
    for g, s in zip(gathered, summed, strict=True):
        torch.testing.assert_close(s, g, rtol=1e-5, atol=1e-6)
    assert not torch.equal(gathered[0], gathered[1])  # the rounds moved the model


@pytest.mark.parametrize("name", STREAMS)
def test_stream_reduction_equals_gather(name, data):
    gathered = weights_of(simulation(name, data, reduction="gather"), 2)
    streamed = weights_of(simulation(name, data), 2)  # declared: one pass, as trained
    for g, s in zip(gathered, streamed, strict=True):
        torch.testing.assert_close(s, g, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", GATHERS)
def test_a_gather_strategy_cannot_be_summed(name, data):
    with pytest.raises(ValueError, match=r"^reduction: .* declares reduction = 'gather'"):
        simulation(name, data, reduction="sum")


@pytest.mark.parametrize("name", NAMES)
def test_planned_epsilon_is_the_spent_epsilon(name, data):
    results = simulation(name, data, rounds=2).run()
    assert [r.round_idx for r in results] == [0, 1] and not results[-1].stopped
    for r in results:
        assert epsilons_equal(r.planned_epsilon, r.epsilon), (r.round_idx, r.planned_epsilon,
                                                              r.epsilon)  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_mid_run_resumes_to_the_same_weights_and_epsilon(name, data):
    straight = simulation(name, data, rounds=3).run()
    first = simulation(name, data, rounds=3)
    first.run(1)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    resumed = simulation(name, data, rounds=3)  # a new process: fresh strategy and accountant
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    rest = resumed.run()
    assert [r.round_idx for r in rest] == [1, 2]
    for a, b in zip(straight[1:], rest, strict=True):
        assert a.cohort == b.cohort
        assert torch.equal(a.weights, b.weights), f"round {a.round_idx}"
        assert epsilons_equal(a.epsilon, b.epsilon), (a.round_idx, a.epsilon, b.epsilon)


class FailingData:
    """The federation, but a client's data cannot be read once ``failing`` is set."""

    def __init__(self, data) -> None:
        self._data = data
        self.failing = False
        self.raised: list[int] = []

    def __getattr__(self, name: str):
        return getattr(self._data, name)

    def client_data(self, client_id: int):
        if self.failing:
            self.raised.append(client_id)
            raise OSError(f"shard of client {client_id} unreadable")
        return self._data.client_data(client_id)


@pytest.mark.parametrize("name", NAMES)
def test_a_client_that_raises_is_named_with_the_round(name, data):
    failing = FailingData(data)
    sim = simulation(name, failing, rounds=3)
    sim.step()  # round 0 trains
    failing.failing = True
    with pytest.raises(OSError, match="unreadable") as raised:
        sim.step()
    said = "\n".join(getattr(raised.value, "__notes__", []))
    # the first client whose data was read: by the executor ("client 3 failed in round 1") or
    # by the strategy while it planned the round (ADP-FL's accuracy check: the data's note,
    # then "round 1 failed")
    assert re.search(rf"^client {failing.raised[0]} failed\b", said, re.M), said
    assert re.search(r"\bround 1\b", said), said


# -- one local-training statement, two engines ----------------------------------------------------
# What the stacked engine cannot run identically, by strategy: the vectorised executor hands the
# round to the sequential loop and says why (server/vectorized_executor.py: plan_blocker,
# vectorization_blocker); the test checks it says exactly this.
SEQUENTIAL_ONLY = {
    "DPFLAGN": "optimizer state",  # each client's Adam moments persist across its rounds
    "DPFedProx": "FedProx",  # the proximal term is only in the sequential loop
    "DPScaffold": "gradient hook",  # the control-variate correction of every local gradient
    "Isolate": "own weights",  # every client trains its own model
}


@pytest.mark.parametrize("name", NAMES)
def test_the_stacked_engine_gives_the_sequential_updates(name, data):
    sequential = simulation(name, data, executor="sequential")
    stacked = simulation(name, data, executor="vectorized")
    want, got = sequential.run(), stacked.run()
    engine = stacked.round.executor
    if name in SEQUENTIAL_ONLY:
        assert engine.last_path == "sequential"
        assert SEQUENTIAL_ONLY[name] in str(engine.last_fallback_reason)
    else:
        assert engine.last_path == "stacked", engine.last_fallback_reason
    for a, b in zip(want, got, strict=True):
        assert a.cohort == b.cohort
        torch.testing.assert_close(b.weights, a.weights, rtol=1e-5, atol=1e-6)
        assert epsilons_equal(a.epsilon, b.epsilon)
