"""PNPM (Ren et al., J. Electron. Inf. Technol. 45:784-792, 2023), **reconstructed**.

The SPM paper (Chen & Zheng 2024, Lemma 1) quotes only PNPM's variance,
w²·4(e^ε + 1/3)/(e^ε−1)², and says its perturbation bound is set "based on empirical data". The
original (in Chinese) was not available. This is the reconstruction of the paper notes (§2.5):
the SPM sign-interval mechanism with C = (e^ε+3)/(e^ε−1), which is unbiased and has exactly the
quoted variance. It is unverified against the original. Like SPM it randomises only the sign.
"""

from __future__ import annotations

from fl_lightning.privacy.mechanisms.spm import SymmetricPiecewiseMechanism


class PNPMReconstructed(SymmetricPiecewiseMechanism):
    """Reconstructed PNPM: SPM with C = (e^ε+3)/(e^ε−1) (= SPM ``unbiased_c``)."""

    name = "pnpm"

    def __init__(self, *, epsilon: float) -> None:
        super().__init__(epsilon=epsilon, variant="unbiased_c")
