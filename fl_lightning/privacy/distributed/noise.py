"""Distributed discrete noise: the contract of a mechanism whose noise every client adds a share
of, in the integers, before secure aggregation (``strategies/distributed_dp.py``).

A :class:`DistributedNoise` does two things, both on the integer grid the SecAgg encoding maps
updates to (``privacy/distributed/secagg/encoding.py``):

* :meth:`DistributedNoise.sample`: one client's share, integer noise of a given variance, every
  draw from the generator it is handed (the client's keyed ``(seed, round, client)`` generator;
  in ``privacy.secure_mode`` its first key is the run's secret);
* :meth:`DistributedNoise.rdp`: the Rényi DP of the *sum* the server decodes, at an integer
  order, given the survivors' summed noise and the encoded sensitivity
  (``privacy/distributed/accounting.py`` adds sampling and composes rounds).

A new mechanism is one file implementing both (``ddg.py``, ``skellam.py``) plus one
``register_distributed_noise`` call (``registry.py``, where the built-in ones are
registered); ``SecAggDistributedDP(mechanism="name")`` then uses it.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class EncodedSensitivity:
    """What the RDP bound of a distributed mechanism reads, all on the integer grid.

    Attributes:
        l2: Δ₂, the L2 sensitivity of the sum after scaling and rounding (one client's encoded
            contribution, inflated by rounding: ``distributed.accounting.rounded_l2_bound``).
        l1: Δ₁, its L1 sensitivity (≤ Δ₂·min(√d, Δ₂) on integers).
        dim: d, the padded dimension (a power of two).
        local_variance: each client's noise variance on the grid.
        clients: n, the clients whose noise is in the decoded sum (the survivors).
    """

    l2: float
    l1: float
    dim: int
    local_variance: float
    clients: int


class DistributedNoise(abc.ABC):
    """One family of integer noise for distributed DP (see the module docstring)."""

    name: str = ""
    words: str = ""
    """The mechanism in the guarantee sentence (e.g. ``distributed discrete Gaussian``)."""

    @abc.abstractmethod
    def sample(self, n: int, variance: float, *, generator: torch.Generator) -> torch.Tensor:
        """``n`` independent int64 draws of variance ``variance`` (one client's share)."""

    @abc.abstractmethod
    def rdp(self, order: int, sens: EncodedSensitivity) -> float:
        """RDP at integer ``order`` ≥ 2 of releasing the sum of ``sens.clients`` shares plus a
        vector of sensitivity ``sens`` (no sampling)."""


__all__ = ["DistributedNoise", "EncodedSensitivity"]
