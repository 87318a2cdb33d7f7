"""Secure aggregation, simulated faithfully: the integer encoding of a clipped update
(``encoding.py``) and the pairwise-masking protocol whose server sees only masked vectors and
their modular sum (``protocol.py``). The component that places them on a summing strategy's
upload path, with distributed discrete noise, is ``strategies/distributed_dp.py``."""
