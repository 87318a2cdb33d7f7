"""Distributed DP behind secure aggregation, and what the server gets: SecAgg simulated
faithfully (``secagg/``: the integer encoding, the pairwise-masking protocol whose server sees
only the modular sum of the survivors, the masking graph's connectivity), the distributed
discrete noise every client adds a share of (``noise.py`` contract, ``ddg.py``, ``skellam.py``,
by name in ``registry.py``), its RDP accounting with the survivors' noise (``accounting.py``)
and the refusals of a run that can release nothing useful (``release_check.py``). It may import
``privacy/accounting`` and nothing else of ``fl_lightning.privacy``; the component that places
it on a summing strategy's upload path is ``fl_lightning/strategies/distributed_dp.py``."""
