"""The exact probability that SecAgg+'s survivors' masking graph splits
(``privacy/distributed/secagg/connectivity.py``): equal to enumerating every dropout pattern of the
graph ``masking_graph`` builds, met by the rounds' simulated dropouts, and said at set-up."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math

import pytest
from scipy import stats

from fl_lightning.privacy.accounting.events import CohortSampling
from fl_lightning.privacy.distributed.secagg.connectivity import (
    fewest_neighbours,
    split_probability,
)
from fl_lightning.privacy.distributed.secagg.protocol import (
    RoundKeys,
    masking_graph,
    survivor_components,
)
from fl_lightning.strategies.distributed_dp import SecAggDistributedDP
from fl_lightning.testing import round_context


def enumerated(n: int, k: int, r: float) -> float:
    graph = masking_graph(range(n), k, keys=RoundKeys(0, 0))
    total = 0.0
    for alive in itertools.product((False, True), repeat=n):
        s = [u for u in range(n) if alive[u]]
        if len(s) >= 2 and len(survivor_components(graph, s)) > 1:
            total += (1 - r) ** len(s) * r ** (n - len(s))
    return total


@pytest.mark.parametrize("n", [4, 7, 10])
def test_the_split_probability_is_the_enumerated_one(n):
    for k, r in itertools.product(range(1, n), (0.1, 0.3, 0.5)):
        assert math.isclose(split_probability(n, k, r), enumerated(n, k, r), abs_tol=1e-12)


def test_the_complete_graph_never_splits():
    assert split_probability(20, None, 0.5) == split_probability(20, 19, 0.5) == 0.0
    assert split_probability(20, 2, 0.0) == 0.0


def test_fewest_neighbours_is_the_smallest_k_under_the_bound():
    k = fewest_neighbours(20, 0.3, at_most=0.01)
    assert split_probability(20, k, 0.3) <= 0.01 < split_probability(20, k - 2, 0.3)


@dataclasses.dataclass
class Spec:
    num_parameters: int = 16
    num_clients: int = 20
    sampling: CohortSampling = CohortSampling("fixed", 1.0, 20)


def test_the_rounds_abort_as_often_as_the_graph_splits_and_setup_says_so(caplog):
    dp = SecAggDistributedDP(noise_multiplier=1.0, dropout_rate=0.3, neighbours=4)
    with caplog.at_level(logging.WARNING):
        dp.setup(Spec())
    (line,) = [r.getMessage() for r in caplog.records if "strategy.neighbours" in r.message]
    assert f"{100 * split_probability(20, 4, 0.3):.3g} % of rounds of 20 clients" in line
    rounds = 200
    aborted = sum(
        not dp.survivors(round_context(16, range(20), round_idx=i, seed=5)) for i in range(rounds)
    )
    p = split_probability(20, 4, 0.3)  # min_survivors = 2 aborts with probability < 1e-8 here
    assert stats.binomtest(aborted, rounds, p).pvalue > 1e-3
