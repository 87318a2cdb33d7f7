"""DP-FedProx: FedProx (Li et al., MLSys 2020, Eq. 2) with record-level DP-SGD clients.

Each client minimises h_i(w; w_t) = F_i(w) + (μ/2)‖w − w_t‖²: the local loop adds μ(w − w_t) to
the noisy DP-SGD gradient (``client.prox_mu``, set here per round). The proximal term does not
touch the data, so it is post-processing of the noisy gradient and costs no privacy; ε is the
clients' DP-SGD ε. The server averages the deltas as FedAvg (weights n_i by default).
"""

from __future__ import annotations

from typing import Any

from fl_lightning.records import RoundContext
from fl_lightning.strategies.base import Strategy, Weighting


class DPFedProx(Strategy):
    """FedAvg aggregation with a proximal local objective.

    Args:
        mu: proximal coefficient μ (Li et al. 2020; the GCFL paper gives none, common grid
            {0.001, 0.01, 0.1, 1}).
        weighting: ``num_examples`` (n_i) or ``uniform``.
    """

    def __init__(self, *, mu: float = 0.01, weighting: Weighting = "num_examples") -> None:
        super().__init__(weighting=weighting)
        if mu < 0:
            raise ValueError(f"strategy.mu: must be >= 0, got {mu}")
        self.mu = mu

    def configure_round(self, ctx: RoundContext) -> dict[str, Any]:
        return {"prox_mu": self.mu}
