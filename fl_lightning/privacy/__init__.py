"""Privacy: what a round spends and its ε, the mechanisms that add the noise, and the run's
guarantee, one sub-package per concern (bottom to top; each imports only the ones below it,
never ``fl_lightning.records`` or anything above):

* ``accounting/``: the events a round spends and the pure ε maths over them (no sibling);
* ``audit/``: ε estimated from one training run's canary scores (no sibling);
* ``mechanisms/``: central and local noise, clipping, σ and C, DP-SGD's noise (accounting);
* ``correlated/``: DP-FTRL's matrix mechanism and its factorisations (accounting);
* ``distributed/``: secure aggregation simulated, distributed discrete noise and its RDP
  (accounting);
* ``guarantee/``: the run's accountant, the per-observer ε and the privacy statement
  (accounting, distributed).

The components that place a mechanism on a strategy's round (central DP, adaptive clipping,
distributed DP behind SecAgg) read and write round records, so they live in
``fl_lightning/strategies/``.
"""
