"""Testing helpers for people who write strategies (and for this package's own tests).

* :func:`simulate` / :class:`Simulation`: rounds of a strategy on ``FederatedRound`` without
  Lightning, in this process (``simulation.py``);
* :func:`round_context`: the ``RoundContext`` of one round, for unit tests of one hook;
* :func:`registered_strategies`: every strategy class the CLI can name;
* :func:`secrecy_problems`: the secure-mode contract (``secrecy.py``).

This package sits with the tools, above the server (``tests/test_import_layers.py``): nothing in
the library imports it.
"""

from fl_lightning.testing.contexts import round_context
from fl_lightning.testing.registry import registered_strategies
from fl_lightning.testing.secrecy import secrecy_problems
from fl_lightning.testing.simulation import RoundResult, Simulation, epsilons_equal, simulate

__all__ = [
    "RoundResult",
    "Simulation",
    "epsilons_equal",
    "registered_strategies",
    "round_context",
    "secrecy_problems",
    "simulate",
]
