"""The ADP-FL paper's "Baseline": FedAvg with an evenly distributed privacy budget.

Wu et al. 2025, Sec. 5 and Eq. 10: every upload is noised at ε_i = N·ε/(n·E) (Gaussian with
δ = 1e-5 or Laplace) and aggregated with plain FedAvg weights |D_i|. It runs in the same
asynchronous environment as ADP-FL (same clock, delays and strict per-client budget), without
staleness or ε weighting.
"""

from __future__ import annotations

from fl_lightning.strategies.async_local_dp import AsyncLocalDP


class EvenBudget(AsyncLocalDP):
    """Async FedAvg with local DP uploads at the even per-upload budget N·ε/(n·E).

    All arguments are those of :class:`~fl_lightning.strategies.async_local_dp.AsyncLocalDP`
    (``epsilon``, ``mechanism``, ``clip_norm``, the clock and the delay model).
    """


__all__ = ["EvenBudget"]
