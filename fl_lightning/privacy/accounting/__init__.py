"""What a round spends and its ε, as pure maths apart from any run's state: the events the
mechanisms build (``events.py``), ε of a history of them by the PLD (dp-accounting), RDP or
PRV (Opacus) accountant (``analysis.py``), the independent recomputation from a ledger
(``recompute.py``), the planned horizon (``horizon.py``), DP-SGD planning (``budget.py``) and
δ against the population (``population.py``). It imports no sibling sub-package of
``fl_lightning.privacy`` (the bottom of the privacy layers); the run's accountant callback that
composes these events is ``privacy/guarantee/accountant.py``."""
