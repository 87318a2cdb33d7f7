"""DP-FedProx: FedProx (Li et al., MLSys 2020, Eq. 2) with record-level DP-SGD clients.

Each client minimises h_i(w; w_t) = F_i(w) + (μ/2)‖w − w_t‖²: the local loop adds μ(w − w_t) to
the noisy DP-SGD gradient (``client.prox_mu``, set here per round). The proximal term does not
touch the data, so it is post-processing of the noisy gradient and costs no privacy; ε is the
clients' DP-SGD ε. The server averages the deltas as FedAvg (weights n_i by default), or, given
``central_dp``, releases their clipped noisy sum over the expected cohort size (client-level
DP-FedProx: McMahan et al. 2018's Alg. 1 around the proximal local objective).
"""

from __future__ import annotations

from fl_lightning.records import RoundContext, RoundPlan
from fl_lightning.strategies.base import Strategy, Weighting
from fl_lightning.strategies.placement import CentralPrivacy
from fl_lightning.strategies.upload_privacy import UploadPrivacy


class DPFedProx(Strategy):
    """FedAvg aggregation with a proximal local objective.

    Args:
        mu: proximal coefficient μ (Li et al. 2020; the GCFL paper gives none, common grid
            {0.001, 0.01, 0.1, 1}).
        weighting: ``num_examples`` (n_i) or ``uniform``.
        local_dp: a mechanism on every upload (``UploadPrivacy``, e.g. ``BudgetedUploads``:
            local DP within a per-client budget; ``None``: none).
        central_dp: client-level DP on the aggregate (``None``: the DP-SGD clients' record-level
            DP only).
    """

    def __init__(
        self,
        *,
        mu: float = 0.01,
        weighting: Weighting = "num_examples",
        local_dp: UploadPrivacy | None = None,
        central_dp: CentralPrivacy | None = None,
    ) -> None:
        super().__init__(weighting=weighting, local_dp=local_dp, central_dp=central_dp)
        if mu < 0:
            raise ValueError(f"strategy.mu: must be >= 0, got {mu}")
        self.mu = mu

    def configure_round(self, ctx: RoundContext) -> RoundPlan:
        return super().configure_round(ctx).with_local(prox_mu=self.mu)
