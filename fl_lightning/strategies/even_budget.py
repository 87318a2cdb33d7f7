"""The ADP-FL paper's "Baseline" is a configuration (``configs/strategy/even_budget.yaml``).

Wu et al. 2025, Sec. 5 and Eq. 10: every upload is noised at ε_i = N·ε/(n·E) (Gaussian with
δ = 1e-5 or Laplace) and aggregated with plain FedAvg weights |D_i|, in the same asynchronous
environment as ADP-FL (same clock, delays and strict per-client budget), without staleness or ε
weighting. That is exactly :class:`~fl_lightning.strategies.async_local_dp.AsyncLocalDP` with its
defaults, so the config names that class. ``EvenBudget`` remains as an alias of it so that
configs written before the change (among them the stored reproduction of paper 004, whose run
ids hash ``configs/repro/004/nonprivate.yaml``) still load and give the same runs.
"""

from __future__ import annotations

from fl_lightning.strategies.async_local_dp import AsyncLocalDP

EvenBudget = AsyncLocalDP

__all__ = ["EvenBudget"]
