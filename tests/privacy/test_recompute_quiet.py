"""dp-accounting's RDP convergence warnings stay off the console (issue 55 item 10): the
recomputation of the quickstart's ledger printed 320 ``_compute_log_a_frac failed to converge
... Excluding this order`` lines on the first tutorial's step 3; the orders are still excluded
(ε stays an upper bound) and :func:`excluded_orders` says which."""

from __future__ import annotations

import logging

import dp_accounting

from fl_lightning.privacy.accounting.recompute import excluded_orders, gaussian_history_epsilon

ROWS = [[1.5, 0.5, 1, 0]] * 40  # the quickstart's ledger: 40 rounds of σ 1.5 at q = 0.5


def test_the_recomputation_logs_no_convergence_warning(caplog):
    with caplog.at_level(logging.WARNING):
        eps = gaussian_history_epsilon(ROWS, 1e-5, "rdp")
    assert eps > 0
    assert not [r for r in caplog.records if "failed to converge" in r.getMessage()]


def test_excluded_orders_are_collected_not_printed(caplog):
    acc = dp_accounting.rdp.RdpAccountant(orders=[1 + x / 10.0 for x in range(1, 100)])
    event = dp_accounting.PoissonSampledDpEvent(0.5, dp_accounting.GaussianDpEvent(1.5))
    with caplog.at_level(logging.WARNING), excluded_orders() as orders:
        acc.compose(event, 40)
    assert orders and all(1.0 < a < 11.0 for a in orders), orders
    assert not [r for r in caplog.records if "failed to converge" in r.getMessage()]
    with caplog.at_level(logging.WARNING):  # outside the context dp-accounting warns as before
        dp_accounting.rdp.RdpAccountant(orders=orders[:1]).compose(event, 1)
    assert [r for r in caplog.records if "failed to converge" in r.getMessage()]
