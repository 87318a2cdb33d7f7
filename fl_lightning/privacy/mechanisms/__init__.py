"""Central and local noise on flat float32 tensors, one family a file, and what every
mechanism shares: clipping (``clipping.py``, where a release's sensitivity is enforced), σ and C
validated in one place (``params.py``), DP-SGD's noise for many clients at once
(``dp_sgd_noise.py``, ``counter_noise.py``) and local DP under a per-client budget
(``local_budget.py``). It may import ``privacy/accounting`` (the events it builds, ε of a
release) and nothing else of ``fl_lightning.privacy``.

Every mechanism follows one contract (``base.py``): ``release`` constrains its input, adds noise
from the generator it is handed and returns the event of that noise (:class:`Release`). A
mechanism is placed either on each client's update (local DP) or on the aggregate (central DP);
the classes are the same, only the placement differs (``strategies/placement.py``).
"""

from fl_lightning.privacy.mechanisms.base import Mechanism, Release
from fl_lightning.privacy.mechanisms.gaussian import GaussianMechanism
from fl_lightning.privacy.mechanisms.laplace import LaplaceMechanism

__all__ = [
    "GaussianMechanism",
    "LaplaceMechanism",
    "Mechanism",
    "Release",
]
