"""FedAvg (McMahan et al. 2017): the weighted mean of the clients' model deltas.

The server optimizer turns this into FedAvg (SGD, lr 1), FedAvgM (momentum) or FedAdam (Adam;
Reddi et al. 2021); see ``FederatedModule``.
"""

from __future__ import annotations

from fl_lightning.strategies.base import Strategy


class FedAvg(Strategy):
    """Weighted mean of the deltas; ``weighting`` n_i (default) or uniform."""
