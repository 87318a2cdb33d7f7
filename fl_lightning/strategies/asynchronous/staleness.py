"""Staleness weights s(τ) of asynchronous aggregation, shared by FedBuff and FedAsync.

τ is the number of server model versions between the one a client started from and the one its
update is applied to.
"""

from __future__ import annotations

import math
from typing import Literal

StalenessFn = Literal["sqrt", "constant", "polynomial", "hinge"]


def staleness_scale(fn: StalenessFn, tau: int, *, a: float = 0.5, b: int = 4) -> float:
    """s(τ): ``sqrt`` 1/√(1+τ) (FedBuff), ``constant`` 1, ``polynomial`` (1+τ)^−a,
    ``hinge`` 1 if τ ≤ b else 1/(a(τ−b)+1) (FedAsync, Xie et al. 2019, Sec. 5.2)."""
    if tau < 0:
        raise ValueError(f"staleness must be >= 0, got {tau}")
    if fn == "sqrt":
        return 1.0 / math.sqrt(1.0 + tau)
    if fn == "constant":
        return 1.0
    if fn == "polynomial":
        return (1.0 + tau) ** (-a)
    if fn == "hinge":
        return 1.0 if tau <= b else 1.0 / (a * (tau - b) + 1.0)
    raise ValueError(f"strategy.staleness_fn: unknown {fn!r}")


__all__ = ["StalenessFn", "staleness_scale"]
