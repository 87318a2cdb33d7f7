"""DP-FedAvg with distributed noise behind secure aggregation (Kairouz, Liu & Steinke 2021;
Agarwal, Kairouz & Liu 2021): FedAvg holding a
:class:`~fl_lightning.strategies.distributed_dp.SecAggDistributedDP` as its ``central_dp``.

Each client clips, encodes into integers mod 2^b, adds its share of discrete Gaussian or
Skellam noise and masks its upload; the server only sums masked vectors and unmasks the sum
(``privacy/distributed/secagg/``). This class takes the component's settings as flat arguments
(``strategy.mechanism``, ``strategy.bits``, ...); ``FedAvg`` with ``central_dp:`` is the same
run.
"""

from __future__ import annotations

from fl_lightning.strategies.base import Strategy
from fl_lightning.strategies.distributed_dp import DEFAULT_BETA, SecAggDistributedDP


class DDPFedAvg(Strategy):
    """Client-level distributed DP-FedAvg (see :class:`SecAggDistributedDP` for the args)."""

    def __init__(
        self,
        *,
        mechanism: str = "ddg",
        bits: int = 16,
        clip_norm: float = 1.0,
        noise_multiplier: float | None = 1.0,
        beta: float = DEFAULT_BETA,
        k_stddevs: float | None = None,
        dropout_rate: float = 0.0,
        neighbours: int | None = None,
        min_survivors: int = 2,
    ) -> None:
        dp = SecAggDistributedDP(
            mechanism=mechanism,
            bits=bits,
            clip_norm=clip_norm,
            noise_multiplier=noise_multiplier,
            beta=beta,
            k_stddevs=k_stddevs,
            dropout_rate=dropout_rate,
            neighbours=neighbours,
            min_survivors=min_survivors,
        )
        super().__init__(weighting="uniform", central_dp=dp)

    @property
    def dp(self) -> SecAggDistributedDP:
        assert isinstance(self.central_dp, SecAggDistributedDP)
        return self.central_dp


__all__ = ["DDPFedAvg"]
