"""Privacy mechanisms on flat float32 tensors, one family a file.

A mechanism is placed either on each client's update (local DP) or on the aggregate (central DP);
the classes are the same, only the placement differs (DESIGN.md, "Interfaces").
"""

from fl_lightning.privacy.mechanisms.base import Mechanism
from fl_lightning.privacy.mechanisms.gaussian import GaussianMechanism
from fl_lightning.privacy.mechanisms.laplace import LaplaceMechanism

__all__ = [
    "GaussianMechanism",
    "LaplaceMechanism",
    "Mechanism",
]
