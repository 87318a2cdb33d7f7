"""DP-SGD federated learning: the baseline of DPFL-AGN (Jiao et al. 2023, §5.1 "DP-SGD", §5.4
"DPSGD"; Abadi et al. 2016, Alg. 1, run by every client, FedAvg with p_j = |D_j|/|D|).

Constant noise multiplier σ (``client.dp_sgd.noise_multiplier``), plain SGD on the noisy
gradient (``client.optimizer: sgd``), no adaptive noise reduction. Record-level accounting is
the core's (each client's Poisson-sampled Gaussian steps, RDP).
"""

from __future__ import annotations

from fl_lightning.strategies.dpfl_agn import DPFLAGN


class DPSGDFL(DPFLAGN):
    """DPFL-AGN with both components off: constant σ, SGD local steps, model averaging."""

    def __init__(self) -> None:
        super().__init__(adaptive_lr=False, anr=False, adam_state="reset")


__all__ = ["DPSGDFL"]
