"""Empirical privacy: ε estimated from the canary scores of one training run
(``one_run.py``), the lower bound an audit holds against the accountant's upper bound. It
imports no sibling sub-package of ``fl_lightning.privacy``; the canaries and attacks that
produce the scores are ``fl_lightning/attacks/``."""
