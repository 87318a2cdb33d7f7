"""Privacy mechanisms on flat float32 tensors, one family a file.

Every mechanism follows one contract (``base.py``): ``release`` constrains its input, adds noise
from the generator it is handed and returns the event of that noise (:class:`Release`). A
mechanism is placed either on each client's update (local DP) or on the aggregate (central DP);
the classes are the same, only the placement differs (``privacy/placement.py``).
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
