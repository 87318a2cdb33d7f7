"""Privacy attacks and audits: membership inference and gradient inversion.

One attack a module: ``threshold`` (Yeom et al. 2018 / Basic-MIA), ``ml_leaks`` (Salem et al.
2019, adversary 1), ``lira`` (Carlini et al. 2022, offline), ``cs_mia`` (Gu et al. 2022,
confidence series across rounds), ``dlg`` (Zhu et al. 2019 DLG and Zhao et al. 2020 iDLG).
``metrics`` turns scores into AUC / TPR@FPR / an empirical ε lower bound; ``pipeline`` builds
target and shadow runs through the same LightningCLI machinery as ``fl-lightning fit``;
``callback.AuditCallback`` runs the attacks at the end of ``fit``; ``cli`` is
``fl-lightning audit``.
"""

MIA_ATTACKS = ("threshold", "ml_leaks", "lira", "cs_mia")
INVERSION_ATTACKS = ("dlg", "idlg")
ATTACKS = MIA_ATTACKS + INVERSION_ATTACKS

__all__ = ["ATTACKS", "INVERSION_ATTACKS", "MIA_ATTACKS"]
