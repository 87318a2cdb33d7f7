"""Correlated noise for DP-FTRL: matrix-factorisation mechanisms A = B·C of the prefix-sum
workload and their sensitivity under min-separated participation (``matrix_mechanism.py``),
the Toeplitz loss and sensitivity they share (``toeplitz_mf.py``), and the optimised banded
(``banded_mf.py``) and buffered linear Toeplitz (``blt.py``) factorisations. It may import
``privacy/accounting`` (the event of a whole run) and nothing else of ``fl_lightning.privacy``."""
