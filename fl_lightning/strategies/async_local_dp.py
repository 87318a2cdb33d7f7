"""The ADP-FL paper's even-budget baseline: asynchronous FedAvg with local DP uploads.

Wu et al. 2025, Sec. 5 and Eq. 10: every upload is clipped and noised on the client at
ε_i = N·ε/(n·E) (Gaussian with δ = 1e-5, Thm. 1, or Laplace, Def. 6), a client uploads only
while its accumulated ε stays within ε (Alg. 1 line 2), and the server aggregates with plain
FedAvg weights |D_i| in the simulated asynchronous loop of
:class:`~fl_lightning.strategies.asynchronous.base.AsyncStrategy`.

That is ``AsyncStrategy`` holding a
:class:`~fl_lightning.strategies.budgeted_uploads.BudgetedUploads` (where the budget, the
ledger, the exits, the noise and the accounting live). This class only takes the uploads'
settings as flat arguments, the form of the configs written before the uploads became a
component (among them the stored reproduction of paper 004, whose run ids hash its configs),
and ADP-FL's (``strategies/adp_fl.py``).
"""

from __future__ import annotations

from typing import Any

from fl_lightning.privacy.mechanisms.local_budget import MechanismName, Sensitivity, TightAccountant
from fl_lightning.strategies.asynchronous.base import AsyncStrategy
from fl_lightning.strategies.budgeted_uploads import BudgetedUploads, BudgetSchedule


class AsyncLocalDP(AsyncStrategy):
    """Async FedAvg with local DP uploads at an even per-upload budget (the paper's baseline).

    Args:
        epsilon: total budget ε of each client (``None``: no budget; only with ``none``).
        upload_epsilon: per-upload budget; ``None``: N·ε/(n·E) (Eq. 10) with n/N the cohort rate
            and E = ``trainer.max_steps``.
        mechanism: ``gaussian`` (δ = ``delta``), ``laplace`` or ``none``.
        clip_norm: C, the clip norm of the delta (L2 for Gaussian, L1 for Laplace); Δ = 2C.
        delta: δ of each Gaussian upload.
        accountant: ``rdp`` or ``pld`` for the tight per-client composition.
        rounds: E of Eq. 6 / Eq. 10 (the budget horizon); ``None``: ``trainer.max_steps``.
        sensitivity: ``client`` (Δ = 2C) or ``record`` (Δ = 2C/|D_i|, no guarantee claimed;
            ``strategies/budgeted_uploads.py``).
        log_clients: also log each participating client's ε (``strategy/eps_basic/<id>``).
        budget: the per-upload budget schedule; ``None``: the even split (Eq. 10).
        **kwargs: the clock and delay model of :class:`AsyncStrategy` (and ``weighting``).
    """

    def __init__(
        self,
        *,
        epsilon: float | None = None,
        upload_epsilon: float | None = None,
        mechanism: MechanismName = "none",
        clip_norm: float = 1.0,
        delta: float = 1e-5,
        accountant: TightAccountant = "rdp",
        rounds: int | None = None,
        sensitivity: Sensitivity = "client",
        log_clients: bool = True,
        budget: BudgetSchedule | None = None,
        **kwargs: Any,
    ) -> None:
        uploads = BudgetedUploads(
            epsilon=epsilon,
            upload_epsilon=upload_epsilon,
            mechanism=mechanism,
            clip_norm=clip_norm,
            delta=delta,
            accountant=accountant,
            rounds=rounds,
            sensitivity=sensitivity,
            log_clients=log_clients,
            schedule=budget,
        )
        super().__init__(local_dp=uploads, **kwargs)

    @property
    def uploads(self) -> BudgetedUploads:
        """``local_dp``, always a ``BudgetedUploads`` here."""
        assert isinstance(self.local_dp, BudgetedUploads)
        return self.local_dp


__all__ = ["AsyncLocalDP"]
