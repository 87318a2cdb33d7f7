"""DP-FedAvg with client-level DP (McMahan, Ramage, Talwar, Zhang 2018, Alg. 1).

FedAvg holding a :class:`~fl_lightning.strategies.central_dp.CentralGaussian` on its aggregate:
each client's delta is clipped to L2 norm C (client side); the server sums the clipped deltas,
adds N(0, σ²C²) once and divides by the *expected* cohort size (the mechanism, its accounting
and the sampling it needs are in ``strategies/central_dp.py``). This class only takes the
component's settings as flat arguments (``strategy.clip_norm``, ``strategy.noise_multiplier``),
the form of the shipped and stored configs; ``FedAvg`` with ``central_dp:`` is the same run.
"""

from __future__ import annotations

from fl_lightning.privacy.mechanisms.clipping import clip_by_l2_norm_
from fl_lightning.strategies.base import Strategy
from fl_lightning.strategies.central_dp import CentralGaussian
from fl_lightning.utils.rng import generator_for


class DPFedAvg(Strategy):
    """Client-level DP-FedAvg.

    Args:
        clip_norm: C, the L2 bound on each client's delta.
        noise_multiplier: σ, noise std in units of C. ``None``: calibrated from
            ``privacy.target_epsilon`` over ``trainer.max_steps`` rounds.
    """

    def __init__(self, *, clip_norm: float = 1.0, noise_multiplier: float | None = 1.0) -> None:
        dp = CentralGaussian(clip_norm=clip_norm, noise_multiplier=noise_multiplier)
        super().__init__(weighting="uniform", central_dp=dp)

    @property
    def dp(self) -> CentralGaussian:
        """``central_dp``, always a CentralGaussian here."""
        assert isinstance(self.central_dp, CentralGaussian)
        return self.central_dp

    @property
    def noise_multiplier(self) -> float | None:
        """σ (fixed by ``setup_federation`` when it was left to the run's target)."""
        return self.dp.noise_multiplier

    @property
    def clip_norm(self) -> float:
        return self.dp.clip_norm


__all__ = ["DPFedAvg", "clip_by_l2_norm_", "generator_for"]  # clip re-exported for old imports
