"""A ``RoundContext`` for unit tests of one strategy hook, with the defaults a run would give.

A hook test (``aggregate``, ``process_update``, ``round_privacy``) needs a context without a
run; :func:`round_context` builds the one ``FederatedRound.context`` would build for a cohort
drawn from ``num_clients`` clients: the sampling rate and expected cohort size follow from the
cohort and the sampling mode, so a test states only what it is about.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from fl_lightning.privacy.accounting.events import CohortSampling, SamplingMode
from fl_lightning.records import RoundContext


def round_context(
    global_params: torch.Tensor | int,
    cohort: Sequence[int],
    *,
    num_clients: int | None = None,
    round_idx: int = 0,
    total_rounds: int = 1,
    seed: int = 0,
    sampling: SamplingMode | CohortSampling | None = "fixed",
    sample_rate: float | None = None,
    expected_cohort_size: float | None = None,
    client_config: dict[str, Any] | None = None,
    evaluate: Callable[[str], dict[str, float]] | None = None,
) -> RoundContext:
    """The context of round ``round_idx`` whose dispatched clients are ``cohort``.

    Args:
        global_params: the flat global model, or its size (a zero vector of that size).
        cohort: the round's client ids.
        num_clients: N (default: the sampling's population, else one more than the largest id
            of the cohort).
        sampling: how the cohort was drawn (``fixed``, ``poisson``, ``cyclic``, or the
            ``CohortSampling`` itself); None leaves ``RoundContext.sampling`` unset (a
            client-level event then cannot be accounted).
        sample_rate: q (default the sampling's rate, else m/N, m the cohort's size).
        expected_cohort_size: default q·N.

    ``round_idx``, ``total_rounds``, ``seed``, ``client_config`` and ``evaluate`` are as
    ``RoundContext`` has them.
    """
    params = torch.zeros(global_params) if isinstance(global_params, int) else global_params
    members = [int(c) for c in cohort]
    given = sampling if isinstance(sampling, CohortSampling) else None
    if num_clients is None:
        num_clients = given.population if given else (max(members) + 1 if members else 1)
    n = num_clients
    if sample_rate is None:
        sample_rate = given.rate if given else len(members) / n
    rate = sample_rate
    drawn: CohortSampling | None = given
    if given is None and sampling is not None and not isinstance(sampling, CohortSampling):
        drawn = CohortSampling(sampling, rate, n)
    return RoundContext(
        round_idx=round_idx,
        total_rounds=total_rounds,
        seed=seed,
        num_clients=n,
        cohort=members,
        expected_cohort_size=(
            expected_cohort_size if expected_cohort_size is not None else rate * n
        ),
        sample_rate=rate,
        global_params=params,
        client_config=dict(client_config or {}),
        evaluate=evaluate,
        sampling=drawn,
    )


__all__ = ["round_context"]
